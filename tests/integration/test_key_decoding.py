"""Avro keys and values together, from a real broker, decoded with schemas from a real
registry (Apicurio): the options name <topic>-key and <topic>-value, both reader schemas are
pinned on the driver and the executors' decode step types both columns; a poison key is poison
like a value, named in the error, and its dead-letter copy keeps the original bytes with the
column that failed (spark_app/api/options.py, spark_app/formats/typed_values.py,
spark_app/formats/decoding.py, spark_app/source/value_decoder.py)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from devbed.kafka_broker import KafkaBroker
from devbed.schema_registry import SchemaRegistry, wire_format
from spark_app.api.options import SourceOptions
from spark_app.formats import typed_values
from spark_app.formats.decoding import BAD_MAGIC_BYTE, UNKNOWN_SCHEMA_ID, PoisonRecordError
from spark_app.source.partition_range import KafkaInputPartition
from spark_app.source.partition_reader import read_range
from spark_app.source.value_decoder import decoded
from tests.support.kafka_tools import consume_to_end, new_topic

pytestmark = pytest.mark.integration

KEY = {
    "type": "record",
    "name": "OrderKey",
    "namespace": "test.keys",
    "fields": [{"name": "shop", "type": "string"}, {"name": "id", "type": "long"}],
}
VALUE = {
    "type": "record",
    "name": "Order",
    "namespace": "test.keys",
    "fields": [{"name": "quantity", "type": "int"}],
}


def _options(kafka: KafkaBroker, registry: SchemaRegistry, topic: str, **extra: str) -> dict:
    return {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "kafka.group.id": f"g-{uuid.uuid4().hex[:6]}",
        "subscribe": topic,
        "keyFormat": "avro",
        "valueFormat": "avro",
        "schemaRegistryUrl": registry.url,
        **extra,
    }


def _produce(kafka: KafkaBroker, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def _read(kafka: KafkaBroker, options: SourceOptions, topic: str, end: int) -> list:
    """The executors' read and decode step (pure-Python path), both reader schemas pinned as
    the driver pins them at query start."""
    assert options.value_decoding is not None and options.key_decoding is not None
    p = KafkaInputPartition(
        topic,
        0,
        0,
        end,
        client_config={"bootstrap.servers": kafka.bootstrap},
        read_path="python",
        include_headers=options.dead_letter is not None,
        headers_for_dead_letter_only=options.dead_letter is not None,
        values=typed_values.at_query_start(options.value_decoding),
        keys=typed_values.at_query_start(options.key_decoding),
        dead_letter=options.dead_letter,
    )
    return list(decoded(read_range(p), p))


def test_avro_keys_and_values_decode_together_and_a_poison_key_is_named(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="keyed")
    key_id = schema_registry.register(f"{topic}-key", KEY)
    value_id = schema_registry.register(f"{topic}-value", VALUE)
    keys = [wire_format(key_id, KEY, {"shop": "lyon", "id": n}) for n in range(3)]
    values = [wire_format(value_id, VALUE, {"quantity": n}) for n in range(3)]
    bad_key = b"\x07" + keys[0][1:]
    _produce(kafka, topic, [(keys[0], values[0]), (None, values[1]), (bad_key, values[2])])
    options = SourceOptions.parse(_options(kafka, schema_registry, topic))
    assert options.key_decoding is not None and options.key_decoding.subject == f"{topic}-key"

    [batch] = _read(kafka, options, topic, 2)
    assert batch.column("key").to_pylist() == [{"shop": "lyon", "id": 0}, None]  # null stays
    assert batch.column("value").to_pylist() == [{"quantity": 0}, {"quantity": 1}]
    with pytest.raises(PoisonRecordError, match=rf"{topic}-0 offset 2: bad-magic-byte: key: "):
        _read(kafka, options, topic, 3)


def test_a_poison_key_goes_to_the_dead_letter_topic_with_its_bytes_and_the_column(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="keyed")
    dead_topic = new_topic(kafka.bootstrap, partitions=1, prefix="keyed-dead")
    key_id = schema_registry.register(f"{topic}-key", KEY)
    value_id = schema_registry.register(f"{topic}-value", VALUE)
    good = (
        wire_format(key_id, KEY, {"shop": "nice", "id": 1}),
        wire_format(value_id, VALUE, {"quantity": 1}),
    )
    unknown_key = wire_format(2**31 - 7, KEY, {"shop": "x", "id": 2})  # an id nobody registered
    bad_value = b"\x07not avro"
    _produce(kafka, topic, [(unknown_key, good[1]), good, (good[0], bad_value)])
    raw = _options(kafka, schema_registry, topic, deadLetterTopic=dead_topic)
    options = SourceOptions.parse(raw)

    batches = _read(kafka, options, topic, 3)
    rows = [(b.column("key").to_pylist(), b.column("offset").to_pylist()) for b in batches]
    assert rows == [([{"shop": "nice", "id": 1}], [1])]
    assert "headers" not in batches[0].schema.names  # read for the copies only
    copies = consume_to_end(kafka.bootstrap, dead_topic, "read_committed")
    seen = [(m.key(), m.value(), dict(m.headers())) for m in copies]
    assert [
        (k, v, h["streamingjob.error.column"], h["streamingjob.error.reason"]) for k, v, h in seen
    ] == [
        (unknown_key, good[1], b"key", UNKNOWN_SCHEMA_ID.encode()),
        (good[0], bad_value, b"value", BAD_MAGIC_BYTE.encode()),
    ]
