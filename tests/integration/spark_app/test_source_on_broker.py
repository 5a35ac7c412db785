"""The source's driver and executor halves against a real broker, called as Spark calls them
(the call order observed in PySpark 4.3: docs/source.md). Whole queries: test_runner.py.

Every test that reads runs on each executor read path (`read_path`: the native path's fetch
and librdkafka engines, and pure Python); `readPath=native` fails rather than falls back when
the native module is missing."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from devbed.kafka_broker import KafkaBroker
from devbed.polling import wait_for
from devbed.tls import Authority
from spark_app.api import offsets as off
from spark_app.api.offsets import StartError
from spark_app.api.options import SourceOptions
from spark_app.source import partition_reader
from spark_app.source.partition_range import (
    DataLossError,
    KafkaInputPartition,
    TopicDeletedError,
    arrow_schema,
)
from spark_app.source.partition_reader import read_range
from spark_app.source.source import KafkaStreamReader
from tests.support.kafka_tools import (
    add_partitions,
    commit_offsets,
    group_offsets,
    log_end_offsets,
    new_topic,
    produce,
)

pytestmark = pytest.mark.integration


# (readPath, nativeEngine) of each way an executor reads
READ_PATHS = {
    "fetch": ("native", "fetch"),
    "librdkafka": ("native", "librdkafka"),
    "python": ("python", "auto"),
    "auto": ("auto", "auto"),
}


@pytest.fixture(params=["fetch", "librdkafka", "python"])
def read_path(request: pytest.FixtureRequest) -> str:
    return request.param


def on_path(p: KafkaInputPartition, read_path: str) -> KafkaInputPartition:
    path, engine = READ_PATHS[read_path]
    return dataclasses.replace(p, read_path=path, native_engine=engine)


def reader(
    bootstrap: str, topic: str, read_path: str = "auto", **options: str
) -> KafkaStreamReader:
    path, engine = READ_PATHS[read_path]
    raw = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"{topic}-g",
        "partitionDiscoveryIntervalMs": "0",
        "readPath": path,
        "nativeEngine": engine,
        **options,
    }
    return KafkaStreamReader(SourceOptions.parse(raw), schema=None)


def read_all(r: KafkaStreamReader, start: dict, end: dict) -> list[dict]:
    rows = []
    for partition in r.partitions(start, end):
        for batch in r.read(partition):
            assert isinstance(batch, pa.RecordBatch)
            rows += batch.to_pylist()
    return rows


def test_group_offsets_move_only_after_the_batch_is_durable(kafka, read_path):
    topic = new_topic(kafka.bootstrap, partitions=3)
    produce(kafka.bootstrap, topic, range(300))
    r = reader(kafka.bootstrap, topic, read_path)
    start = r.initialOffset()
    end0 = r.latestOffset(start, ReadAllAvailable())  # Spark then writes offsets/0
    rows = read_all(r, start, end0)
    assert sorted(json.loads(row["value"])["id"] for row in rows) == list(range(300))
    # The committer is asynchronous: only once it is idle (nothing handed over is pending or
    # in flight) does "no commit yet" prove that nothing was handed over before durability.
    assert r.driver.committer is not None and r.driver.committer.flush(30)
    assert r.driver.table.snapshot().commits_succeeded == 0
    assert group_offsets(kafka.bootstrap, f"{topic}-g", topic) == {0: None, 1: None, 2: None}

    # Spark asks latestOffset(start=end0) only once commits/0 is written: batch 0 is durable.
    produce(kafka.bootstrap, topic, range(300, 310))
    r.latestOffset(end0, ReadAllAvailable())
    last_processed = {}
    for row in rows:
        last_processed[row["partition"]] = max(
            last_processed.get(row["partition"], -1), row["offset"]
        )
    expected = {p: o + 1 for p, o in last_processed.items()}  # committed = last processed + 1
    assert r.driver.committer.flush(30)  # the commit was sent and acknowledged
    assert r.driver.table.snapshot().commits_succeeded == 1
    assert group_offsets(kafka.bootstrap, f"{topic}-g", topic) == expected
    assert expected == {int(p): o for p, o in end0["offsets"][topic].items()}
    # each offset went with the leader epoch the checkpoint keeps beside it, and the broker
    # gives it back (KIP-320): a redeploy's start validates the log with it (rule 16)
    epochs: dict = {}
    r.driver.metadata.committed(sorted(off.end_positions(end0)), epochs=epochs)
    assert off.to_json(epochs) == end0["epochs"] and len(epochs) == 3
    r.stop()


def test_a_fresh_start_uses_committed_offsets_and_the_reset_strategy_elsewhere(kafka, read_path):
    topic = new_topic(kafka.bootstrap, partitions=3)
    produce(kafka.bootstrap, topic, range(90), partition=0)
    produce(kafka.bootstrap, topic, range(90, 180), partition=1)
    produce(kafka.bootstrap, topic, range(180, 270), partition=2)
    commit_offsets(kafka.bootstrap, f"{topic}-g", topic, {0: 30, 1: 60})
    r = reader(kafka.bootstrap, topic, read_path)
    start = r.initialOffset()
    end0 = r.latestOffset(start, ReadAllAvailable())
    assert end0["start"] == {topic: {"0": 30, "1": 60, "2": 0}}
    assert r.initialOffset() == start  # Spark calls it again: still the same sentinel
    rows = read_all(r, r.initialOffset(), end0)  # a replayed batch 0 reads the pinned range
    assert sorted(json.loads(x["value"])["id"] for x in rows) == (
        list(range(30, 90)) + list(range(150, 180)) + list(range(180, 270))
    )
    r.stop()


@pytest.mark.parametrize("strategy", ["earliest", "latest", "error"])
def test_a_group_without_commits_starts_per_offset_reset_strategy(kafka, strategy):
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(40))
    ends = log_end_offsets(kafka.bootstrap, topic)
    r = reader(kafka.bootstrap, topic, offsetResetStrategy=strategy)
    if strategy == "error":
        with pytest.raises(StartError, match=rf"{topic}-0: no committed offset"):
            r.latestOffset(r.initialOffset(), ReadAllAvailable())
    else:
        end0 = r.latestOffset(r.initialOffset(), ReadAllAvailable())
        expected = {"earliest": {"0": 0, "1": 0}, "latest": {str(p): o for p, o in ends.items()}}[
            strategy
        ]
        assert end0["start"] == {topic: expected}
    r.stop()


def test_max_offsets_per_trigger_bounds_each_batch_and_idle_returns_start_unchanged(
    kafka, read_path
):
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(1000))
    r = reader(
        kafka.bootstrap, topic, read_path, maxOffsetsPerTrigger="300", startingOffsets="earliest"
    )
    assert r.getDefaultReadLimit() == ReadMaxRows(300)
    start = r.initialOffset()
    seen, batches = 0, 0
    while True:
        end = r.latestOffset(start, ReadMaxRows(300))
        if end is start:
            break
        size = sum(off.end_positions(end).values()) - sum(off.start_positions(start, end).values())
        assert 0 < size <= 301  # at most one extra offset from rounding a small share up
        seen += len(read_all(r, start, end))
        start, batches = json.loads(json.dumps(end)), batches + 1  # as Spark hands it back
    assert (seen, batches) == (1000, 4)
    r.stop()


def test_available_now_leaves_partitions_discovered_after_its_target_to_the_next_run(kafka):
    """Trigger.AvailableNow reads up to the ends frozen at its start; a partition created
    later is left to the next run (as Spark's Kafka source), or its moving end would keep the
    run from ever finishing."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(100))
    r = reader(kafka.bootstrap, topic, startingOffsets="earliest")
    r.prepareForTriggerAvailableNow()
    frozen = {str(p): o for p, o in log_end_offsets(kafka.bootstrap, topic).items()}
    add_partitions(kafka.bootstrap, topic, 3)
    produce(kafka.bootstrap, topic, range(100, 150), partition=2)
    produce(kafka.bootstrap, topic, range(150, 160), partition=0)  # past the target too

    def discovered() -> bool:
        r.driver._refresh(discover=True)
        return (topic, 2) in r.driver.table.partitions()

    wait_for(discovered, 30, "the source to discover partition 2")
    start = r.initialOffset()
    end0 = json.loads(json.dumps(r.latestOffset(start, ReadAllAvailable())))
    assert end0["offsets"] == {topic: frozen}
    assert sorted(json.loads(x["value"])["id"] for x in read_all(r, start, end0)) == list(
        range(100)
    )
    assert r.latestOffset(end0, ReadAllAvailable()) == end0  # nothing more: the run ends
    r.stop()


def test_a_drain_request_plans_no_new_batch_yet_commits_the_durable_one(kafka, tmp_path, read_path):
    """The runner's graceful stop: with the drain file present, latestOffset still hands the
    finished batch to the group, then returns start (no new batch) though records wait."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(100))
    drain = tmp_path / "drain"
    r = reader(kafka.bootstrap, topic, read_path, drainPath=str(drain))
    start = r.initialOffset()
    end0 = json.loads(json.dumps(r.latestOffset(start, ReadAllAvailable())))
    assert len(read_all(r, start, end0)) == 100
    produce(kafka.bootstrap, topic, range(100, 200))
    drain.touch()
    assert r.latestOffset(end0, ReadAllAvailable()) is end0
    assert r.latestOffset(end0, ReadAllAvailable()) is end0
    expected = {int(p): o for p, o in end0["offsets"][topic].items()}
    assert sum(expected.values()) == 100
    wait_for(
        lambda: group_offsets(kafka.bootstrap, f"{topic}-g", topic) == expected,
        30,
        "the durable batch's offsets in the group",
    )
    r.stop()


def test_deleted_offsets_fail_with_names_or_are_skipped_and_counted(
    versioned_kafka, tmp_path, read_path
):
    """Offsets deleted under a checkpoint (retention, here DeleteRecords): the driver's check
    and every engine's read (the fetcher asks ListOffsets for the log start) fail naming them,
    or skip and count them, on every supported broker version."""
    kafka = versioned_kafka
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(100))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 50)])[TopicPartition(topic, 0, 50)].result(30)
    restored = off.batch_offset({(topic, 0): 10})  # a checkpoint taken before retention ran

    strict = reader(kafka.bootstrap, topic, read_path)
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 10\.\.49 were deleted"):
        strict.latestOffset(restored, ReadAllAvailable())
    (partition,) = strict.driver.plan_partitions(restored, off.batch_offset({(topic, 0): 100}))
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 10\.\.49 were deleted"):
        list(read_range(partition))
    strict.stop()

    lenient = reader(
        kafka.bootstrap,
        topic,
        read_path,
        failOnDataLoss="false",
        reportPath=str(tmp_path / "r.json"),
    )
    end = lenient.latestOffset(restored, ReadAllAvailable())
    rows = read_all(lenient, restored, end)
    assert [json.loads(x["value"])["id"] for x in rows] == list(range(50, 100))
    assert lenient.driver.table.snapshot().data_loss_skipped_offsets == 40
    lenient.stop()
    assert json.loads((tmp_path / "r.json").read_text())["dataLossSkippedOffsets"] == 40


def test_a_fresh_start_from_offsets_retention_deleted_fails_or_is_skipped_and_counted(
    kafka, tmp_path, read_path
):
    """A redeploy whose group committed offsets retention has since deleted (the job stopped
    long enough): the reset strategy picks the start, but the records between the group's
    offset and the log start were never read. failOnDataLoss=true fails naming them; false
    starts at the log start and counts them (found by the simulation: they were skipped
    silently)."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(100))
    commit_offsets(kafka.bootstrap, f"{topic}-g", topic, {0: 10})
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 50)])[TopicPartition(topic, 0, 50)].result(30)

    strict = reader(kafka.bootstrap, topic, read_path)
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 10\.\.49 were deleted"):
        strict.latestOffset(strict.initialOffset(), ReadAllAvailable())
    strict.stop()

    lenient = reader(
        kafka.bootstrap, topic, read_path, failOnDataLoss="false", reportPath=str(tmp_path / "r")
    )
    end0 = lenient.latestOffset(lenient.initialOffset(), ReadAllAvailable())
    assert end0["start"] == {topic: {"0": 50}}
    rows = read_all(lenient, lenient.initialOffset(), end0)
    assert [json.loads(x["value"])["id"] for x in rows] == list(range(50, 100))
    lenient.stop()
    assert json.loads((tmp_path / "r").read_text())["dataLossSkippedOffsets"] == 40


def test_a_group_offset_past_the_log_end_is_kept_as_a_restore_keeps_its_checkpoints(
    kafka, tmp_path
):
    """A redeploy whose group a reader committed at 100 (with its leader epoch) in a log that
    now ends at 30 (an unclean election truncated it: simulation seed 23). Read as a recreated
    topic, the reset strategy started at 0 and read again what the group had read. As a
    restore does with its checkpoint: failOnDataLoss=true fails naming both offsets; false
    keeps the group's position, counts what it passes, and reads on once the log passes it."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(30))
    commit_offsets(kafka.bootstrap, f"{topic}-g", topic, {0: 100}, epochs={0: 0})

    strict = reader(kafka.bootstrap, topic)
    with pytest.raises(DataLossError, match=rf"{topic}-0 ends at 30, before offset 100"):
        strict.latestOffset(strict.initialOffset(), ReadAllAvailable())
    strict.stop()

    lenient = reader(kafka.bootstrap, topic, failOnDataLoss="false", reportPath=str(tmp_path / "r"))
    end0 = lenient.latestOffset(lenient.initialOffset(), ReadAllAvailable())
    assert (end0["start"], end0["startEpochs"]) == ({topic: {"0": 100}}, {topic: {"0": 0}})
    produce(kafka.bootstrap, topic, range(30, 110))

    def next_batch() -> dict | None:  # the log ends are cached between Spark's asks
        end = lenient.latestOffset(end0, ReadAllAvailable())
        return end if end != end0 else None

    end1 = wait_for(next_batch, 30, "a batch past the group's position")
    rows = read_all(lenient, end0, end1)
    assert [json.loads(x["value"])["id"] for x in rows] == list(range(100, 110))
    lenient.stop()
    assert json.loads((tmp_path / "r").read_text())["dataLossSkippedOffsets"] == 70


def test_a_start_reset_before_its_validating_seek_reads_as_deleted_offsets(
    kafka, read_path, monkeypatch
):
    """A checkpointed start, with its leader epoch, below the log start: the assignment's
    first fetch can be reset (which stops the partition) before the seek that validates the
    epoch, and librdkafka refuses that seek (_STATE). The read still fails naming the deleted
    offsets, or skips them (CI run 56 failed the job on the refusal). Made to happen every
    time: the pure-Python read waits for librdkafka to refuse a seek, the native one pauses
    before its seek (a test hook)."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(100))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 50)])[TopicPartition(topic, 0, 50)].result(30)
    validate = partition_reader.validate_start

    def after_the_reset(consumer, p: KafkaInputPartition) -> None:
        at = TopicPartition(p.topic, p.partition, p.start, leader_epoch=p.start_epoch)

        def refused() -> bool:
            try:
                consumer.seek(at)  # taken: fetches from the start again, and is reset again
            except KafkaException as exc:
                return exc.args[0].code() == KafkaError._STATE
            return False

        wait_for(refused, 30, "librdkafka to stop the partition on its offset reset")
        validate(consumer, p)

    monkeypatch.setattr(partition_reader, "validate_start", after_the_reset)
    monkeypatch.setenv("STREAMJOB_TEST_VALIDATE_AFTER_MS", "1000")
    source = reader(kafka.bootstrap, topic, read_path)
    restored = off.batch_offset({(topic, 0): 10})
    (planned,) = source.driver.plan_partitions(restored, off.batch_offset({(topic, 0): 100}))
    source.stop()
    strict = dataclasses.replace(planned, start_epoch=0)  # the topic's only leader epoch
    with pytest.raises(DataLossError, match=rf"{topic}-0: offsets 10\.\.49 were deleted"):
        list(read_range(strict))
    lenient = dataclasses.replace(strict, fail_on_data_loss=False)
    ids = [json.loads(v)["id"] for b in read_range(lenient) for v in b.column("value").to_pylist()]
    assert ids == list(range(50, 100))


def test_a_log_that_ends_below_the_checkpoint_fails_or_is_skipped_and_counted(kafka, tmp_path):
    """The log now ends below the checkpointed offset (truncated, or the topic recreated):
    failOnDataLoss=true fails naming the partition and both offsets; false waits for the log
    to pass the checkpoint, and counts the offsets whose new records it thereby skips."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(30))  # the log ends at 30
    restored = off.batch_offset({(topic, 0): 100})  # a checkpoint of a longer log

    strict = reader(kafka.bootstrap, topic)
    with pytest.raises(
        DataLossError, match=rf"{topic}-0 ends at 30, before offset 100 the job resumes"
    ):
        strict.latestOffset(restored, ReadAllAvailable())
    strict.stop()

    lenient = reader(
        kafka.bootstrap, topic, failOnDataLoss="false", reportPath=str(tmp_path / "r.json")
    )
    assert lenient.latestOffset(restored, ReadAllAvailable()) == restored  # nothing to read
    assert lenient.driver.table.snapshot().data_loss_skipped_offsets == 70
    lenient.stop()
    assert json.loads((tmp_path / "r.json").read_text())["dataLossSkippedOffsets"] == 70


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_ranges_end_by_position_across_transaction_markers_and_aborted_records(
    kafka, isolation, read_path
):
    topic = new_topic(kafka.bootstrap, partitions=1)
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{topic}-{isolation}"}
    )
    producer.init_transactions(30)
    for ids, commit in ((range(0, 5), True), (range(5, 8), False), (range(8, 10), True)):
        producer.begin_transaction()
        for n in ids:
            producer.produce(topic, value=json.dumps({"id": n}).encode())
        producer.flush(30)  # aborted records must reach the log, not be purged locally
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    # 10 records + 3 transaction markers (written by the coordinator after EndTxn returns).
    wait_for(lambda: log_end_offsets(kafka.bootstrap, topic)[0] == 13, 30, "13 offsets")
    r = reader(
        kafka.bootstrap, topic, read_path, startingOffsets="earliest", isolationLevel=isolation
    )
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    assert end["offsets"][topic]["0"] == 13
    ids = [json.loads(x["value"])["id"] for x in read_all(r, off.FRESH_START, end)]
    expected = [0, 1, 2, 3, 4, 8, 9] if isolation == "read_committed" else list(range(10))
    assert ids == expected
    r.stop()


def test_batches_are_arrow_with_sparks_exact_schema_and_headers(kafka, read_path):
    topic = new_topic(kafka.bootstrap, partitions=1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    producer.produce(
        topic, key=b"k", value=b"v", headers=[("h", b"1")], timestamp=1_700_000_000_123
    )
    producer.produce(topic, value=None)
    producer.flush(10)
    r = reader(kafka.bootstrap, topic, read_path, startingOffsets="earliest", includeHeaders="true")
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    (partition,) = r.partitions(off.FRESH_START, end)
    (batch,) = list(r.read(partition))
    assert batch.schema.equals(arrow_schema(True))
    first, second = batch.to_pylist()
    assert (first["key"], first["value"], first["headers"]) == (
        b"k",
        b"v",
        [{"key": "h", "value": b"1"}],
    )
    assert first["timestamp"].timestamp() == pytest.approx(1_700_000_000.123)
    assert (first["timestampType"], first["partition"], first["offset"]) == (0, 0, 0)
    assert second["value"] is None and second["headers"] == []
    r.stop()


def test_timestamp_start_on_a_real_broker(kafka):
    topic = new_topic(kafka.bootstrap, partitions=1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    base = 1_700_000_000_000
    for n in range(10):
        producer.produce(topic, value=json.dumps({"id": n}).encode(), timestamp=base + n * 1000)
    producer.flush(10)
    at_five = reader(kafka.bootstrap, topic, startingOffsets=f"timestamp:{base + 4500}")
    end = at_five.latestOffset(at_five.initialOffset(), ReadAllAvailable())
    assert end["start"] == {topic: {"0": 5}}  # the first record at or after the timestamp
    after_all = reader(kafka.bootstrap, topic, startingOffsets=f"timestamp:{base + 60_000}")
    end = after_all.latestOffset(after_all.initialOffset(), ReadAllAvailable())
    assert end["start"] == {topic: {"0": 10}}  # none that late: start at the end
    at_five.stop()
    after_all.stop()


def _read_batches(p: KafkaInputPartition, read_path: str) -> list[pa.RecordBatch]:
    return list(read_range(on_path(p, read_path)))


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_every_engine_gives_identical_batches(versioned_kafka, timestamp_type):
    """The same offsets through every engine (fetch, librdkafka, Python) on every supported
    broker version: equal Arrow batches, batch by batch, with null and empty keys and values,
    headers (null header values, records without headers), gaps of an aborted transaction and
    its markers, and a range that starts and ends mid-log."""
    topic = new_topic(versioned_kafka.bootstrap, partitions=1)
    if timestamp_type == "LogAppendTime":
        admin = AdminClient({"bootstrap.servers": versioned_kafka.bootstrap})
        entry = ConfigEntry(
            "message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET
        )
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(30)
    producer = Producer(
        {
            "bootstrap.servers": versioned_kafka.bootstrap,
            "transactional.id": f"tx-{topic}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    n = 0
    for commit in (True, False, True, True):
        producer.begin_transaction()
        for _ in range(40):
            key = None if n % 3 == 0 else (b"" if n % 7 == 0 else f"k{n}".encode())
            value = (
                None if n % 11 == 0 else (b"" if n % 13 == 0 else json.dumps({"id": n}).encode())
            )
            headers = None if n % 2 else [("a", f"{n}".encode()), ("nul", None), ("a", b"")]
            producer.produce(
                topic, key=key, value=value, headers=headers, timestamp=1_700_000_000_000 + n
            )
            n += 1
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    wait_for(lambda: log_end_offsets(versioned_kafka.bootstrap, topic)[0] == 164, 30, "164 offsets")
    base = KafkaInputPartition(
        topic=topic,
        partition=0,
        start=3,
        end=150,  # inside the last transaction
        client_config={
            "bootstrap.servers": versioned_kafka.bootstrap,
            "isolation.level": "read_committed",
        },
        include_headers=True,
        max_records_per_batch=17,
        poll_timeout_ms=30_000,
    )
    python = _read_batches(base, "python")
    assert sum(b.num_rows for b in python) == 37 + 40 + 27  # 3..39, 82..121, 123..149
    for engine in ("fetch", "librdkafka"):
        native = _read_batches(base, engine)
        assert [b.num_rows for b in native] == [b.num_rows for b in python], engine
        for got, expected in zip(native, python, strict=True):
            assert got.schema.equals(arrow_schema(True))
            assert got.equals(expected), (engine, got.to_pylist()[:3], expected.to_pylist()[:3])
    rows = [r for b in native for r in b.to_pylist()]
    assert {r["timestampType"] for r in rows} == {0 if timestamp_type == "CreateTime" else 1}
    assert any(r["key"] is None for r in rows) and any(r["value"] is None for r in rows)
    assert any(r["headers"] == [] for r in rows)
    assert any(h["value"] is None for r in rows for h in r["headers"])


def _waiting_range(kafka: KafkaBroker, read_path: str, **options) -> KafkaInputPartition:
    """[0, 10) of a new topic holding 5 records: the read waits for the last 5."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(5))
    p = KafkaInputPartition(
        topic=topic,
        partition=0,
        start=0,
        end=10,
        client_config={"bootstrap.servers": kafka.bootstrap},
        **options,
    )
    return on_path(p, read_path)


def test_a_range_that_makes_no_progress_fails_naming_the_partition(kafka, read_path):
    p = _waiting_range(kafka, read_path, poll_timeout_ms=1_000)
    topic = p.topic
    started = time.monotonic()
    with pytest.raises(
        TimeoutError, match=rf"{topic}-0: no progress reading \[0, 10\) .*stuck at 5"
    ):
        list(read_range(p))
    assert time.monotonic() - started < 10


def test_a_topic_deleted_under_a_read_fails_it_naming_the_topic(kafka, read_path):
    """A range waiting for records of a topic deleted meanwhile fails within seconds (the
    topic out of the metadata for 5 s), naming the topic, on every engine: not after the
    poll timeout, with an error that names only a stall."""
    # the first 5 come as a batch: the read is under way
    p = _waiting_range(kafka, read_path, poll_timeout_ms=120_000, max_records_per_batch=5)
    topic = p.topic
    batches = read_range(p)
    assert next(batches).num_rows == 5
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deleted = time.monotonic()
    with pytest.raises(
        TopicDeletedError, match=rf"topic {topic} was deleted while the job read {topic}-0 "
    ):
        list(batches)
    assert time.monotonic() - deleted < 30


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_reads_alike(versioned_kafka, codec):
    """Batches compressed by the producer read alike through every engine, on every supported
    broker version."""
    bootstrap = versioned_kafka.bootstrap
    topic = new_topic(bootstrap, partitions=1)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}
    )
    for n in range(3000):
        producer.produce(topic, key=f"k{n}".encode(), value=json.dumps({"id": n}).encode() * 3)
    producer.flush(30)
    p = KafkaInputPartition(
        topic=topic,
        partition=0,
        start=5,
        end=2990,
        client_config={"bootstrap.servers": bootstrap},
        max_records_per_batch=1000,
    )
    python = pa.Table.from_batches(_read_batches(p, "python"))
    for engine in ("fetch", "librdkafka"):
        batches = _read_batches(p, engine)
        assert [b.num_rows for b in batches] == [1000, 1000, 985], engine
        assert pa.Table.from_batches(batches).equals(python), engine
    assert python.column("offset")[0].as_py() == 5


def _secured_range(
    broker: KafkaBroker, records: int, client: dict[str, str] | None = None
) -> KafkaInputPartition:
    """A range of `records` on a new topic, read through `client` (default: SASL_SSL)."""
    topic = new_topic(broker.bootstrap, partitions=1)
    produce(broker.bootstrap, topic, range(records))
    return KafkaInputPartition(
        topic=topic,
        partition=0,
        start=0,
        end=records,
        client_config=client or broker.secured_client(),
        poll_timeout_ms=20_000,
    )


def _assert_reads_every_record(p: KafkaInputPartition, read_path: str) -> None:
    rows = [r for b in _read_batches(p, read_path) for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(p.end))
    assert [json.loads(r["value"])["id"] for r in rows] == list(range(p.end))


def test_sasl_ssl_reads_alike(versioned_kafka, read_path):
    """The secured listener (SCRAM-SHA-512 over TLS with the test's own CA): the same records
    on every path, on every supported broker version."""
    _assert_reads_every_record(_secured_range(versioned_kafka, 500), read_path)


def test_mutual_tls_reads_alike(versioned_kafka, read_path):
    """The SSL listener (mutual TLS: the client's certificate and key as PEM, the test's own
    CA): the same records on every path, on every supported broker version."""
    p = _secured_range(versioned_kafka, 500, versioned_kafka.tls_client())
    _assert_reads_every_record(p, read_path)


def test_the_tls_listener_refuses_a_client_without_a_certificate(kafka):
    """What makes the mutual-TLS test mean something: without its certificate a client is
    refused (the broker's "bad certificate" alert). The fetcher reports it as a transport
    error once pollTimeoutMs has passed (it retries it as a lost connection)."""
    anonymous = kafka.tls_client()
    del anonymous["ssl.certificate.pem"], anonymous["ssl.key.pem"]
    p = dataclasses.replace(_secured_range(kafka, 10, anonymous), poll_timeout_ms=2_000)
    with pytest.raises(KafkaException, match="bad certificate") as refused:
        _read_batches(p, "fetch")
    assert refused.value.args[0].code() in (KafkaError._TRANSPORT, KafkaError._SSL)


def test_the_fetcher_fails_at_once_naming_refused_credentials_or_an_untrusted_broker(
    kafka, tmp_path: Path
):
    """A wrong password and an untrusted CA end the fetcher's read at once with librdkafka's
    error codes (the runner's KafkaAuthFailed and KafkaTLSFailed), no secret in the text.
    librdkafka's consumer retries them until pollTimeoutMs instead; either way the driver's
    metadata check names the cause first (tests/integration/operator/test_op_kafka.py)."""
    base = _secured_range(kafka, 10)
    wrong = kafka.secured_client(**{"sasl.password": "nope-123"})
    started = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        _read_batches(dataclasses.replace(base, client_config=wrong), "fetch")
    assert refused.value.args[0].code() == KafkaError._AUTHENTICATION, refused.value
    assert "nope-123" not in str(refused.value)
    untrusted = kafka.secured_client(**{"ssl.ca.pem": Authority.create(tmp_path).pem})
    with pytest.raises(KafkaException) as unverified:
        _read_batches(dataclasses.replace(base, client_config=untrusted), "fetch")
    assert unverified.value.args[0].code() == KafkaError._SSL, unverified.value
    assert "certificate verify failed" in str(unverified.value)
    assert time.monotonic() - started < 10  # not the 20 s poll timeout


def test_the_fetcher_rides_out_a_broker_crash_mid_range(tmp_path: Path):
    """The broker is SIGKILLed between two batches (a Fetch in flight) and comes back: the
    fetcher reconnects and the range arrives whole, each offset once, in order."""
    with KafkaBroker(tmp_path / "broker") as broker:
        topic = new_topic(broker.bootstrap, partitions=1)
        produce(broker.bootstrap, topic, range(20_000))
        p = KafkaInputPartition(
            topic=topic,
            partition=0,
            start=0,
            end=20_000,
            # small fetches (~16 KiB, a few hundred records): most of the range is still
            # on the broker when it goes down
            client_config={
                "bootstrap.servers": broker.bootstrap,
                "max.partition.fetch.bytes": 16384,
            },
            max_records_per_batch=1000,
            poll_timeout_ms=60_000,
        )
        batches = read_range(on_path(p, "fetch"))
        offsets = [o for _ in range(3) for o in next(batches).column("offset").to_pylist()]
        broker.stop(kill=True)
        down = time.monotonic()
        restart = threading.Timer(2.0, broker.start)
        restart.start()
        offsets += [o for b in batches for o in b.column("offset").to_pylist()]
        restart.join()
        assert time.monotonic() - down > 2.0  # the rest came from the restarted broker
        assert offsets == list(range(20_000))
