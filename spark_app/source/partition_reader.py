"""Executor side: read exactly `[start, end)` of one partition as Arrow record batches.

Runs in a Python worker on an executor, from a pickled copy of the reader, so everything it
needs travels in `KafkaInputPartition`. It is pure (no commits, no side effects) because
Spark may run a task twice (retries, speculation).

A range is finished when the consumer's position reaches `end`, not when a message with
offset `end - 1` arrives: transaction markers and compaction leave gaps in offsets.

Two read paths give the same batches: the native one (`spark_app.source.native_read`: Kafka's
record batches or librdkafka's messages straight into Arrow buffers, no Python object per
record) when its module can be imported, and the pure-Python one here (confluent-kafka
`Message` objects taken apart into columns). The `readPath` option picks one: `auto`
(default), `native` or `python`; `nativeEngine` picks the native path's engine.
"""

from __future__ import annotations

import gc
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import cast

from spark_app.source import native_read
from spark_app.source.leader_epochs import TRUNCATED_AT, ended_with_its_epoch, validate_start
from spark_app.source.partition_range import (
    KafkaInputPartition,
    arrow_schema,
    client_config,
    gc_paused,
    log_truncated,
    no_progress,
    offsets_lost,
    read_cut,
    topic_deleted,
    written_after_the_plan,
)

log = logging.getLogger(__name__)

_CONSUME_WAIT_S = 0.2
_CONSUME_CHUNK = 1000


# How long a topic must stay out of the metadata before a stalled read calls it deleted (a
# broker that just restarted may not know every topic yet); the native engines and the
# driver (spark_app.kafka.metadata.METADATA_SETTLE_S) wait as long, and look once a second.
TOPIC_GONE_AFTER_S = 5.0
TOPIC_CHECK_EVERY_S = 1.0


class TopicWatch:
    """Whether the topic a stalled read reads was deleted: absent from the metadata for
    TOPIC_GONE_AFTER_S (librdkafka tells an assigned consumer nothing of it: it waits)."""

    def __init__(self, p: KafkaInputPartition):
        self._p = p
        self._missing_since: float | None = None
        self._looked = time.monotonic()

    def check(self, consumer, stalled_since: float, position: int) -> None:
        """Raises TopicDeletedError once the topic has been missing long enough."""
        now = time.monotonic()
        if now - stalled_since < TOPIC_GONE_AFTER_S or now - self._looked < TOPIC_CHECK_EVERY_S:
            return
        self._looked = now
        if self._exists(consumer):
            self._missing_since = None
        elif self._missing_since is None:
            self._missing_since = now
        elif now - self._missing_since >= TOPIC_GONE_AFTER_S:
            raise topic_deleted(self._p, position)

    def _exists(self, consumer) -> bool:
        """An unanswered request counts as yes: an unreachable broker is the poll timeout's
        matter, not a deletion."""
        from confluent_kafka import KafkaError, KafkaException

        try:
            topic = consumer.list_topics(self._p.topic, timeout=5).topics.get(self._p.topic)
        except KafkaException:
            return True
        return topic is not None and (
            topic.error is None or topic.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART
        )


def read_range(p: KafkaInputPartition) -> Iterator:
    """The records of `[p.start, p.end)` as Arrow record batches of Spark's schema."""
    if p.end <= p.start:
        return
    _freeze_heap_once()
    config = client_config(p)
    if p.read_path != "python":
        reader = native_read.open_range(p, config)  # None: fall back to pure Python
        if reader is not None:
            yield from native_read.drain(reader, p)
            return
    yield from _read_range_python(p, config)


def _read_range_python(p: KafkaInputPartition, config: dict) -> Iterator:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(p.topic, p.partition, p.start)])
        if p.start_epoch is not None:
            validate_start(consumer, p)
        yield from gc_paused(_drain(consumer, p))
    finally:
        consumer.close()


_frozen: list[bool] = []


def _freeze_heap_once() -> None:
    """Moves what the Python worker holds before its first read (pyspark, pyarrow, confluent,
    our modules: hundreds of thousands of objects) out of the cyclic collector's sight, once
    per process. Spark's code between our batches still allocates, and each full collection
    walked that whole heap: ~25% of a native-path worker's CPU (perf). New objects are
    collected as before."""
    if not _frozen:
        _frozen.append(True)
        gc.collect()
        gc.freeze()


def _drain(consumer, p: KafkaInputPartition) -> Iterator:
    from confluent_kafka import Message, TopicPartition

    record_offset = cast("Callable[[Message], int]", Message.offset)  # records have offsets

    has_error = Message.error
    schema = arrow_schema(p.include_headers)
    tp = TopicPartition(p.topic, p.partition)
    position, end = p.start, p.end
    batch = _BatchBuilder(p, schema)
    timeout_s = p.poll_timeout_ms / 1000
    progressed = time.monotonic()
    watch = TopicWatch(p)
    while position < end:
        rewound = False
        # Small consume() calls return as soon as a fetch lands (a large one waits for the
        # whole count, and walks more memory per call); chunks are gathered into batches of
        # up to maxRecordsPerBatch.
        wanted = min(_CONSUME_CHUNK, end - position, p.max_records_per_batch - batch.count)
        messages = consumer.consume(wanted, _CONSUME_WAIT_S)
        if messages:
            progressed = time.monotonic()
            if any(map(has_error, messages)):  # events come in line: rare, so checked once
                messages, position, rewound = _handle_events(consumer, p, messages, position)
        if messages and p.end_epoch is not None:
            end = _end_before_later_leaders(p, messages, end)
        if messages:
            last = messages[-1].offset()
            if last >= end:  # prefetched past the range: offsets ascend, so cut by offset
                messages = messages[: bisect_left(messages, end, key=record_offset)]
                position = end if not rewound else position
            elif not rewound:  # after a truncation the position is the divergence point
                position = max(position, last + 1)
            if messages:
                batch.add(messages)
        if position < end:
            # Control records and compaction gaps advance the position without messages.
            (at,) = consumer.position([tp])
            position = max(position, at.offset)
        if batch.count and (batch.count >= p.max_records_per_batch or position >= end):
            yield batch.build()
        if not messages and position < end:
            if time.monotonic() - progressed > timeout_s:
                if not ended_with_its_epoch(p, position):
                    raise no_progress(p, position)
                break  # the plan's leader's log ends here: what the batch holds goes out
            watch.check(consumer, progressed, position)
    if batch.count:
        yield batch.build()


def _end_before_later_leaders(p: KafkaInputPartition, messages: list, end: int) -> int:
    """`end`, or the offset of the chunk's first record below it of a leader elected after
    the plan (a record's epoch ascends with its offset: the chunk's last tells whether any
    is); the records from there on are cut as records past the end are."""
    later = cast("Callable[[object], bool]", lambda m: written_after_the_plan(p, m.leader_epoch()))
    if not later(messages[-1]):
        return end
    first = messages[bisect_left(messages, True, key=later)]
    if first.offset() >= end:  # a later leader past the range: the next batch's records
        return end
    read_cut(p, first.offset(), first.leader_epoch())
    return first.offset()


def _handle_events(consumer, p: KafkaInputPartition, messages: list, position: int):
    """The records of a chunk that holds events (end of partition, offset out of range, log
    truncation) or errors, in order, the position the events imply, and whether it moved
    back (to where a truncated log diverges)."""
    from confluent_kafka import KafkaError, KafkaException

    records = []
    for message in messages:
        error = message.error()
        if error is None:
            records.append(message)
            position = max(position, message.offset() + 1)
        elif error.code() == KafkaError._PARTITION_EOF:
            position = max(position, message.offset())
        elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            resumed = _out_of_range(consumer, p, position, error)
            if resumed < position:
                return records, resumed, True  # what followed came from the old log
            position = resumed
        else:
            raise KafkaException(error)
    return records, position, False


def _out_of_range(consumer, p: KafkaInputPartition, position: int, error) -> int:
    """Where to read on after librdkafka's offset reset (`auto.offset.reset=error`): past
    deleted offsets, or back where a truncated log diverges (librdkafka's KIP-320 validation
    says where only in its text: "…log truncation detected at …: broker end offset is N");
    raises per failOnDataLoss, or librdkafka's error when it is neither."""
    from confluent_kafka import KafkaException, TopicPartition

    low, high = consumer.get_watermark_offsets(TopicPartition(p.topic, p.partition), timeout=30)
    found = TRUNCATED_AT.search(error.str())
    divergence = int(found.group(1)) if found else high
    if position < low:
        offsets_lost(p, position, low)
        resume = low
    elif divergence < position:
        log_truncated(p, position, divergence)
        resume = divergence
    else:
        raise KafkaException(error)
    if resume < p.end:  # past it the range is read; and closing right after a re-assignment
        # can trip librdkafka's assertion `rktp->rktp_started` and abort the process
        consumer.assign([TopicPartition(p.topic, p.partition, resume)])  # seek fails here
    return resume


_TIMESTAMP_TYPE = itemgetter(0)
_TIMESTAMP_MS = itemgetter(1)


class _BatchBuilder:
    """Columns of the next Arrow batch, taken from each `consume()` chunk at once, so a
    chunk's `Message` objects are freed right away instead of piling up for a whole batch.
    Per record only the unavoidable C calls run (key, value, timestamp), through `map` over
    unbound methods: no Python frame, no attribute lookup per record. Offsets of a gap-free
    run, uniform timestamp types, null keys and constant columns are built by Arrow."""

    def __init__(self, p: KafkaInputPartition, schema):
        from confluent_kafka import Message

        record_offset = cast("Callable[[Message], int]", Message.offset)  # records have one
        self._p, self._schema = p, schema
        self._key, self._value = Message.key, Message.value
        self._timestamp, self._offset, self._headers = (
            Message.timestamp,
            record_offset,
            Message.headers,
        )
        self._reset()

    def _reset(self) -> None:
        self.count = 0
        self._first = 0  # offset of the batch's first record
        self._offsets: list[int] | None = None  # only once the batch has a gap
        self._keys: list = []
        self._values: list = []
        self._millis: list = []
        self._kinds: list = []
        self._headers_of: list = []

    def add(self, messages: list) -> None:
        """One chunk of records (no events), offsets ascending."""
        n = len(messages)
        first, last = messages[0].offset(), messages[-1].offset()
        if self.count == 0:
            self._first = first
        if self._offsets is None and (first != self._first + self.count or last - first != n - 1):
            self._offsets = list(range(self._first, self._first + self.count))
        if self._offsets is not None:
            self._offsets += map(self._offset, messages)
        self._keys += map(self._key, messages)
        self._values += map(self._value, messages)
        stamps = list(map(self._timestamp, messages))
        self._kinds += map(_TIMESTAMP_TYPE, stamps)
        self._millis += map(_TIMESTAMP_MS, stamps)
        if self._p.include_headers:
            self._headers_of += map(self._headers, messages)
        self.count += n

    def build(self):
        """The batch as a `pa.RecordBatch` with Spark's exact schema; starts a new one."""
        batch = to_record_batch(
            self._p,
            self._schema,
            first_offset=self._first,
            offsets=self._offsets,
            keys=self._keys,
            values=self._values,
            kinds=self._kinds,
            millis=self._millis,
            headers=self._headers_of if self._p.include_headers else None,
        )
        self._reset()
        return batch


def to_record_batch(
    p: KafkaInputPartition,
    schema,
    *,
    first_offset: int,
    offsets: list[int] | None,
    keys: list,
    values: list,
    kinds: list[int],
    millis: list[int],
    headers: list | None,
):
    """Arrow columns from per-record lists; `offsets` None means a gap-free run from
    `first_offset`. confluent timestamp types 0 n/a, 1 CreateTime, 2 LogAppendTime become
    Spark's -1, 0, 1; n/a has a null timestamp."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(values)
    if offsets is None:  # first, first + 1, ... without a Python int per record
        offset_column = pc.add(
            pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), first_offset - 1
        )
    else:
        offset_column = pa.array(offsets, pa.int64())
    kind = kinds[0]
    micros = pc.multiply(pa.array(millis, pa.int64()), 1000)
    if kinds.count(kind) == n:
        types = pa.repeat(pa.scalar(kind - 1, pa.int32()), n)
        if kind == 0:
            micros = pa.nulls(n, pa.int64())
    else:
        kind_column = pa.array(kinds, pa.int32())
        types = pc.subtract(kind_column, 1)
        micros = pc.if_else(pc.equal(kind_column, 0), pa.scalar(None, pa.int64()), micros)
    columns = [
        pa.nulls(n, pa.binary()) if keys.count(None) == n else pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(p.topic, pa.string()), n),
        pa.repeat(pa.scalar(p.partition, pa.int32()), n),
        offset_column,
        micros.cast(pa.timestamp("us", tz="UTC")),
        types,
    ]
    if headers is not None:
        empty: tuple = ()
        columns.append(
            pa.array(
                [empty if h is None else h for h in headers],  # tuples fill the struct fields
                schema.field("headers").type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)
