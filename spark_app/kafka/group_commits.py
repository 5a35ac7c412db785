"""Standalone commits to the job's consumer group (no subscription, so no rebalance): one
synchronous commit, the same retried through a coordinator or leader move, and the commit
function the source's committer calls. A commit refused because the group has live members
is the caller's to explain, never retried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from spark_app.api.offsets import Epochs, Positions
from spark_app.api.options import SourceOptions
from spark_app.kafka.retry import (
    DEADLINE_S,
    Attempts,
    GaveUp,
    is_transient,
    kafka_error,
    retrying,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer


# A standalone commit refused because the group has live members (ILLEGAL_GENERATION,
# UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS): the user's answer to give, never retried.
_GROUP_BUSY_CODES = frozenset({22, 25, 27})


def _commit_transient(failure: BaseException) -> bool:
    error = kafka_error(failure)
    return is_transient(failure) and not (error and error.code() in _GROUP_BUSY_CODES)


def commit_sync(consumer: Consumer, offsets: Positions, epochs: Epochs | None = None) -> None:
    """One synchronous standalone commit; a partition the broker refused raises its error.
    `epochs`: the leader epoch kept with each position in the checkpoint, committed beside it
    (KIP-320), so that a redeploy's fresh start from these offsets can ask the leader whether
    its log still holds what was read below them (semantics rule 16)."""
    from confluent_kafka import KafkaException
    from confluent_kafka import TopicPartition as KafkaTP

    known = epochs or {}
    answer = consumer.commit(
        offsets=[
            # -1: none known (the client takes no None)
            KafkaTP(t, p, o, leader_epoch=known.get((t, p), -1))
            for (t, p), o in sorted(offsets.items())
        ],
        asynchronous=False,
    )
    failed = [tp for tp in answer or () if tp.error is not None]
    if failed:
        raise KafkaException(failed[0].error)


def commit_retried(
    consumer: Consumer, offsets: Positions, deadline_s: float, epochs: Epochs | None = None
) -> None:
    """`commit_sync` through a coordinator or leader move (spark_app.kafka.retry), within
    `deadline_s`; a refusal or the last failure raises the client's own exception."""
    try:
        retrying(
            lambda _timeout: commit_sync(consumer, offsets, epochs),
            Attempts(deadline_s),
            transient=_commit_transient,
        )
    except GaveUp as exc:
        raise exc.last from None


def group_committer(
    options: SourceOptions, timeout_s: float = DEADLINE_S
) -> Callable[[Positions, Epochs], None]:
    """A commit function for OffsetCommitter: a standalone commit to the group (no
    subscription, so no rebalance), with its own client so it never blocks planning, retried
    through a coordinator or leader move within `timeout_s` (spark_app.kafka.retry)."""
    from confluent_kafka import Consumer

    if options.group_id is None:  # commits are only made for a group (SourceOptions)
        raise ValueError("no kafka.group.id to commit to")
    consumer = Consumer(options.client(**{"group.id": options.group_id}))

    def commit(offsets: Positions, epochs: Epochs) -> None:
        commit_retried(consumer, offsets, timeout_s, epochs)

    return commit
