"""The typed Kafka sink's schemas and encoding (issue 43): a Spark struct's Avro record and
JSON Schema, values in the Confluent wire format read back by independent readers (fastavro,
jsonschema), the check of a pinned schema, and the spec's rules."""

from __future__ import annotations

import base64
import io
import json
import struct
from datetime import UTC, date, datetime
from decimal import Decimal

import fastavro
import jsonschema
import pytest
from pydantic import ValidationError

from spark_app.api.job_spec import JobSpec
from spark_app.api.sink_value_spec import NEEDS_SOURCE_REGISTRY, RAW_ALONE
from spark_app.formats.value_encoder import ValueEncoder
from spark_app.formats.writer_schemas import (
    UnwritableType,
    avro_schema,
    json_schema,
    pinned_problems,
    record_name,
)

pytestmark = pytest.mark.unit


def field(name: str, kind, nullable: bool = True) -> dict:
    return {"name": name, "type": kind, "nullable": nullable, "metadata": {}}


MAP = {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}
# an order as a query builds it (`struct(...) AS value`): every kind the sink writes
ORDER = {
    "type": "struct",
    "fields": [
        field("id", "long", nullable=False),
        field("qty", "integer"),
        field("price", "decimal(10,2)"),
        field("ratio", "double"),
        field("item", "string"),
        field("paid", "boolean"),
        field("raw", "binary"),
        field("day", "date"),
        field("at", "timestamp"),
        field("tags", {"type": "array", "elementType": "string", "containsNull": False}),
        field("attrs", MAP),
        field("ship", {"type": "struct", "fields": [field("city", "string")]}),
    ],
}
# one row as Arrow hands it to the writer: a map as (key, value) pairs
ROW = {
    "id": 7, "qty": 2, "price": Decimal("19.90"), "ratio": 0.5, "item": "tea", "paid": True,
    "raw": b"\x00\x01", "day": date(2026, 11, 30), "at": datetime(2026, 11, 30, 9, 5, tzinfo=UTC),
    "tags": ["a", "b"], "attrs": [("n", 1), ("m", None)], "ship": {"city": "Oslo"},
}  # fmt: skip
EMPTY = {"id": 8, **{name: None for name in ROW if name != "id"}}


def encoder(schema_format: str, schema: dict, schema_id: int = 42) -> ValueEncoder:
    options = {"valueFormat": schema_format, "valueSchemaId": str(schema_id),
               "valueSchema": json.dumps(schema), "valueType": json.dumps(ORDER)}  # fmt: skip
    found = ValueEncoder.of_options(options)
    assert found is not None
    return found


def test_avro_values_read_back_with_the_registered_schema_by_another_reader():
    schema = avro_schema(ORDER, record_name("orders-out-value"))
    assert schema["name"] == "orders_out_value"
    parsed = fastavro.parse_schema(schema)
    for row in (ROW, EMPTY):
        data = encoder("avro", schema).encode(row)
        assert data is not None and struct.unpack(">bI", data[:5]) == (0, 42)
        back = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, parsed)
        expected = {**row, "attrs": dict(row["attrs"])} if row["attrs"] else row
        assert back == expected
    assert encoder("avro", schema).encode(None) is None  # a tombstone stays one


def test_json_values_validate_against_the_registered_json_schema():
    schema = json_schema(ORDER, "orders_out_value")
    for row in (ROW, EMPTY):
        data = encoder("json", schema, 9).encode(row)
        assert data is not None and struct.unpack(">bI", data[:5]) == (0, 9)
        document = json.loads(data[5:])
        jsonschema.validate(document, schema)
        assert document["id"] == row["id"]
    document = json.loads(encoder("json", schema).encode(ROW)[5:])  # type: ignore[index]
    assert document["attrs"] == {"n": 1, "m": None} and document["day"] == "2026-11-30"
    assert base64.b64decode(document["raw"]) == b"\x00\x01"
    assert schema["required"] == ["id"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "id": None}, schema)


def test_a_map_with_other_than_string_keys_has_no_place():
    bad = {"type": "struct", "fields": [field("m", {"type": "map", "keyType": "integer",
           "valueType": "long", "valueContainsNull": False})]}  # fmt: skip
    for build in (avro_schema, json_schema):
        with pytest.raises(UnwritableType, match="keys are strings"):
            build(bad, "v")


def test_a_pinned_schema_must_take_every_field_of_the_query_with_a_type_it_promotes_to():
    pinned = avro_schema(ORDER, "order")
    assert pinned_problems("avro", json.dumps(pinned), ORDER) == []
    narrower = {**ORDER, "fields": ORDER["fields"][:-1]}  # the query lacks `ship`: optional
    assert pinned_problems("avro", json.dumps(pinned), narrower) == []
    wider = {**ORDER, "fields": [*ORDER["fields"], field("extra", "string")]}
    assert pinned_problems("avro", json.dumps(pinned), wider) == ["it has no field extra"]
    qty_as_string = {**pinned, "fields": [
        {**f, "type": ["null", "string"]} if f["name"] == "qty" else f for f in pinned["fields"]
    ]}  # fmt: skip
    assert pinned_problems("avro", json.dumps(qty_as_string), ORDER) == [
        'its field qty is ["null", "string"], the query\'s is "int"'
    ]
    qty_as_long = json.dumps(qty_as_string).replace('"string"]', '"long"]', 1)
    assert pinned_problems("avro", qty_as_long, ORDER) == []  # int promotes to long
    no_id = {**ORDER, "fields": ORDER["fields"][1:]}
    assert pinned_problems("json", json.dumps(json_schema(ORDER, "o")), no_id) == [
        "its field id is required and the query has none"
    ]


def job(value: dict | None, source_value: dict | None) -> dict:
    source = {"bootstrapServers": "k:9092", "subscribe": ["orders"], "groupId": "g"}
    if source_value is not None:
        source["value"] = source_value
    sink: dict = {"format": "kafka", "topic": "out"}
    if value is not None:
        sink["value"] = value
    return {"source": source, "sink": sink}


REGISTRY = {"format": "avro", "schemaRegistry": {"url": "http://schema-registry.kafka.svc:8081"}}


def test_the_spec_takes_a_typed_value_only_with_the_sources_registry_and_on_kafka():
    JobSpec.model_validate(job({"format": "avro"}, REGISTRY))
    JobSpec.model_validate(job({"format": "json", "subject": "s", "version": 3}, REGISTRY))
    JobSpec.model_validate(job({"format": "raw"}, None))
    with pytest.raises(ValidationError, match="encodes with the schema registry"):
        JobSpec.model_validate(job({"format": "avro"}, None))
    assert "spec.job.source.value.schemaRegistry" in NEEDS_SOURCE_REGISTRY
    with pytest.raises(ValidationError, match="for a typed value"):
        JobSpec.model_validate(job({"subject": "s"}, None))
    assert "value.format" in RAW_ALONE
    parquet = {**job(None, REGISTRY), "sink": {"format": "parquet", "path": "file:///o"}}
    parquet["sink"]["value"] = {"format": "avro"}
    with pytest.raises(ValidationError, match="settings of the kafka sink"):
        JobSpec.model_validate(parquet)
