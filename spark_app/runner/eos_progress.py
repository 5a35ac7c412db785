"""The exactly-once Kafka sink's progress as a redeploy's catch-up reads it (rule 9).

A driver killed after some of batch N's transactions committed and before `commits/N` leaves
output in the topic that the checkpoint does not count as durable. A restore skips those
ranges (`sink_rules.already_committed`); a redeploy starts a new checkpoint from the
group's offsets, so the catch-up first moves the group, per source partition, to the end
of the range the previous checkpoint's query committed to the topic (`merge`). The group
then never starts below committed output, and never passes it (the progress is the
output's own transaction's).
"""

from __future__ import annotations

from collections.abc import Callable

from spark_app.api.manifest import RunnerManifest
from spark_app.api.offsets import Positions
from spark_app.api.sink_rules import (
    PROGRESS_PARTITION,
    Progress,
    checkpoint_id,
    transactional_id,
    transactional_prefix,
)
from spark_app.kafka.config import sink_client
from spark_app.kafka.retry import DEADLINE_S
from spark_app.kafka.transactions import progress_reader
from spark_app.runner.checkpoint_log import (
    CheckpointFiles,
    CheckpointUnreadable,
    DurableBatch,
    source_end_offsets,
)


def merge(
    durable: DurableBatch | None, planned: DurableBatch | None, committed: Positions
) -> DurableBatch | None:
    """The previous checkpoint's durable batch, moved on where the sink's transactions of
    the batch after it (`planned`, its offset-log entry) committed further (`committed`).
    Never past the planned batch's ends."""
    if planned is None or not committed:
        return durable
    end = dict(durable.end) if durable is not None else {}
    moved = False
    for tp, offset in committed.items():
        if offset > end.get(tp, -1) and offset <= planned.end.get(tp, -1):
            end[tp], moved = offset, True
    if not moved:
        return durable
    # the epochs kept with the durable batch's ends hold for the positions left where they were
    kept = (
        {}
        if durable is None
        else {tp: e for tp, e in durable.epochs.items() if durable.end.get(tp) == end.get(tp)}
    )
    return DurableBatch(planned.batch_id, end, kept)


def committed_ranges(
    read: Callable[[str, str, int], Progress],
    prefix: str,
    sink_topic: str,
    location: str,
    partitions: list[tuple[str, int]],
) -> Positions:
    """Per source partition, the end of the range whose output the query at `location`
    committed, read from each writer's progress group (`read(group, topic, partition)`)."""
    mine = checkpoint_id(location)
    found = {}
    for topic, partition in partitions:
        group = transactional_id(prefix, topic, partition)
        done = read(group, sink_topic, PROGRESS_PARTITION)
        if done.metadata == mine and done.offset >= 0:
            found[(topic, partition)] = done.offset
    return found


def with_sink_progress(
    spark, manifest: RunnerManifest, location: str, durable: DurableBatch | None
) -> DurableBatch | None:
    """`durable` (the previous checkpoint at `location`'s) moved on by what its exactly-once
    Kafka sink committed of the next batch; unchanged for other sinks. A failure to read is
    `CheckpointUnreadable` (the start fails and is retried: nothing read twice)."""
    job = manifest.spec.job
    if not location or job.sink.format != "kafka" or job.sink.guarantee != "exactly-once":
        return durable
    try:
        files = CheckpointFiles(spark, location)
        newest = files.newest("offsets")
        if newest is None or (durable is not None and newest <= durable.batch_id):
            return durable
        planned = DurableBatch(newest, source_end_offsets(files.read("offsets", newest)))
        committed = committed_ranges(
            progress_reader(sink_client(job), DEADLINE_S),
            transactional_prefix(manifest.metadata.name, location),
            job.sink.topic or "",
            location,
            sorted(planned.end),
        )
    except CheckpointUnreadable:
        raise
    except Exception as exc:
        raise CheckpointUnreadable(f"the kafka sink's progress of {location}: {exc}") from None
    return merge(durable, planned, committed)
