"""Runs an offsets action on a job's consumer group: the I/O half of
`spark_app.api.offsets_admin` (which plans, purely): reads the group's committed offsets and the
log ranges with the source's own look-ups (`spark_app.kafka.metadata`), plans, and commits
with a standalone commit of the group (no subscription, so no rebalance)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from spark_app.api.offsets import TopicPartition
from spark_app.api.offsets_admin import (
    OffsetsRefused,
    OffsetsRequest,
    OffsetsResult,
    PartitionOffsets,
    plan,
    selected,
)
from spark_app.kafka.errors import KafkaUnavailable

if TYPE_CHECKING:
    from spark_app.kafka.metadata import KafkaMetadata


def run(
    metadata: KafkaMetadata, request: OffsetsRequest, *, dry_run: bool = False
) -> OffsetsResult:
    """Reads, plans and (unless list or dry_run) commits with `metadata`, a
    `spark_app.kafka.metadata.KafkaMetadata` of the job's source. Raises OffsetsRefused, or
    KafkaUnavailable / UnknownTopic when Kafka does not answer or a topic is missing."""
    group = metadata.options.group_id
    if not group:
        raise OffsetsRefused("the job's source has no groupId: there are no group offsets")
    tps = selected(request, metadata.topic_partitions())
    ranges = metadata.watermarks(tps)
    committed = metadata.committed(tps)
    by_time = None
    if request.action == "reset" and request.to == "timestamp":
        if request.timestamp_ms is None:
            raise OffsetsRefused("reset to timestamp needs a timestamp")
        by_time = metadata.offsets_for_time(tps, request.timestamp_ms)
    new = plan(request, committed, ranges, by_time)
    if new and not dry_run:
        _commit(metadata, group, new)
    rows = tuple(
        PartitionOffsets(
            topic=t,
            partition=p,
            before=committed.get((t, p)),
            after=new.get((t, p), committed.get((t, p))) if not dry_run else committed.get((t, p)),
            log_start=ranges[(t, p)][0],
            log_end=ranges[(t, p)][1],
        )
        for t, p in tps
    )
    return OffsetsResult(request=request, group=group, partitions=rows)


# The broker's answers to a standalone commit while the group has live members.
_GROUP_BUSY = ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")


def _commit(metadata: KafkaMetadata, group: str, offsets: dict[TopicPartition, int]) -> None:
    try:
        metadata.commit(offsets)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        name = error.name() if error is not None and hasattr(error, "name") else str(error)
        if name in _GROUP_BUSY:
            raise OffsetsRefused(
                f"group {group} has live members ({name}): a consumer outside the job is "
                "subscribed with this group; stop it first (Kafka refuses to alter the "
                "offsets of an active group)"
            ) from None
        raise KafkaUnavailable(
            f"Kafka at {metadata.options.bootstrap_servers} refused the commit of group "
            f"{group}: {error}"
        ) from None
