"""JSON Schema values in the Confluent wire format, from a real broker, decoded with schemas
from a real registry (Apicurio, Confluent-compatible API, schemaType JSON): records of older
and newer schemas read in the reader's shape, each poison kind is classified, what has no
column shape is refused at start (spark_app/formats/json_values.py through
spark_app/formats/decoding.py)."""

from __future__ import annotations

import copy
from datetime import UTC, date, datetime

import pytest
from confluent_kafka import Producer

from devbed.kafka_broker import KafkaBroker
from devbed.schema_registry import SchemaRegistry, json_wire_format
from spark_app.formats.decoding import (
    BAD_MAGIC_BYTE,
    MALFORMED_PAYLOAD,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    Poison,
    ReaderSchemaError,
    WireDecoder,
    decode_value_column,
    resolve_reader_schema,
)
from spark_app.formats.poison import DeadRecord
from spark_app.formats.schema_registry_client import SchemaRegistryClient
from spark_app.source.partition_range import KafkaInputPartition
from spark_app.source.partition_reader import read_range
from tests.support.kafka_tools import consume_values, new_topic

pytestmark = pytest.mark.integration

# Nested, optional, date and date-time, arrays, a local $ref.
ORDER_V1 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Order",
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
# v2: an optional field, and a required one with a default (older records get it).
ORDER_V2 = copy.deepcopy(ORDER_V1)
ORDER_V2["properties"] |= {
    "note": {"type": ["string", "null"]},
    "channel": {"type": "string", "default": "web"},
}
ORDER_V2["required"].append("channel")
# v3: one more field, which a v2 reader does not know.
ORDER_V3 = copy.deepcopy(ORDER_V2)
ORDER_V3["properties"]["coupon"] = {"type": "string"}

ORDER = {
    "id": 7,
    "placed": "2026-11-24T12:30:15.123Z",
    "day": "2026-11-24",
    "address": {"city": "Lyon"},
    "tags": ["a", "b"],
}
PLACED = datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=UTC)
# ORDER as each reader gives it
AS_V1 = {
    "id": 7,
    "placed": PLACED,
    "day": date(2026, 11, 24),
    "address": {"city": "Lyon", "zip": None},
    "tags": ["a", "b"],
}
AS_V2 = {**AS_V1, "note": None, "channel": "web"}


def _produce(kafka: KafkaBroker, values: list[bytes | None]) -> str:
    """A one-partition topic holding `values` in order; returns its name."""
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="json")
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    return topic


def _decoder(registry: SchemaRegistry, subject: str, version: int | str = "latest") -> WireDecoder:
    client = SchemaRegistryClient(registry.url)
    return WireDecoder(client, resolve_reader_schema(client, subject, version, "json"), "json")


def _decoded(kafka: KafkaBroker, decoder: WireDecoder, values: list[bytes | None]) -> list:
    return [decoder.decode(v) for v in consume_values(kafka.bootstrap, _produce(kafka, values))]


def test_older_and_newer_records_read_in_the_latest_readers_shape(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = "json-evolve-value"
    ids = [schema_registry.register(subject, s, "JSON") for s in (ORDER_V1, ORDER_V2, ORDER_V3)]
    v1, v2, v3 = ids
    reader = resolve_reader_schema(SchemaRegistryClient(schema_registry.url), subject, 2, "json")
    assert (reader.schema_id, reader.version, reader.schema_type) == (v2, 2, "JSON")
    decoder = _decoder(schema_registry, subject, 2)
    assert decoder.column_type.fieldNames() == [*AS_V1, "note", "channel"]
    values = [
        json_wire_format(v1, ORDER),  # older: note null, channel its default
        json_wire_format(v2, {**ORDER, "note": "hi", "channel": "shop"}),
        json_wire_format(v3, {**ORDER, "channel": "app", "coupon": "X1"}),  # newer: dropped
        None,  # a tombstone: not poison
    ]
    assert _decoded(kafka, decoder, values) == [
        AS_V2,
        {**AS_V2, "note": "hi", "channel": "shop"},
        {**AS_V2, "channel": "app"},
        None,
    ]
    # The latest (v3) reader reads the older records too: coupon is null where absent.
    latest = _decoder(schema_registry, subject)
    assert latest.decode(json_wire_format(v1, ORDER)) == {**AS_V2, "coupon": None}


def test_a_pinned_older_reader_drops_what_it_does_not_know_and_refuses_what_it_cannot_take(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = "json-pinned-value"
    v1, _, v3 = (
        schema_registry.register(subject, s, "JSON") for s in (ORDER_V1, ORDER_V2, ORDER_V3)
    )
    decoder = _decoder(schema_registry, subject, 1)
    newer = {**ORDER, "note": "n", "channel": "app", "coupon": "X1"}
    # A v3 record whose id became a string (no compatibility rule stopped it): the v1 reader
    # cannot take it.
    clash = {**ORDER, "id": "seven"}
    decoded = _decoded(kafka, decoder, [json_wire_format(v3, newer), json_wire_format(v3, clash)])
    assert decoded[0] == AS_V1
    assert isinstance(decoded[1], Poison) and decoded[1].reason == UNRESOLVABLE_SCHEMA
    assert f"a record of schema id {v3} fails the reader schema at value.id" in decoded[1].message
    assert decoder.decode(json_wire_format(v1, ORDER)) == AS_V1


def test_poison_records_are_classified_and_decoding_goes_on(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = "json-poison-value"
    good_id = schema_registry.register(subject, ORDER_V1, "JSON")
    avro_id = schema_registry.register(
        "json-poison-avro-value",
        {"type": "record", "name": "A", "fields": [{"name": "id", "type": "long"}]},
    )
    good = json_wire_format(good_id, ORDER)
    values = [
        b"\x01" + good[1:],  # bad magic byte
        json_wire_format(987_654, ORDER),  # an id no one registered
        good[:3],  # not even a header
        good[:5],  # a header and no document
        good[:-3],  # a document cut short
        json_wire_format(good_id, {"id": 1}),  # valid JSON, but not for the reader
        json_wire_format(good_id, {**ORDER, "day": "24.11.2026"}),  # not a date
        json_wire_format(avro_id, ORDER),  # an Avro schema's id
        good,
    ]
    decoded = _decoded(kafka, _decoder(schema_registry, subject), values)
    assert [d.reason if isinstance(d, Poison) else d for d in decoded] == [
        BAD_MAGIC_BYTE,
        UNKNOWN_SCHEMA_ID,
        TRUNCATED,
        MALFORMED_PAYLOAD,
        MALFORMED_PAYLOAD,
        UNRESOLVABLE_SCHEMA,
        UNRESOLVABLE_SCHEMA,
        UNRESOLVABLE_SCHEMA,
        AS_V1,
    ]
    messages = [d.message for d in decoded[:-1]]
    assert "987654" in messages[1]
    assert "'placed' is a required property" in messages[5]
    assert "value.day: '24.11.2026' is not a date" in messages[6]
    assert messages[7] == f"schema id {avro_id} is AVRO, not JSON"


def test_the_sources_batches_get_a_typed_value_column_and_poison_goes_aside(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    subject = "json-batches-value"
    v1 = schema_registry.register(subject, ORDER_V1, "JSON")
    good = [json_wire_format(v1, {**ORDER, "id": n}) for n in range(4)]
    topic = _produce(kafka, [*good[:2], good[0][:-1], *good[2:]])  # offset 2: cut short
    decoder = _decoder(schema_registry, subject)
    config = {"bootstrap.servers": kafka.bootstrap}
    p = KafkaInputPartition(topic, 0, 0, 5, client_config=config, read_path="python")
    reader = read_range(p)
    dead: list[DeadRecord] = []
    try:
        batches = [decode_value_column(batch, decoder, 0, dead) for batch in reader]
    finally:
        reader.close()
    rows = [row for batch in batches for row in batch.column("value").to_pylist()]
    assert rows == [{**AS_V1, "id": n} for n in range(4)]
    # the read may yield one Arrow batch or several: the kept rows' offsets across them
    assert [o for b in batches for o in b.column("offset").to_pylist()] == [0, 1, 3, 4]
    assert [(d.offset, d.reason) for d in dead] == [(2, MALFORMED_PAYLOAD)]


def test_a_reader_schema_of_another_type_or_with_no_column_shape_is_refused_at_start(
    schema_registry: SchemaRegistry,
) -> None:
    client = SchemaRegistryClient(schema_registry.url)
    schema_registry.register(
        "json-avro-reader-value",
        {"type": "record", "name": "A", "fields": [{"name": "id", "type": "long"}]},
    )
    with pytest.raises(ReaderSchemaError, match=r"version 1 is AVRO, not JSON \(valueFormat=json"):
        resolve_reader_schema(client, "json-avro-reader-value", "latest", "json")
    recursive = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "next": {"$ref": "#"}},
    }
    schema_registry.register("json-recursive-value", recursive, "JSON")
    with pytest.raises(ReaderSchemaError, match=r"version 1: value\.next: \$ref # is recursive"):
        resolve_reader_schema(client, "json-recursive-value", "latest", "json")
    several = {"type": "object", "properties": {"x": {"type": ["integer", "string"]}}}
    schema_registry.register("json-several-value", several, "JSON")
    with pytest.raises(ReaderSchemaError, match=r"value\.x: type \['integer', 'string'\] has 2"):
        resolve_reader_schema(client, "json-several-value", "latest", "json")
