"""The executor read path without a broker: a scripted consumer hands out real confluent
`Message` objects (records and in-line events) the way `consume()` does, and each batch
must hold exactly `[start, end)` with Spark's schema. The same paths on a real broker:
tests/integration/spark_app/test_source_on_broker.py."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTP

from spark_app.source import partition_reader as reader
from spark_app.source.partition_range import (
    DataLossError,
    KafkaInputPartition,
    arrow_schema,
    gc_paused,
)
from spark_app.source.partition_reader import _drain

pytestmark = pytest.mark.unit

TOPIC = "orders"
CREATE, LOG_APPEND, NO_TIMESTAMP = 1, 2, 0  # confluent's timestamp types


def record(offset: int, *, key=None, value=b"v", kind=CREATE, ms=None, headers=None) -> Message:
    stamp = (kind, 1_700_000_000_000 + offset if ms is None else ms)
    if kind == NO_TIMESTAMP:
        stamp = (NO_TIMESTAMP, -1)
    return Message(
        topic=TOPIC,
        partition=0,
        offset=offset,
        key=key,
        value=value,
        timestamp=stamp,
        headers=headers,
    )


def event(code: int, offset: int = -1001) -> Message:
    return Message(topic=TOPIC, partition=0, offset=offset, error=KafkaError(code))


class ScriptedConsumer:
    """`consume(n)` returns at most n items of the next scripted chunk (the rest stays for
    the next call, like librdkafka's queue); `position()` is the offset after the last
    delivered record, moved past `markers` (transaction markers, compaction gaps)."""

    def __init__(self, chunks, markers=(), low: int = 0):
        self.chunks = [list(c) for c in chunks]
        self.markers = set(markers)
        self.low = low
        self.pos = 0
        self.requested: list[int] = []
        self.assigned: list[int] = []

    def consume(self, num: int, timeout: float) -> list:
        self.requested.append(num)
        while self.chunks and not self.chunks[0]:
            self.chunks.pop(0)
        if not self.chunks:
            return []
        out, self.chunks[0] = self.chunks[0][:num], self.chunks[0][num:]
        for m in out:
            if m.error() is None:
                self.pos = m.offset() + 1
        while self.pos in self.markers:
            self.pos += 1
        return out

    def position(self, tps):
        (tp,) = tps
        return [KafkaTP(tp.topic, tp.partition, self.pos)]

    def get_watermark_offsets(self, tp, timeout=None):
        return self.low, 10**9

    def assign(self, tps):
        self.assigned.append(tps[0].offset)
        self.pos = tps[0].offset


def part(start: int, end: int, **kw) -> KafkaInputPartition:
    return KafkaInputPartition(
        topic=TOPIC,
        partition=0,
        start=start,
        end=end,
        client_config={},
        poll_timeout_ms=kw.pop("poll_timeout_ms", 5_000),
        **kw,
    )


def rows(consumer, p) -> list[dict]:
    batches = list(_drain(consumer, p))
    for batch in batches:
        assert batch.schema.equals(arrow_schema(p.include_headers))
    return [r for b in batches for r in b.to_pylist()]


def test_a_gap_free_range_in_chunks_becomes_batches_of_max_records():
    consumer = ScriptedConsumer([[record(o) for o in range(10, 35)]])
    batches = list(_drain(consumer, part(10, 35, max_records_per_batch=10)))
    assert [b.num_rows for b in batches] == [10, 10, 5]
    got = [r for b in batches for r in b.to_pylist()]
    assert [r["offset"] for r in got] == list(range(10, 35))
    assert {(r["topic"], r["partition"], r["timestampType"]) for r in got} == {(TOPIC, 0, 0)}
    assert got[0]["timestamp"].timestamp() == pytest.approx(1_700_000_000.010)
    assert all(r["key"] is None and r["value"] == b"v" for r in got)


def test_offsets_with_gaps_are_taken_per_record_from_the_first_gap_on():
    # a gap-free chunk, then a gap inside the next chunk, then one between chunks
    offsets = [0, 1, 2, 3, 5, 6, 9, 10]
    chunks = [[record(o) for o in offsets[:4]], [record(o) for o in offsets[4:6]]]
    chunks.append([record(o) for o in offsets[6:]])
    consumer = ScriptedConsumer(chunks, markers={4, 7, 8})
    assert [r["offset"] for r in rows(consumer, part(0, 11))] == offsets


def test_records_prefetched_past_the_end_are_cut_by_offset():
    # offsets 5..12 with a gap at 8: the range ends at 10, so 10, 11, 12 are dropped
    consumer = ScriptedConsumer([[record(o) for o in (5, 6, 7, 9, 10, 11, 12)]], markers={8})
    consumer.consume = _ignore_count(consumer.consume)  # a consumer that overshoots
    assert [r["offset"] for r in rows(consumer, part(5, 10))] == [5, 6, 7, 9]


def _ignore_count(consume):
    return lambda num, timeout: consume(10**6, timeout)


def test_consume_asks_for_no_more_than_the_range_still_needs():
    consumer = ScriptedConsumer([[record(o) for o in range(0, 2500)]])
    rows(consumer, part(0, 2300))
    assert consumer.requested == [1000, 1000, 300]


def test_a_range_ending_in_transaction_markers_ends_by_position():
    consumer = ScriptedConsumer([[record(0), record(1)]], markers={2, 3})
    assert [r["offset"] for r in rows(consumer, part(0, 4))] == [0, 1]


def test_a_range_of_markers_only_yields_nothing():
    consumer = ScriptedConsumer([[event(KafkaError._PARTITION_EOF, offset=7)]])
    assert list(_drain(consumer, part(5, 7))) == []


def test_events_in_line_are_handled_in_order_and_records_around_them_kept():
    chunk = [record(0), record(1), event(KafkaError._PARTITION_EOF, offset=2), record(2)]
    consumer = ScriptedConsumer([chunk])
    assert [r["offset"] for r in rows(consumer, part(0, 3))] == [0, 1, 2]


def test_other_errors_are_raised():
    consumer = ScriptedConsumer([[record(0), event(KafkaError._TRANSPORT)]])
    with pytest.raises(KafkaException):
        list(_drain(consumer, part(0, 5)))


def test_deleted_offsets_fail_or_are_skipped_per_fail_on_data_loss(caplog):
    def consumer():
        return ScriptedConsumer(
            [[event(KafkaError._AUTO_OFFSET_RESET)], [record(o) for o in range(40, 50)]], low=40
        )

    with pytest.raises(DataLossError, match=r"orders-0: offsets 10\.\.39 were deleted"):
        list(_drain(consumer(), part(10, 50)))
    lenient = consumer()
    got = rows(lenient, part(10, 50, fail_on_data_loss=False))
    assert [r["offset"] for r in got] == list(range(40, 50))
    assert lenient.assigned == [40]
    assert "skipping them" in caplog.text


def test_timestamp_types_map_to_sparks_and_not_available_is_null():
    kinds = [CREATE, LOG_APPEND, NO_TIMESTAMP, CREATE]
    consumer = ScriptedConsumer([[record(o, kind=k) for o, k in enumerate(kinds)]])
    got = rows(consumer, part(0, 4))
    assert [r["timestampType"] for r in got] == [0, 1, -1, 0]
    assert [r["timestamp"] is None for r in got] == [False, False, True, False]
    assert got[1]["timestamp"].timestamp() == pytest.approx(1_700_000_000.001)


@pytest.mark.parametrize(("kind", "spark_type"), [(NO_TIMESTAMP, -1), (LOG_APPEND, 1)])
def test_a_batch_of_one_timestamp_type(kind, spark_type):
    consumer = ScriptedConsumer([[record(o, kind=kind) for o in range(3)]])
    got = rows(consumer, part(0, 3))
    assert [r["timestampType"] for r in got] == [spark_type] * 3
    assert all((r["timestamp"] is None) == (kind == NO_TIMESTAMP) for r in got)


def test_keys_values_and_headers_including_nulls():
    records = [
        record(0, key=b"k", value=b"a", headers=[("h", b"1"), ("n", None)]),
        record(1, key=None, value=None),  # a tombstone without headers
        record(2, key=b"", value=b"", headers=[]),
    ]
    got = rows(ScriptedConsumer([records]), part(0, 3, include_headers=True))
    assert [(r["key"], r["value"]) for r in got] == [(b"k", b"a"), (None, None), (b"", b"")]
    assert [r["headers"] for r in got] == [
        [{"key": "h", "value": b"1"}, {"key": "n", "value": None}],
        [],
        [],
    ]


def test_an_empty_range_reads_nothing():
    assert list(reader.read_range(part(5, 5))) == []


def test_no_progress_until_the_poll_timeout_is_an_error():
    consumer = ScriptedConsumer([[record(0)]])
    with pytest.raises(TimeoutError, match=r"orders-0: no progress reading \[0, 3\)"):
        list(_drain(consumer, part(0, 3, poll_timeout_ms=1)))


def test_the_collector_is_paused_only_while_a_step_runs():
    seen = []

    def steps():
        seen.append(gc.isenabled())
        yield 1
        seen.append(gc.isenabled())
        yield 2

    assert gc.isenabled()
    for _ in gc_paused(steps()):
        seen.append(gc.isenabled())  # the caller's code between steps
    assert seen == [False, True, False, True]
    assert gc.isenabled()

    def failing():
        yield 1
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        list(gc_paused(failing()))
    assert gc.isenabled()

    gc.disable()
    try:
        assert list(gc_paused(iter([1]))) == [1]
        assert not gc.isenabled()  # a caller's own pause is left alone
    finally:
        gc.enable()


def test_batches_are_record_batches_with_sparks_schema():
    (batch,) = list(_drain(ScriptedConsumer([[record(0)]]), part(0, 1)))
    assert isinstance(batch, pa.RecordBatch)
    assert batch.schema.equals(arrow_schema(False))


def test_executors_import_neither_the_manifest_nor_pydantic():
    # A worker unpickling the reader imports spark_app.source.source; pydantic costs ~0.2 s there.
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[4])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    code = (
        "import sys, spark_app.source.source; "
        "print({'pydantic', 'spark_app.api.manifest'} & {*sys.modules})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "set()"
