"""valueFormat=avro end to end: a real broker, a real schema registry (Apicurio) and queries
on local Spark, on each executor read path (the native fetch and librdkafka engines, pure
Python). Values decode to typed columns across schema versions written mid-stream; a poison
record of each kind fails the query naming it and nothing past it is committed, and the
documented skip (an offsets action) gets past it; a registry outage fails clearly at query
start, and mid-stream only where a schema id is new. Every record's value is checked."""

from __future__ import annotations

import copy
import json
import struct
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from devbed.kafka_broker import KafkaBroker
from devbed.polling import wait_for
from devbed.ports import free_port
from devbed.schema_registry import SchemaRegistry, wire_format
from spark_app.formats.decoding import (
    BAD_MAGIC_BYTE,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
)
from spark_app.formats.schema_registry_client import RegistryUnavailable
from spark_app.runner import offsets_cli
from spark_app.runner.preflight import failure_cause
from spark_app.source.source import FORMAT, KafkaCheckpointedDataSource
from tests.support.kafka_tools import consume_to_end, group_offsets, log_end_offsets, new_topic
from tests.support.runner_process import job_manifest
from tests.support.spark_session import local_session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

# (readPath, nativeEngine) of each way an executor reads
READ_PATHS = {
    "fetch": ("native", "fetch"),
    "librdkafka": ("native", "librdkafka"),
    "python": ("python", "auto"),
}

# Nested, optional, logical types; v2 (the reader) promotes quantity and adds a field with a
# default, v3 (newer than the reader) adds one more.
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "test.typed",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "quantity", "type": "int"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "city", "type": "string"},
                    {"name": "zip", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
ORDER_V2 = copy.deepcopy(ORDER_V1)
ORDER_V2["fields"][1]["type"] = "long"
ORDER_V2["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
ORDER_V3 = copy.deepcopy(ORDER_V2)
ORDER_V3["fields"].append({"name": "channel", "type": "string", "default": "web"})
# `id` a string: no Avro rule reads it as the reader's long
CLASH = copy.deepcopy(ORDER_V1)
CLASH["fields"][0]["type"] = "string"

VALUE_TYPE = StructType(
    [
        StructField("id", LongType(), False),
        StructField("quantity", LongType(), False),
        StructField("placed", TimestampType(), False),
        StructField("day", DateType(), False),
        StructField("price", DecimalType(10, 2), False),
        StructField(
            "address",
            StructType(
                [StructField("city", StringType(), False), StructField("zip", StringType(), True)]
            ),
            False,
        ),
        StructField("tags", ArrayType(StringType(), False), False),
        StructField("note", StringType(), True),
    ]
)
PLACED = datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=UTC)


def order(n: int) -> dict:
    return {
        "id": n,
        "quantity": n % 5 + 1,
        "placed": PLACED + timedelta(milliseconds=n),
        "day": date(2026, 11, 24) + timedelta(days=n),
        "price": Decimal(f"{n}.25"),
        "address": {"city": f"city-{n}", "zip": None if n % 2 else f"{n:05d}"},
        "tags": [f"t{n}"] * (n % 3),
    }


def as_reader(n: int, note: str | None = None) -> dict:
    """Record n as the reader schema (v2) gives it, whichever version wrote it."""
    return {**order(n), "note": note}


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_session(
        "typed-records",
        "local[2]",
        **{"spark.sql.shuffle.partitions": "1", "spark.sql.session.timeZone": "UTC"},
    )
    session.dataSource.register(KafkaCheckpointedDataSource)
    yield session
    session.stop()


@pytest.fixture(params=list(READ_PATHS))
def read_path(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def own_registry(tmp_path: Path) -> Iterator[SchemaRegistry]:
    """A registry of the test's own, to stop under a running query."""
    with SchemaRegistry(tmp_path / "registry") as registry:
        yield registry


def options(kafka: KafkaBroker, registry_url: str, topic: str, read_path: str, **extra: str):
    path, engine = READ_PATHS[read_path]
    return {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"{topic}-g",
        "partitionDiscoveryIntervalMs": "0",
        "readPath": path,
        "nativeEngine": engine,
        "valueFormat": "avro",
        "schemaRegistryUrl": registry_url,
        **extra,
    }


def produce(kafka: KafkaBroker, topic: str, records: list[tuple[int, bytes | None]]) -> None:
    """(key, value) records; the key spreads them over partitions."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key, value in records:
        producer.produce(topic, key=str(key).encode(), value=value)
    assert producer.flush(30) == 0


class Query:
    """A query of the source into a parquet sink, with its checkpoint, under `workdir`."""

    def __init__(self, spark: SparkSession, source: dict[str, str], workdir: Path):
        self.spark, self.out = spark, workdir / "out"
        self.checkpoint = workdir / "checkpoint"
        frame = spark.readStream.format(FORMAT).options(**source).load()
        self.schema = frame.schema
        self.query = (
            frame.writeStream.format("parquet")
            .option("path", str(self.out))
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    def rows(self) -> list[dict]:
        """The sink's committed rows (Spark honours its _spark_metadata log)."""
        if not (self.out / "_spark_metadata").exists():
            return []
        found = self.spark.read.schema(self.schema).parquet(str(self.out)).collect()
        return sorted((row.asDict(recursive=True) for row in found), key=lambda r: r["offset"])

    def failure(self, timeout: float = 180) -> str:
        """The cause the runner would report, once the query has failed."""
        wait_for(lambda: not self.query.isActive, timeout, "the query to fail")
        error = self.query.exception()
        assert error is not None, "the query stopped without an error"
        return failure_cause(str(error))

    def uncommitted_batches(self) -> set[int]:
        """Batches planned in the checkpoint (offsets/N) whose commits/N was never written."""

        def ids(kind: str) -> set[int]:
            return {int(f.name) for f in (self.checkpoint / kind).iterdir() if f.name.isdigit()}

        return ids("offsets") - ids("commits")

    def stop(self) -> None:
        self.query.stop()


def values(rows: list[dict]) -> list[dict | None]:
    """Each row's value, its timestamps as aware UTC datetimes (collect() gives local ones)."""
    found = []
    for row in rows:
        value = row["value"]
        if value is not None:
            value = {**value, "placed": value["placed"].astimezone(UTC)}
        found.append(value)
    return found


def committed_to_end(kafka: KafkaBroker, topic: str) -> dict[int, int]:
    """Waits until the group's offsets reach the log ends: every record so far is durable."""
    ends = log_end_offsets(kafka.bootstrap, topic)
    wait_for(
        lambda: group_offsets(kafka.bootstrap, f"{topic}-g", topic) == ends,
        120,
        f"the group's offsets to reach {ends}",
    )
    return ends


def test_values_decode_to_typed_columns_across_schema_versions_written_mid_stream(
    spark, kafka, schema_registry, read_path, tmp_path
):
    topic = new_topic(kafka.bootstrap, partitions=2, prefix="typed")
    subject = f"{topic}-value"
    v1 = schema_registry.register(subject, ORDER_V1)
    v2 = schema_registry.register(subject, ORDER_V2)
    produce(kafka, topic, [(n, wire_format(v1, ORDER_V1, order(n))) for n in range(6)])
    note = {n: f"note {n}" for n in range(6, 12)}
    produce(kafka, topic, [(n, wire_format(v2, ORDER_V2, as_reader(n, note[n]))) for n in note])
    produce(kafka, topic, [(99, None)])  # a tombstone: a null value, not poison
    source = options(kafka, schema_registry.url, topic, read_path, valueSchemaVersion="2")
    query = Query(spark, source, tmp_path)
    try:
        assert query.schema["value"].dataType == VALUE_TYPE  # schema() gave the decoded type
        assert query.schema.fieldNames()[2:5] == ["topic", "partition", "offset"]
        wait_for(lambda: len(query.rows()) == 13, 120, "the first 13 records")
        # A version newer than the reader, registered while the query runs: a new schema id
        # the executors fetch mid-stream.
        v3 = schema_registry.register(subject, ORDER_V3)
        newer = {**as_reader(12, "newer"), "channel": "shop"}
        produce(kafka, topic, [(12, wire_format(v3, ORDER_V3, newer))])
        wait_for(lambda: len(query.rows()) == 14, 120, "the record written with v3")
    finally:
        query.stop()
    rows = query.rows()
    assert {(r["topic"], r["partition"], r["offset"]) for r in rows} == {
        (topic, p, o)
        for p, end in log_end_offsets(kafka.bootstrap, topic).items()
        for o in range(end)
    }
    by_id = {v["id"]: v for v in values(rows) if v is not None}
    expected = {n: as_reader(n) for n in range(6)}
    expected |= {n: as_reader(n, note[n]) for n in note} | {12: as_reader(12, "newer")}
    assert by_id == expected  # every field of every record, in the reader's shape
    assert [r["key"] for r in rows if r["value"] is None] == [b"99"]


def test_an_inline_reader_schema_reads_two_topics_whose_producers_register_per_topic_and_record(
    spark, kafka, schema_registry, tmp_path
):
    """valueSchema: the reader schema in the options, so no subject to look up and any
    number of topics; producers with TopicRecordNameStrategy register each topic's own
    subject (<topic>-test.typed.Order), the executors fetch those writer schemas by id."""
    topics = [new_topic(kafka.bootstrap, partitions=1, prefix="inline") for _ in range(2)]
    older = schema_registry.register(f"{topics[0]}-test.typed.Order", ORDER_V1)
    newer = schema_registry.register(f"{topics[1]}-test.typed.Order", ORDER_V3)
    produce(kafka, topics[0], [(n, wire_format(older, ORDER_V1, order(n))) for n in range(4)])
    later = {n: {**as_reader(n, f"note {n}"), "channel": "shop"} for n in range(4, 8)}
    produce(kafka, topics[1], [(n, wire_format(newer, ORDER_V3, later[n])) for n in later])
    source = options(kafka, schema_registry.url, ",".join(topics), "python")
    source["valueSchema"] = json.dumps(ORDER_V2)
    source["kafka.group.id"] = f"{topics[0]}-g"
    query = Query(spark, source, tmp_path)
    try:
        assert query.schema["value"].dataType == VALUE_TYPE  # as from the registered v2
        wait_for(lambda: len(query.rows()) == 8, 120, "the 8 records of both topics")
    finally:
        query.stop()
    by_id = {v["id"]: v for v in values(query.rows()) if v is not None}
    expected = {n: as_reader(n) for n in range(4)} | {n: as_reader(n, f"note {n}") for n in later}
    assert by_id == expected


POISONS = (BAD_MAGIC_BYTE, UNKNOWN_SCHEMA_ID, TRUNCATED, UNRESOLVABLE_SCHEMA)


def poison(kind: str, good: bytes, clash: bytes) -> bytes:
    unknown_id = b"\x00" + struct.pack(">I", 987_654) + good[5:]
    return {
        BAD_MAGIC_BYTE: b"\x01" + good[1:],
        UNKNOWN_SCHEMA_ID: unknown_id,
        TRUNCATED: good[:-3],
        UNRESOLVABLE_SCHEMA: clash,
    }[kind]


def test_each_poison_kind_fails_the_query_naming_it_commits_nothing_past_it_and_can_be_skipped(
    spark, kafka, schema_registry, read_path, tmp_path
):
    """One partition: per kind, good records become durable, then a poison record fails the
    query; a restart meets it again; the documented skip (an offsets action: alter the
    group's offset past it, start fresh) reads on. No good record is lost or repeated."""
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="poison")
    reader_id = schema_registry.register(f"{topic}-value", ORDER_V2)
    clash = wire_format(
        schema_registry.register(f"{topic}-clash-value", CLASH), CLASH, {**order(0), "id": "x"}
    )
    manifest = tmp_path / "job.yaml"  # the job as the offsets CLI sees it: its group, topics
    document = job_manifest("poison", kafka.bootstrap, topic, tmp_path, groupId=f"{topic}-g")
    manifest.write_text(yaml.safe_dump(document))
    source = options(kafka, schema_registry.url, topic, read_path)
    output: list[dict | None] = []
    for epoch, kind in enumerate([*POISONS, None]):
        ids = range(epoch * 2, epoch * 2 + 2)
        produce(kafka, topic, [(n, wire_format(reader_id, ORDER_V2, as_reader(n))) for n in ids])
        query = Query(spark, source, tmp_path / f"epoch-{epoch}")  # a fresh start each time
        at = committed_to_end(kafka, topic)[0]
        if kind is None:
            query.stop()
            output += values(query.rows())
            break
        good = wire_format(reader_id, ORDER_V2, as_reader(100))
        produce(kafka, topic, [(100, poison(kind, good, clash))])
        cause = query.failure()
        assert cause.startswith(f"poison record {topic}-0 offset {at}: {kind}: "), cause
        assert f"move the group's offset of {topic}-0 to {at + 1}" in cause
        assert group_offsets(kafka.bootstrap, f"{topic}-g", topic) == {0: at}
        assert len(query.uncommitted_batches()) == 1  # planned, never committed
        output += values(query.rows())
        if epoch == 0:  # a restart of the same checkpoint meets it again
            again = Query(spark, source, tmp_path / "epoch-0")
            assert again.failure().startswith(f"poison record {topic}-0 offset {at}: {kind}")
            assert group_offsets(kafka.bootstrap, f"{topic}-g", topic) == {0: at}
        skip = ["--manifest", str(manifest), "alter", "--partition", f"{topic}:0={at + 1}"]
        assert offsets_cli.main(skip) == 0
    assert output == [as_reader(n) for n in range(10)]  # all good records, once, in order


def test_a_registry_down_at_query_start_fails_the_start_naming_the_option(spark, kafka):
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    source = options(kafka, url, "orders", "python", schemaRegistryTimeoutMs="1000")
    started = time.monotonic()
    with pytest.raises(Exception, match="option schemaRegistryUrl") as error:
        spark.readStream.format(FORMAT).options(**source).load()
    assert time.monotonic() - started >= 1.0  # retried with backoff first
    assert "unavailable for 1s (GET /subjects/orders-value/versions/latest)" in str(error.value)
    assert "Start the registry or fix option schemaRegistryUrl" in str(error.value)


# A registry outage is met by the one decode step after the read, whichever path read the
# batch: these run on the default path (the fetch engine), each with a registry of its own.
OUTAGE_READ_PATH = "fetch"


def test_a_registry_outage_mid_stream_fails_the_query_only_at_a_new_schema_id(
    spark, kafka, own_registry, tmp_path
):
    read_path = OUTAGE_READ_PATH
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="outage")
    v2 = own_registry.register(f"{topic}-value", ORDER_V2)
    produce(kafka, topic, [(n, wire_format(v2, ORDER_V2, as_reader(n))) for n in range(3)])
    source = options(kafka, own_registry.url, topic, read_path, schemaRegistryTimeoutMs="3000")
    query = Query(spark, source, tmp_path)  # the reader: v2, the subject's latest
    try:
        committed_to_end(kafka, topic)
        v3 = own_registry.register(f"{topic}-value", ORDER_V3)  # never seen by the query
        own_registry.stop(kill=True)
        produce(kafka, topic, [(n, wire_format(v2, ORDER_V2, as_reader(n))) for n in range(3, 6)])
        at = committed_to_end(kafka, topic)[0]  # the reader's own id needs no registry
        newer = {**as_reader(6), "channel": "shop"}
        produce(kafka, topic, [(6, wire_format(v3, ORDER_V3, newer))])
        cause = query.failure()
    finally:
        query.stop()
    assert cause.startswith(
        f"{topic}-0 offset {at}: schema registry {own_registry.url} unavailable for 3s "
        f"(GET /schemas/ids/{v3})"
    ), cause
    assert "option schemaRegistryUrl" in cause
    assert group_offsets(kafka.bootstrap, f"{topic}-g", topic) == {0: at}
    assert values(query.rows()) == [as_reader(n) for n in range(6)]


def test_an_executor_keeps_decoding_cached_ids_through_an_outage_and_waits_for_a_new_one(
    kafka, own_registry
):
    """read() as a Python worker runs it, in this one process (its cache): writer schemas
    fetched before the outage keep decoding; a new id is retried until the timeout."""
    read_path = OUTAGE_READ_PATH
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="cached")
    subject = f"{topic}-value"
    v1, v2, v3 = (own_registry.register(subject, s) for s in (ORDER_V1, ORDER_V2, ORDER_V3))
    source = KafkaCheckpointedDataSource(
        options(
            kafka, own_registry.url, topic, read_path, valueSchemaVersion="2",
            schemaRegistryTimeoutMs="2000", startingOffsets="earliest",
        )
    )  # fmt: skip
    reader = source.streamReader(source.schema())

    def planned(start: dict) -> dict | None:
        end = reader.latestOffset(start, ReadAllAvailable())
        return None if end == start else end  # log ends are cached for minFetchIntervalMs

    def batch(start: dict) -> tuple[dict, list[dict | None]]:
        end = wait_for(lambda: planned(start), 30, "a batch of the new records")
        rows = [
            row
            for partition in reader.partitions(start, end)
            for arrow in reader.read(partition)
            for row in arrow.to_pylist()
        ]
        return end, [row["value"] for row in rows]

    older = [(n, wire_format(v1, ORDER_V1, order(n))) for n in (0, 2)]
    try:
        produce(kafka, topic, older)
        end, decoded = batch(reader.initialOffset())
        assert decoded == [as_reader(0), as_reader(2)]
        own_registry.stop(kill=True)
        produce(kafka, topic, [(4, wire_format(v1, ORDER_V1, order(4)))])
        end, decoded = batch(end)
        assert decoded == [as_reader(4)]  # v1 from this process's cache
        produce(kafka, topic, [(5, wire_format(v3, ORDER_V3, as_reader(5)))])
        started = time.monotonic()
        with pytest.raises(RegistryUnavailable, match=rf"{topic}-0 offset 3: .*for 2s") as error:
            batch(end)
        assert time.monotonic() - started >= 2.0
        assert f"GET /schemas/ids/{v3}" in str(error.value)
    finally:
        reader.stop()
    assert v2 == reader.values.reader.schema_id


def _dead_letters(kafka: KafkaBroker, topic: str) -> list[dict]:
    """The dead-letter topic as a read_committed consumer sees it, to the log's end."""
    seen = [
        {"key": m.key(), "value": m.value(), **dict(m.headers() or [])}
        for m in consume_to_end(kafka.bootstrap, topic, "read_committed")
    ]
    return sorted(seen, key=lambda d: int(d["streamingjob.source.offset"]))


def rows_but_one_dead(
    query: Query, kafka: KafkaBroker, topic: str, dead_topic: str, poison: tuple, rows: int
) -> list[dict]:
    """Runs `query` until `rows` rows are in its sink, stops it, and checks that the one poison
    record, `(key, value bytes, reason)`, is in the dead-letter topic and every other record of
    `topic` in the sink; the sink's rows."""
    try:
        wait_for(lambda: len(query.rows()) == rows, 180, "every good record in the sink")
    finally:
        query.stop()
    found = query.rows()
    every = {
        (p, o) for p, end in log_end_offsets(kafka.bootstrap, topic).items() for o in range(end)
    }
    dead = _dead_letters(kafka, dead_topic)
    assert [(d["key"], d["value"], d["streamingjob.error.reason"]) for d in dead] == [poison]
    poisoned = (
        int(dead[0]["streamingjob.source.partition"]),
        int(dead[0]["streamingjob.source.offset"]),
    )
    assert {(r["partition"], r["offset"]) for r in found} == every - {poisoned}
    return found


def values_by_id(rows: list[dict]) -> dict:
    """The rows' decoded values by id, `placed` in UTC (collect() gives local timestamps)."""
    return {
        r["value"]["id"]: {**r["value"], "placed": r["value"]["placed"].astimezone(UTC)}
        for r in rows
        if r["value"] is not None
    }


def test_poison_records_go_to_the_dead_letter_topic_once_across_a_crash_and_a_redeploy(
    spark, kafka, schema_registry, read_path, tmp_path
):
    """Good records to the sink, each poison kind to the dead-letter topic with its bytes,
    its own headers and where and why; the batch re-run after a crash before its commit and
    a redeploy that reads everything again write no dead record twice."""
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="dlq-src")
    dead_topic = new_topic(kafka.bootstrap, partitions=2, prefix="dlq")
    reader_id = schema_registry.register(f"{topic}-value", ORDER_V2)
    clash = wire_format(
        schema_registry.register(f"{topic}-clash-value", CLASH), CLASH, {**order(0), "id": "x"}
    )
    good = [wire_format(reader_id, ORDER_V2, as_reader(n)) for n in range(8)]
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for n in range(8):  # offsets: good 0, poison 1, good 2, poison 3, ...
        producer.produce(topic, key=str(n).encode(), value=good[n])
        if n < len(POISONS):
            bad = poison(POISONS[n], good[n], clash)
            producer.produce(topic, key=b"bad%d" % n, value=bad, headers=[("trace", b"t%d" % n)])
    assert producer.flush(30) == 0
    source = options(kafka, schema_registry.url, topic, read_path, deadLetterTopic=dead_topic)
    report = tmp_path / "source-report.json"  # the driver's, which the operator reads
    source |= {"jobName": "orders", "jobEpoch": "4", "reportPath": str(report)}

    def dead_counted() -> dict:
        return json.loads(report.read_text()).get("deadLetterRecords") if report.exists() else {}

    first = Query(spark, source, tmp_path / "epoch-4")  # one batch: everything produced
    committed_to_end(kafka, topic)
    counted = dict.fromkeys(POISONS, 1)
    wait_for(lambda: dead_counted() == counted, 60, f"the driver's tally at {counted}")
    first.stop()
    assert values(first.rows()) == [as_reader(n) for n in range(8)]
    expected = [
        {
            "key": b"bad%d" % n,
            "value": poison(kind, good[n], clash),
            "trace": b"t%d" % n,
            "streamingjob.source.topic": topic.encode(),
            "streamingjob.source.partition": b"0",
            "streamingjob.source.offset": str(2 * n + 1).encode(),
            "streamingjob.error.reason": kind.encode(),
            "streamingjob.error.column": b"value",
            "streamingjob.job": b"orders",
            "streamingjob.epoch": b"4",
        }
        for n, kind in enumerate(POISONS)
    ]

    def without_times_and_messages(records: list[dict]) -> list[dict]:
        drop = ("streamingjob.source.timestamp", "streamingjob.error.message")
        return [{k: v for k, v in r.items() if k not in drop} for r in records]

    assert without_times_and_messages(_dead_letters(kafka, dead_topic)) == expected

    # a crash after the batch's writes, before its commit: Spark runs batch 0 again
    (first.checkpoint / "commits" / "0").unlink()
    again = Query(spark, source, tmp_path / "epoch-4")
    wait_for(lambda: (again.checkpoint / "commits" / "0").exists(), 120, "batch 0 again")
    again.stop()
    assert dead_counted() == {}  # this run wrote no copy
    # a redeploy reading the topic from its start: a fresh checkpoint, epoch 5
    source |= {"startingOffsets": "earliest", "jobEpoch": "5"}
    fresh = Query(spark, source, tmp_path / "epoch-5")
    wait_for(lambda: len(fresh.rows()) == 8, 120, "the redeploy's sink to hold every good record")
    fresh.stop()
    assert values(fresh.rows()) == [as_reader(n) for n in range(8)]
    assert without_times_and_messages(_dead_letters(kafka, dead_topic)) == expected
