"""valueFormat=json end to end: a real broker, a real schema registry (Apicurio, schemaType
JSON) and a query on local Spark on the default read path. Records of two schema versions
decode to the reader schema's typed column (every record checked), a poison record goes to
the dead-letter topic with its reason. The decoder's cases: tests/integration/test_json_decoding.py;
the Avro twin and the per-path runs: test_typed_records.py."""

from __future__ import annotations

import copy
from datetime import UTC, date, datetime, timedelta

import pytest
from confluent_kafka import Producer
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from devbed.kafka_broker import KafkaBroker
from devbed.polling import wait_for
from devbed.schema_registry import SchemaRegistry, json_wire_format
from spark_app.formats.decoding import MALFORMED_PAYLOAD
from tests.integration.spark_app.test_typed_records import (  # the Avro tests' query helpers
    Query,
    _dead_letters,
    produce,
    rows_but_one_dead,
    spark,  # noqa: F401  (the module's Spark session fixture)
    values_by_id,
)
from tests.support.kafka_tools import new_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ORDER_V1 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "placed": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "address": {"$ref": "#/$defs/Address"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "placed", "day", "address"],
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": ["string", "null"]}},
            "required": ["city"],
        }
    },
}
# v2 (the reader): an optional note, a channel with a default
ORDER_V2 = copy.deepcopy(ORDER_V1)
ORDER_V2["properties"] |= {
    "note": {"type": ["string", "null"]},
    "channel": {"type": "string", "default": "web"},
}
ADDRESS = StructType(
    [StructField("city", StringType(), False), StructField("zip", StringType(), True)]
)
VALUE_TYPE = StructType(
    [
        StructField("id", LongType(), False),
        StructField("placed", TimestampType(), False),
        StructField("day", DateType(), False),
        StructField("address", ADDRESS, False),
        StructField("tags", ArrayType(StringType(), False), True),
        StructField("note", StringType(), True),
        StructField("channel", StringType(), False),
    ]
)
PLACED = datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=UTC)


def order(n: int) -> dict:
    """Record n as a v1 writer sends it (some without tags, some without a zip)."""
    placed = PLACED + timedelta(milliseconds=n)
    document = {
        "id": n,
        "placed": placed.isoformat(),
        "day": (date(2026, 11, 24) + timedelta(days=n)).isoformat(),
        "address": {"city": f"city-{n}", **({"zip": f"{n:05d}"} if n % 2 else {})},
    }
    return document | ({"tags": [f"t{n}"]} if n % 3 else {})


def as_reader(n: int, note: str | None = None, channel: str = "web") -> dict:
    """Record n as the v2 reader gives it, whichever version wrote it."""
    return {
        "id": n,
        "placed": PLACED + timedelta(milliseconds=n),
        "day": date(2026, 11, 24) + timedelta(days=n),
        "address": {"city": f"city-{n}", "zip": f"{n:05d}" if n % 2 else None},
        "tags": [f"t{n}"] if n % 3 else None,
        "note": note,
        "channel": channel,
    }


def test_json_schema_records_decode_to_typed_columns_and_poison_goes_to_the_dead_letter_topic(
    spark,  # noqa: F811
    kafka: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path,
):
    topic = new_topic(kafka.bootstrap, partitions=2, prefix="json-typed")
    dead_topic = new_topic(kafka.bootstrap, partitions=1, prefix="json-dlq")
    v1 = schema_registry.register(f"{topic}-value", ORDER_V1, "JSON")
    v2 = schema_registry.register(f"{topic}-value", ORDER_V2, "JSON")
    newer = {n: {**order(n), "note": f"note {n}", "channel": "shop"} for n in range(4, 8)}
    bad = json_wire_format(v2, order(8))[:-2]  # a document cut short
    produce(kafka, topic, [(n, json_wire_format(v1, order(n))) for n in range(4)])
    produce(kafka, topic, [(n, json_wire_format(v2, d)) for n, d in newer.items()])
    produce(kafka, topic, [(99, None), (8, bad)])  # a tombstone (not poison), a poison record
    source = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"{topic}-g",
        "partitionDiscoveryIntervalMs": "0",
        "valueFormat": "json",
        "schemaRegistryUrl": schema_registry.url,
        "deadLetterTopic": dead_topic,
    }
    query = Query(spark, source, tmp_path)
    # 8 good records and the tombstone; the poison record's copy is committed to the
    # dead-letter topic before its batch's output is
    rows = rows_but_one_dead(
        query, kafka, topic, dead_topic, (b"8", bad, MALFORMED_PAYLOAD.encode()), rows=9
    )
    assert query.schema["value"].dataType == VALUE_TYPE  # schema() gave the decoded type
    by_id = values_by_id(rows)
    expected = {n: as_reader(n) for n in range(4)}
    expected |= {n: as_reader(n, f"note {n}", "shop") for n in newer}
    assert by_id == expected
    assert [r["key"] for r in rows if r["value"] is None] == [b"99"]


KEY_SCHEMA = {
    "type": "object",
    "properties": {"shop": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["shop", "n"],
}


def test_json_keys_decode_to_a_typed_key_column_beside_raw_values_and_a_poison_key_is_dead_lettered(
    spark,  # noqa: F811
    kafka: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path,
):
    """keyFormat=json with valueFormat raw: the key column is the reader schema's struct (a
    null key stays null), the value stays bytes; a key that is not JSON goes to the
    dead-letter topic with its bytes and streamingjob.error.column=key."""
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="json-keys")
    dead_topic = new_topic(kafka.bootstrap, partitions=1, prefix="json-keys-dlq")
    key_id = schema_registry.register(f"{topic}-key", KEY_SCHEMA, "JSON")
    bad_key = json_wire_format(key_id, {"shop": "x"})[:-1]  # a document cut short
    records = [(json_wire_format(key_id, {"shop": "lyon", "n": n}), b"v%d" % n) for n in range(3)]
    records += [(None, b"no key"), (bad_key, b"v-bad")]
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    source = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"{topic}-g",
        "partitionDiscoveryIntervalMs": "0",
        "keyFormat": "json",
        "schemaRegistryUrl": schema_registry.url,
        "deadLetterTopic": dead_topic,
    }
    query = Query(spark, source, tmp_path)
    try:
        key_type = StructType(
            [StructField("shop", StringType(), False), StructField("n", LongType(), False)]
        )
        assert query.schema["key"].dataType == key_type
        assert query.schema["value"].dataType == BinaryType()
        wait_for(lambda: len(query.rows()) == 4, 120, "the 4 records with a good or null key")
    finally:
        query.stop()
    assert [(r["key"], r["value"]) for r in query.rows()] == [
        *[({"shop": "lyon", "n": n}, b"v%d" % n) for n in range(3)],
        (None, b"no key"),
    ]
    dead = _dead_letters(kafka, dead_topic)
    assert [
        (d["key"], d["value"], d["streamingjob.error.reason"], d["streamingjob.error.column"])
        for d in dead
    ] == [(bad_key, b"v-bad", MALFORMED_PAYLOAD.encode(), b"key")]
