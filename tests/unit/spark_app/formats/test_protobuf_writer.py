"""The typed Kafka sink's Protobuf (issue 43): a Spark struct's proto3 schema, compiled by
protoc, read back as the same column type by the reader's mapping; values in the Confluent
wire format parsed back by Protobuf itself; what has no Protobuf form, refused by name; and
the check of a pinned schema."""

from __future__ import annotations

import base64
import json
import pickle
import re
import struct
from datetime import UTC, datetime

import pytest
from google.protobuf import message_factory

from spark_app.formats.protobuf_types import converter
from spark_app.formats.protobuf_values import column_type, pinned_reader
from spark_app.formats.protobuf_writer import protobuf_schema
from spark_app.formats.schema_registry_client import RegisteredSchema
from spark_app.formats.value_encoder import ValueEncoder
from spark_app.formats.writer_schemas import UnwritableType
from spark_app.runner.sink_schema import protobuf_problems
from tests.unit.spark_app.formats.test_writer_schemas import field

pytestmark = pytest.mark.unit

LINE = {"type": "struct", "fields": [field("sku", "string"), field("n", "integer", False)]}
ORDER = {
    "type": "struct",
    "fields": [
        field("id", "long", nullable=False),
        field("qty", "short"),
        field("ratio", "double"),
        field("score", "float"),
        field("item", "string"),
        field("paid", "boolean"),
        field("raw", "binary"),
        field("at", "timestamp"),
        field("tags", {"type": "array", "elementType": "string", "containsNull": False}),
        field(
            "counts",
            {"type": "map", "keyType": "integer", "valueType": "long", "valueContainsNull": False},
        ),
        field("ship", {"type": "struct", "fields": [field("city", "string")]}),
        field("lines", {"type": "array", "elementType": LINE, "containsNull": False}),
    ],
}
ROW = {
    "id": 7, "qty": 2, "ratio": 0.5, "score": 1.5, "item": "tea", "paid": False,
    "raw": b"\x00\x01", "at": datetime(2026, 11, 30, 9, 5, 1, 250000, tzinfo=UTC),
    "tags": ["a", "b"], "counts": [(1, 10), (2, 0)], "ship": {"city": "Oslo"},
    "lines": [{"sku": "x", "n": 1}, {"sku": None, "n": 0}],
}  # fmt: skip
EMPTY = {"id": 8, **{name: None for name in ROW if name != "id"}}


def compiled(text: str):
    return pinned_reader(RegisteredSchema(None, None, text, "PROTOBUF"), None, None)


def test_the_schema_compiles_and_reads_back_as_the_columns_type():
    text = protobuf_schema(ORDER, "orders_out_value")
    assert 'import "google/protobuf/timestamp.proto";' in text
    assert "optional int64 id" not in text and "int64 id = 1;" in text  # not null: no presence
    assert "optional int32 qty = 2;" in text and "map<int32, int64> counts = 10;" in text
    back = column_type(compiled(text)).jsonValue()
    expected = json.loads(json.dumps(ORDER).replace('"short"', '"integer"'))
    for ours, theirs in zip(expected["fields"], back["fields"], strict=True):
        assert (theirs["name"], theirs["type"]) == (ours["name"], ours["type"])
        # a list and a map have no null in Protobuf: read back as not null (written empty)
        assert theirs["nullable"] == (ours["nullable"] and ours["name"] not in ("tags",
                                      "counts", "lines")), theirs  # fmt: skip


def test_values_are_the_first_message_and_parse_back_to_the_same_row():
    reader = compiled(text := protobuf_schema(ORDER, "orders_out_value"))
    options = {
        "valueFormat": "protobuf",
        "valueSchemaId": "42",
        "valueSchema": text,
        "valueType": json.dumps(ORDER),
        "valueDescriptors": base64.b64encode(reader.compiled.descriptor_set).decode(),
    }
    encoder = pickle.loads(pickle.dumps(ValueEncoder.of_options(options)))  # to the executors
    assert encoder is not None
    descriptor = reader.descriptor()
    read = converter(descriptor)
    for row, expected in (
        (ROW, {**ROW, "counts": {1: 10, 2: 0}, "lines": [{"sku": "x", "n": 1},
                                                          {"sku": None, "n": 0}]}),
        (EMPTY, {**EMPTY, "tags": [], "counts": {}, "lines": []}),
    ):  # fmt: skip
        data = encoder.encode(row)
        assert data is not None and struct.unpack(">bI", data[:5]) == (0, 42)
        assert data[5:6] == b"\x00"  # message indexes [0]
        message = message_factory.GetMessageClass(descriptor).FromString(data[6:])
        assert read(message) == expected
    assert encoder.encode(None) is None  # a tombstone stays one


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        ("date", "Spark's date"),
        ("decimal(10,2)", "Spark's decimal(10,2)"),
        ({"type": "array", "elementType": "long", "containsNull": True}, "array_compact"),
        (
            {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True},
            "map_filter",
        ),
        (
            {"type": "map", "keyType": "binary", "valueType": "long", "valueContainsNull": False},
            "keys are not binary",
        ),
        (
            {
                "type": "array",
                "containsNull": False,
                "elementType": {"type": "array", "elementType": "long", "containsNull": False},
            },
            "no list of arrays",
        ),
    ],
)
def test_what_has_no_protobuf_form_is_refused_naming_the_field(kind, named):
    with pytest.raises(UnwritableType, match=f"value.bad: .*{re.escape(named)}"):
        protobuf_schema({"type": "struct", "fields": [field("bad", kind)]}, "value")


def test_a_field_name_protobuf_cannot_take_is_refused():
    with pytest.raises(UnwritableType, match="'unit price' is no Protobuf field name"):
        protobuf_schema({"type": "struct", "fields": [field("unit price", "long")]}, "value")


def test_a_pinned_schema_takes_the_column_only_where_each_field_reads_back_the_same():
    column = {"type": "struct", "fields": [field("id", "long", False), field("item", "string")]}
    pinned = 'syntax = "proto3"; message O { int64 id = 1; optional string item = 2; bool x = 3; }'
    assert protobuf_problems(compiled(pinned), column, "o") == []
    other = 'syntax = "proto3"; message O { int32 id = 1; string item = 2; }'
    problems = protobuf_problems(compiled(other), column, "o")
    assert problems == [
        'its field id is "integer", the query\'s is "long"',
        "its field item has no presence (a null would be written as its default); the "
        "query's may be null",
    ]
    lacking = 'syntax = "proto3"; message O { int64 id = 1; }'
    assert protobuf_problems(compiled(lacking), column, "o") == ["it has no field item"]
