"""Avro values in the Confluent wire format, from a real broker, decoded with schemas from a
real registry (Apicurio, Confluent-compatible API): evolution resolves to the reader schema,
poison records are classified with a reason, the registry is asked once per id, an outage or
bad credentials are clear errors (spark_app/formats/decoding.py)."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from devbed.kafka_broker import KafkaBroker
from devbed.ports import free_port
from devbed.schema_registry import SchemaRegistry, wire_format
from spark_app.formats.avro_types import arrow_column
from spark_app.formats.decoding import (
    BAD_MAGIC_BYTE,
    MALFORMED_PAYLOAD,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    AvroDecoder,
    Poison,
    PoisonRecordError,
    ReaderSchemaError,
    decode_value_column,
    resolve_reader_schema,
)
from spark_app.formats.schema_registry_client import (
    RegistryRefused,
    RegistryUnavailable,
    SchemaRegistryClient,
)
from spark_app.source.partition_range import KafkaInputPartition
from spark_app.source.partition_reader import read_range
from tests.support.kafka_tools import consume_values, new_topic

pytestmark = pytest.mark.integration

# Nested records, optional fields, arrays, maps and logical types.
ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "test.avro",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "quantity", "type": "int"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
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
        {"name": "counts", "type": {"type": "map", "values": "long"}},
    ],
}
# v2: a new optional field with a default, and quantity promoted from int to long.
ORDER_V2 = copy.deepcopy(ORDER_V1)
ORDER_V2["fields"][1]["type"] = "long"
ORDER_V2["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
# v3: one more field with a default.
ORDER_V3 = copy.deepcopy(ORDER_V2)
ORDER_V3["fields"].append({"name": "channel", "type": "string", "default": "web"})

PLACED = datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=UTC)
ORDER = {
    "id": 7,
    "quantity": 3,
    "placed": PLACED,
    "price": Decimal("12.34"),
    "address": {"city": "Lyon", "zip": None},
    "tags": ["a", "b"],
    "counts": {"x": 1},
}


def _produce(kafka: KafkaBroker, values: list[bytes | None]) -> str:
    """A one-partition topic holding `values` in order; returns its name."""
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="avro")
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    return topic


def _client(registry: SchemaRegistry, **kwargs: object) -> SchemaRegistryClient:
    return SchemaRegistryClient(registry.url, **kwargs)  # type: ignore[arg-type]


def _subject(topic: str) -> str:
    return f"{topic}-value"


def test_older_and_newer_records_decode_to_the_latest_schema(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = _subject(new_topic(kafka.bootstrap, partitions=1, prefix="subject"))
    v1 = schema_registry.register(subject, ORDER_V1)
    v2 = schema_registry.register(subject, ORDER_V2)
    topic = _produce(
        kafka,
        [wire_format(v1, ORDER_V1, ORDER), wire_format(v2, ORDER_V2, {**ORDER, "note": "hi"})],
    )
    client = _client(schema_registry)
    reader = resolve_reader_schema(client, subject)
    assert (reader.schema_id, reader.version) == (v2, 2)
    decoder = AvroDecoder(client, reader)
    decoded = [decoder.decode(v) for v in consume_values(kafka.bootstrap, topic)]
    assert decoded == [{**ORDER, "note": None}, {**ORDER, "note": "hi"}]
    # The rows fit the column Spark's from_avro would give the reader schema.
    assert decoder.column_type.fieldNames()[-2:] == ["counts", "note"]
    column = arrow_column(decoded, decoder.column_type).to_pylist()
    assert [(row["placed"], row["price"], row["note"]) for row in column] == [
        (PLACED, Decimal("12.34"), None),
        (PLACED, Decimal("12.34"), "hi"),
    ]


def test_a_pinned_version_reads_older_and_newer_records_in_its_own_shape(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = _subject("pinned")
    v1, v2, v3 = (schema_registry.register(subject, s) for s in (ORDER_V1, ORDER_V2, ORDER_V3))
    client = _client(schema_registry)
    decoder = AvroDecoder(client, resolve_reader_schema(client, subject, 2))
    topic = _produce(
        kafka,
        [
            wire_format(v3, ORDER_V3, {**ORDER, "note": "n", "channel": "shop"}),
            wire_format(v1, ORDER_V1, ORDER),
        ],
    )
    decoded = [decoder.decode(v) for v in consume_values(kafka.bootstrap, topic)]
    assert decoded == [{**ORDER, "note": "n"}, {**ORDER, "note": None}]
    # Pinned to v1, a v2 record's long quantity has no Avro rule back to int: poison.
    older = AvroDecoder(client, resolve_reader_schema(client, subject, 1))
    poison = older.decode(wire_format(v2, ORDER_V2, ORDER))
    assert isinstance(poison, Poison) and poison.reason == UNRESOLVABLE_SCHEMA
    assert "long is not int" in poison.message


def test_poison_records_are_classified_and_decoding_goes_on(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = _subject("poison")
    good_id = schema_registry.register(subject, ORDER_V1)
    # A writer whose `id` is a string: no Avro rule turns a string into the reader's long.
    clash = copy.deepcopy(ORDER_V1)
    clash["fields"][0]["type"] = "string"
    clash_id = schema_registry.register("poison-clash-value", clash)
    good = wire_format(good_id, ORDER_V1, ORDER)
    values = [
        b"\x01" + good[1:],  # bad magic byte
        wire_format(987_654, ORDER_V1, ORDER),  # an id no one registered
        good[:-4],  # payload cut inside the map
        wire_format(good_id, ORDER_V1, {**ORDER, "id": 2**40})[:7],  # cut inside a varint
        good[:3],  # not even a header
        wire_format(clash_id, clash, {**ORDER, "id": "seven"}),
        good + b"\x02\x04",  # bytes after the value
        None,  # a tombstone: not poison
        good,
    ]
    topic = _produce(kafka, values)
    client = _client(schema_registry)
    decoder = AvroDecoder(client, resolve_reader_schema(client, subject))
    decoded = [decoder.decode(v) for v in consume_values(kafka.bootstrap, topic)]
    reasons = [d.reason if isinstance(d, Poison) else d for d in decoded]
    assert reasons == [
        BAD_MAGIC_BYTE,
        UNKNOWN_SCHEMA_ID,
        TRUNCATED,
        TRUNCATED,
        TRUNCATED,
        UNRESOLVABLE_SCHEMA,
        MALFORMED_PAYLOAD,
        None,
        ORDER,
    ]
    assert isinstance(decoded[1], Poison) and "987654" in decoded[1].message


def test_the_registry_is_asked_once_per_schema_id(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = _subject("cache")
    v1 = schema_registry.register(subject, ORDER_V1)
    v2 = schema_registry.register(subject, ORDER_V2)
    values = [wire_format(v1, ORDER_V1, ORDER), wire_format(v2, ORDER_V2, ORDER)] * 50
    values.append(wire_format(424_242, ORDER_V1, ORDER))  # unknown: a miss is kept too
    topic = _produce(kafka, values + values[-1:])
    client = _client(schema_registry)
    decoder = AvroDecoder(client, resolve_reader_schema(client, subject))
    before = client.requests
    decoded = [decoder.decode(v) for v in consume_values(kafka.bootstrap, topic)]
    assert sum(isinstance(d, Poison) for d in decoded) == 2
    # v1 and the unknown id, once each; v2 is the reader schema itself: never asked
    assert client.requests - before == 2
    client.schema_by_id(v1)  # the client's own cache, for any other caller
    assert client.requests - before == 2


def test_the_sources_batches_get_a_typed_value_column_and_stop_at_a_poison_record(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = _subject("batches")
    v1 = schema_registry.register(subject, ORDER_V1)
    good = [wire_format(v1, ORDER_V1, {**ORDER, "id": n}) for n in range(5)]
    topic = _produce(kafka, [*good, b"\x07not avro", good[0]])
    client = _client(schema_registry)
    decoder = AvroDecoder(client, resolve_reader_schema(client, subject))

    def batches(end: int) -> list:
        # The executors' own read (the pure-Python path), as Spark's Python worker runs it.
        config = {"bootstrap.servers": kafka.bootstrap}
        p = KafkaInputPartition(topic, 0, 0, end, client_config=config, read_path="python")
        reader = read_range(p)
        try:
            return [decode_value_column(batch, decoder) for batch in reader]
        finally:
            reader.close()  # its consumer, also when a poison record stops the read

    decoded = batches(5)
    values = [row for batch in decoded for row in batch.column("value").to_pylist()]
    assert [row["id"] for row in values] == list(range(5))
    assert values[0]["placed"] == PLACED and values[0]["address"] == {"city": "Lyon", "zip": None}
    assert decoded[0].column("offset").to_pylist()[:2] == [0, 1]  # metadata columns kept
    with pytest.raises(PoisonRecordError, match=rf"{topic}-0 offset 5: bad-magic-byte") as error:
        batches(7)
    assert f"move the group's offset of {topic}-0 to 6" in str(error.value)


@pytest.fixture
def secured_registry(tmp_path: Path) -> Iterator[SchemaRegistry]:
    with SchemaRegistry(tmp_path / "registry", basic_auth=("reader", "s3cret-pw")) as registry:
        yield registry


def test_basic_auth_credentials_are_sent_and_wrong_ones_are_a_clear_error(
    secured_registry: SchemaRegistry,
) -> None:
    schema_id = secured_registry.register("auth-value", ORDER_V1)
    client = _client(secured_registry, username="reader", password="s3cret-pw")
    assert resolve_reader_schema(client, "auth-value").schema_id == schema_id
    wrong = _client(secured_registry, username="reader", password="not-it")
    with pytest.raises(RegistryRefused, match=r"HTTP 401.*check the credentials") as error:
        wrong.schema_by_id(schema_id)
    assert "not-it" not in str(error.value)
    with pytest.raises(RegistryRefused, match="HTTP 401"):
        _client(secured_registry).schema_by_id(schema_id)  # none at all


def test_cached_ids_outlive_a_registry_outage_and_a_new_id_fails_clearly(
    secured_registry: SchemaRegistry,
) -> None:
    subject = "outage-value"
    v1 = secured_registry.register(subject, ORDER_V1)
    v2 = secured_registry.register(subject, ORDER_V2)
    client = _client(secured_registry, username="reader", password="s3cret-pw", timeout_s=2.0)
    decoder = AvroDecoder(client, resolve_reader_schema(client, subject, 1))
    old = wire_format(v1, ORDER_V1, ORDER)
    assert decoder.decode(old) == ORDER
    secured_registry.stop(kill=True)
    assert decoder.decode(old) == ORDER  # from the cache
    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match="unavailable for 2s") as error:
        decoder.decode(wire_format(v2, ORDER_V2, ORDER))
    assert time.monotonic() - started >= 2.0  # retried with backoff until the deadline
    assert f"/schemas/ids/{v2}" in str(error.value)
    assert "s3cret" not in str(error.value)


def test_a_registry_down_at_start_is_a_clear_error() -> None:
    client = SchemaRegistryClient(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", timeout_s=1)
    with pytest.raises(RegistryUnavailable, match=r"127\.0\.0\.1.*unavailable for 1s"):
        resolve_reader_schema(client, "orders-value")


def test_a_missing_subject_or_version_at_start_is_a_clear_error(
    schema_registry: SchemaRegistry,
) -> None:
    client = _client(schema_registry)
    with pytest.raises(ReaderSchemaError, match="'nowhere-value' has no version latest"):
        resolve_reader_schema(client, "nowhere-value")
    schema_registry.register("one-version-value", ORDER_V1)
    with pytest.raises(ReaderSchemaError, match=r"has no version 5.*valueSchemaVersion"):
        resolve_reader_schema(client, "one-version-value", 5)
    shapeless = {
        "type": "record",
        "name": "S",
        "fields": [{"name": "x", "type": ["int", "string"]}],
    }
    schema_registry.register("shapeless-value", shapeless)
    with pytest.raises(ReaderSchemaError, match=r"version 1: value\.x: a union of 2 non-null"):
        resolve_reader_schema(client, "shapeless-value")
