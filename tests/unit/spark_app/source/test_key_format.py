"""keyFormat without services: the key's options follow the value's with -key subjects and
share the registry's connection; schema() types the key column; the decode step decodes key
and value in one pass and names the column a poison record fails in. On a real broker and
registry: tests/integration/test_avro_decoding.py (the decoder) and
tests/integration/spark_app/test_typed_records.py (a Spark query)."""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from devbed.schema_registry import wire_format
from spark_app.api.dead_letter_options import DeadLetterTarget
from spark_app.api.decoding_options import ValueDecoding
from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.formats import typed_values
from spark_app.formats.decoding import AvroDecoder, PoisonRecordError, decode_columns
from spark_app.formats.schema_registry_client import RegisteredSchema
from spark_app.formats.typed_values import TypedValues
from spark_app.sinks.dead_letter import dead_letter_headers
from spark_app.source.partition_range import KafkaInputPartition, arrow_schema, spark_schema
from spark_app.source.partition_reader import to_record_batch
from spark_app.source.source import KafkaCheckpointedDataSource
from tests.unit.spark_app.formats.test_typed_values import ORDER, READER, SCHEMA, NoRegistry

pytestmark = pytest.mark.unit

BASE = {"kafka.bootstrap.servers": "b:9092", "subscribe": "orders", "kafka.group.id": "g"}
REGISTRY = {"schemaRegistryUrl": "http://registry.data.svc:8081"}
KEY_SCHEMA = {"type": "record", "name": "OrderKey", "fields": [{"name": "id", "type": "long"}]}
KEY_READER = RegisteredSchema(schema_id=7, version=1, schema=json.dumps(KEY_SCHEMA))


def key_decoding(**extra: str) -> ValueDecoding:
    decoding = SourceOptions.parse({**BASE, **REGISTRY, "keyFormat": "avro", **extra}).key_decoding
    assert decoding is not None
    return decoding


def test_the_key_reads_the_topics_key_subject_with_the_values_registry():
    options = SourceOptions.parse({**BASE, **REGISTRY, "keyFormat": "avro", "valueFormat": "json"})
    key, value = options.key_decoding, options.value_decoding
    assert key is not None and value is not None
    assert (key.column, key.format, key.subject, key.version) == (
        "key",
        "avro",
        "orders-key",
        "latest",
    )
    assert (value.column, value.format, value.subject) == ("value", "json", "orders-value")
    assert key.registry_url == value.registry_url
    assert key.option("Format") == "keyFormat"


def test_key_options_of_their_own_and_the_same_rules_as_the_values():
    assert key_decoding(keySubject="k", keySchemaVersion="2").subject == "k"
    assert key_decoding(keySchemaVersion="2").version == 2
    by_record = key_decoding(keySubjectStrategy="record", keyRecordName="shop.OrderKey")
    assert by_record.subject == "shop.OrderKey"
    by_topic_record = key_decoding(keySubjectStrategy="topic-record", keyRecordName="shop.K")
    assert by_topic_record.subject == "orders-shop.K"
    inline = key_decoding(keySchema=json.dumps(KEY_SCHEMA))
    assert inline.subject is None and inline.reader_schema == json.dumps(KEY_SCHEMA)
    # a raw value with a decoded key: the registry options are the key's
    assert SourceOptions.parse({**BASE, **REGISTRY, "keyFormat": "avro"}).value_decoding is None


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"keyFormat": "raw", "keySubject": "k"}, "keySubject is used only with keyFormat=avro"),
        ({"keyFormat": "xml"}, "keyFormat='xml' must be one of raw, avro"),
        ({"keySchemaVersion": "0"}, "keySchemaVersion='0' must be latest or a version"),
        ({"subscribe": "a,b"}, "keySubject is required with keyFormat=avro unless exactly one"),
        ({"keySubjectStrategy": "record"}, "keyRecordName .* is required with keySubjectStr"),
        ({"keyRecordName": "a.B"}, "keyRecordName is used only with keySubjectStrategy"),
        ({"keySchema": "{", "keySubject": "k"}, "keySchema and keySubject exclude each other"),
        ({"keySchema": '"string"'}, "keySchema must be an Avro record schema"),
        ({"schemaRegistryUrl": ""}, "schemaRegistryUrl is required with keyFormat=avro"),
    ],
)
def test_bad_key_options_name_the_option_and_the_fix(extra, error):
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse({**BASE, **REGISTRY, "keyFormat": "avro", **extra})


def test_registry_options_need_a_decoded_column_and_a_dead_letter_topic_a_decoded_key_is_enough():
    with pytest.raises(OptionError, match="schemaRegistryUrl is used only with valueFormat=avro"):
        SourceOptions.parse({**BASE, **REGISTRY})
    options = SourceOptions.parse(
        {**BASE, **REGISTRY, "keyFormat": "avro", "deadLetterTopic": "dead"}
    )
    assert options.dead_letter is not None and options.dead_letter.topic == "dead"


def test_the_key_column_is_the_reader_schemas_struct_pinned_and_pickled(monkeypatch):
    def pinned(decoding: ValueDecoding) -> TypedValues:
        return TypedValues(decoding, KEY_READER if decoding.column == "key" else READER)

    monkeypatch.setattr(typed_values, "at_query_start", pinned)
    source = KafkaCheckpointedDataSource({**BASE, **REGISTRY, "keyFormat": "avro"})
    schema = source.schema()
    assert schema["key"].dataType.fieldNames() == ["id"]
    assert schema["value"].dataType.typeName() == "binary"  # a raw value stays bytes
    reader = pickle.loads(pickle.dumps(source)).streamReader(schema)
    assert reader.values is None and reader.keys == pinned(key_decoding())
    assert pickle.loads(pickle.dumps(reader)).keys == reader.keys


def _batch(keys: list[bytes | None], values: list[bytes | None]) -> pa.RecordBatch:
    p = KafkaInputPartition("orders", 2, 10, 10 + len(values), {})
    n = len(values)
    return to_record_batch(
        p,
        arrow_schema(False),
        first_offset=10,
        offsets=None,
        keys=keys,
        values=values,
        kinds=[1] * n,
        millis=[0] * n,
        headers=None,
    )


def _decoders() -> dict[str, AvroDecoder]:
    return {
        "value": AvroDecoder(NoRegistry(), READER),  # type: ignore[arg-type]
        "key": AvroDecoder(NoRegistry(), KEY_READER),  # type: ignore[arg-type]
    }


def test_key_and_value_decode_together_and_a_null_key_stays_null():
    key, value = wire_format(7, KEY_SCHEMA, {"id": 1}), wire_format(41, SCHEMA, ORDER)
    batch = decode_columns(_batch([key, None], [value, value]), _decoders())
    assert batch.column("key").to_pylist() == [{"id": 1}, None]
    assert batch.column("value").to_pylist() == [ORDER, ORDER]
    both = SourceOptions.parse({**BASE, **REGISTRY, "keyFormat": "avro", "valueFormat": "avro"})
    assert both.key_decoding is not None and both.value_decoding is not None
    typed = (TypedValues(both.value_decoding, READER), TypedValues(both.key_decoding, KEY_READER))
    expected = typed_values.source_schema(spark_schema(False), *typed)
    assert batch.schema.equals(to_arrow_schema(expected, timezone="UTC"))  # Spark's check


def test_a_poison_key_is_poison_naming_the_key_and_its_dead_letter_copy_keeps_the_bytes():
    value = wire_format(41, SCHEMA, ORDER)
    bad_key = b"\x01" + wire_format(7, KEY_SCHEMA, {"id": 1})[1:]
    with pytest.raises(PoisonRecordError, match=r"offset 10: bad-magic-byte: key: magic byte 1"):
        decode_columns(_batch([bad_key], [value]), _decoders())
    dead: list = []
    good_key = wire_format(7, KEY_SCHEMA, {"id": 2})
    out = decode_columns(_batch([bad_key, good_key], [value, value]), _decoders(), 10, dead)
    assert out.column("key").to_pylist() == [{"id": 2}]
    [copy] = dead
    assert (copy.offset, copy.key, copy.value, copy.column) == (10, bad_key, value, "key")
    target = DeadLetterTarget("dead", {}, "orders", 1, "g")
    assert (b"streamingjob.error.column", b"key") in [
        (k.encode(), v) for k, v in dead_letter_headers(copy, target)
    ]
