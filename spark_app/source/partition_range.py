"""One partition's range to read, as the driver plans it and every read path takes it
(KafkaInputPartition, the client settings, Spark's schema), and the ends a read can come to: a
topic deleted, offsets lost, a log truncated, no progress.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    from spark_app.formats.typed_values import TypedValues
    from spark_app.sinks.dead_letter import DeadLetterTarget

log = logging.getLogger(
    "spark_app.source.partition_reader"
)  # the read's lines, wherever they come from


# librdkafka stops prefetching a partition once queued.min.messages are queued and then
# waits fetch.queue.backoff.ms (1 s): a bounded range reads 2-3x faster without that pause.
# A short backoff keeps the fetcher ahead, so the queue can stay small: a 1M-message queue
# (and 8 MB fetches) cost ~25% more CPU per record in page faults for fresh memory than
# 50k messages and 2 MB fetches, at the same rate. Each can be overridden through kafka.*.
FETCH_DEFAULTS = {
    "queued.min.messages": 50_000,
    "queued.max.messages.kbytes": 65_536,
    "fetch.queue.backoff.ms": 10,
    "max.partition.fetch.bytes": 2 << 20,
}


def spark_schema(include_headers: bool) -> StructType:
    """The columns of Spark's built-in Kafka source (built without a SparkContext, because
    executors' Python workers have none)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class DataLossError(RuntimeError):
    """Offsets to read were deleted (retention) or a partition went away."""


class TopicDeletedError(RuntimeError):
    """The topic was deleted while a range of it was read."""


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int
    client_config: dict = field(repr=False)  # may hold credentials: never in repr or logs
    # the leader epoch kept in the checkpoint with `start` (None: unknown, e.g. a checkpoint
    # of an older version): the read first asks the leader whether its log still holds
    # what was read up to `start` (KIP-320, semantics rule 16)
    start_epoch: int | None = None
    # the leader epoch the plan's `end` came with (None: unknown): that leader's log held
    # every offset below `end`, so a record there of a later leader is one an unclean
    # election wrote after the plan, and the read ends before it (semantics rule 16)
    end_epoch: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    max_records_per_batch: int = 10_000
    read_path: str = "auto"  # auto | native | python
    native_engine: str = "auto"  # auto | fetch | librdkafka
    values: TypedValues | None = None  # valueFormat avro/json: decoded after the read
    keys: TypedValues | None = None  # keyFormat avro/json: likewise
    dead_letter: DeadLetterTarget | None = None  # where records that cannot be decoded go
    headers_for_dead_letter_only: bool = False  # read for the dead-letter copies, not output
    announce_range: bool = False  # for the exactly-once Kafka sink (sinks/task_ranges.py)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


def topic_deleted(p: KafkaInputPartition, position: int) -> TopicDeletedError:
    return TopicDeletedError(
        f"topic {p.topic} was deleted while the job read {p.name} [{p.start}, {p.end}) "
        f"(stuck at offset {position}); the batch fails and nothing past the last completed "
        f"batch is committed. Recreate topic {p.topic} and restart the job, or redeploy "
        "without it (spec.job.source.subscribe)"
    )


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool):
    """Exactly the Arrow schema Spark checks batches against (to_arrow_schema, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


def client_config(p: KafkaInputPartition) -> dict:
    """The executor consumer's configuration, the same on both read paths."""
    config = {**FETCH_DEFAULTS, **p.client_config}
    config.update(
        {
            # An out-of-range start must be an error we handle, never a silent jump to the end.
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    config.setdefault("group.id", "kafka-checkpointed-reader")
    return config


_DONE = object()


def gc_paused(steps: Iterator) -> Iterator:
    """Runs each step of `steps` with Python's cyclic garbage collector paused; the caller's
    code between steps (Spark writing a batch) runs with it as it was.

    Every record allocates objects the collector tracks (the `Message`, its timestamp
    tuple), so it ran every few hundred records and walked all live ones, and the whole
    heap once records reached the old generation: ~40% of the read path's time before
    records were taken apart per chunk, ~18% after. Reading creates no reference cycles
    (reference counting frees everything), as the Spark Connect client assumes when it
    pauses the collector around its own parsing."""
    while True:
        enabled = gc.isenabled()
        gc.disable()
        try:
            item = next(steps, _DONE)
        finally:
            if enabled:
                gc.enable()
        if item is _DONE:
            return
        yield item


def no_progress(p: KafkaInputPartition, position: int) -> TimeoutError:
    return TimeoutError(
        f"{p.name}: no progress reading [{p.start}, {p.end}) for "
        f"{p.poll_timeout_ms} ms (stuck at {position}); is the broker reachable and "
        "is an open transaction holding back the last stable offset?"
    )


def offsets_lost(p: KafkaInputPartition, position: int, low: int) -> None:
    """Offsets `position..low-1` were deleted: raises per failOnDataLoss, or warns (then the
    caller continues at `low`)."""
    message = (
        f"{p.name}: offsets {position}..{low - 1} were deleted before they were read "
        f"(log start is now {low}, batch range [{p.start}, {p.end}))"
    )
    if p.fail_on_data_loss:
        raise DataLossError(
            message + "; failOnDataLoss=true. Restart with failOnDataLoss=false "
            "to skip them, or redeploy to start from committed offsets"
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", message)


def log_truncated(p: KafkaInputPartition, position: int, divergence: int) -> None:
    """The partition's log no longer holds offsets `divergence..position-1` as they were read
    (an unclean leader election, lost replicas): raises per failOnDataLoss, or warns (then
    the caller reads on from `divergence`, the records the new leader has there)."""
    message = (
        f"{p.name}: the log was truncated below the read position: offsets "
        f"{divergence}..{position - 1} were read from a leader whose log the new leader "
        f"does not have (an unclean leader election or lost replicas; batch range "
        f"[{p.start}, {p.end}))"
    )
    if p.fail_on_data_loss:
        raise DataLossError(
            message + "; failOnDataLoss=true. Restart with failOnDataLoss=false to read on "
            f"from offset {divergence}, or redeploy to start from committed offsets"
        )
    log.warning("%s; reading on from offset %d (failOnDataLoss=false)", message, divergence)


def written_after_the_plan(p: KafkaInputPartition, epoch: int | None) -> bool:
    """Whether a record of leader epoch `epoch` was written after `p` was planned (and so
    not `p`'s): a later leader's record below the plan's end is one an unclean election put
    where the log was truncated. Read on, it would be read again by the next batch, whose
    start is validated with the plan's end epoch and goes back to where that log ends."""
    return p.end_epoch is not None and epoch is not None and epoch > p.end_epoch


def read_cut(p: KafkaInputPartition, at: int, epoch: int) -> None:
    """The read ends at `at`, the first record of a leader elected after the plan: the next
    batch's validated start finds the truncation and judges it per failOnDataLoss."""
    log.warning(
        "%s: offsets from %d on were written by a leader elected after the batch was planned "
        "(leader epoch %d, the plan's %d): the log was truncated below the batch's end %d. "
        "The read ends at %d; the next batch reads them once, from where the log diverged "
        "(failOnDataLoss decides)",
        p.name,
        at,
        epoch,
        p.end_epoch,
        p.end,
        at,
    )
