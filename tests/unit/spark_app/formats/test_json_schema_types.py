"""JSON Schema reader schemas become Spark column types, what has no shape is refused naming
the field, and documents are read in the reader's shape (spark_app/formats/json_schema_types.py,
spark_app/formats/json_values.py). On a real registry and broker:
tests/integration/test_json_decoding.py."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_app.formats.decoding import decode_value_column
from spark_app.formats.json_schema_types import UnsupportedJsonSchema, compile_shape
from spark_app.formats.json_values import JsonPayloads
from spark_app.formats.poison import MALFORMED_PAYLOAD, UNRESOLVABLE_SCHEMA, Poison
from spark_app.formats.schema_registry_client import RegisteredSchema
from spark_app.formats.value_formats import UnsupportedSchema

pytestmark = pytest.mark.unit

ORDER = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": ["string", "null"], "format": "date-time"},
        "ship": {"$ref": "#/$defs/Address"},
        "bill": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/Address"}]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "channel": {"type": "string", "default": "web"},
        "kind": {"enum": ["a", "b"]},
    },
    "required": ["id", "price", "day", "ship"],
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city"],
        }
    },
}
ADDRESS = StructType(
    [StructField("city", StringType(), False), StructField("zip", StringType(), True)]
)
ORDER_TYPE = StructType(
    [
        StructField("id", LongType(), False),
        StructField("price", DoubleType(), False),
        StructField("paid", BooleanType(), True),
        StructField("day", DateType(), False),
        StructField("at", TimestampType(), True),
        StructField("ship", ADDRESS, False),
        StructField("bill", ADDRESS, True),
        StructField("tags", ArrayType(StringType(), False), True),
        StructField("counts", MapType(StringType(), LongType(), False), True),
        StructField("channel", StringType(), False),  # a default fills a missing one
        StructField("kind", StringType(), True),
    ]
)


def payloads(schema: dict) -> JsonPayloads:
    return JsonPayloads(RegisteredSchema(7, 1, json.dumps(schema), "JSON"))


def read(schema: dict, document: object) -> object:
    return payloads(schema).read(memoryview(json.dumps(document).encode()), 7, None)


def test_the_reader_schema_maps_to_a_spark_type_in_property_order():
    assert compile_shape(ORDER).data_type == ORDER_TYPE
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"N": {"type": "number"}},
        "type": "array",
        "items": {"$ref": "#/definitions/N"},
    }
    assert compile_shape(draft7).data_type == ArrayType(DoubleType(), False)


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        (
            {"type": "object", "properties": {"x": {"type": ["integer", "string"]}}},
            r"value\.x: type \['integer', 'string'\] has 2 non-null types",
        ),
        (
            {
                "type": "object",
                "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
            },
            r"value\.x: anyOf with 2 non-null types has no column shape",
        ),
        (
            {
                "$defs": {
                    "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}
                },
                "$ref": "#/$defs/Node",
            },
            r"value\.next: \$ref #/\$defs/Node is recursive",
        ),
        ({"type": "object", "properties": {"x": {}}}, r"value\.x: no type \(any JSON value\)"),
        ({"type": "object", "properties": {"x": True}}, r"value\.x: the schema True admits any"),
        ({"type": "object"}, r"value: an object with no properties has no column shape"),
        ({"type": "array", "prefixItems": [{"type": "integer"}]}, r"value: an array needs items"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}}, r"points at nothing"),
        (
            {"type": "object", "properties": {"x": {"$ref": "other.json#/X"}}},
            r"value\.x: \$ref 'other\.json#/X' is not local",
        ),
        ({"allOf": [{"type": "integer"}]}, r"value: allOf has no column shape"),
        ({"type": "null"}, r"type 'null' has 0 non-null types"),
    ],
)
def test_what_has_no_column_shape_is_refused_naming_the_field(schema, error):
    with pytest.raises(UnsupportedJsonSchema, match=error):
        compile_shape(schema)
    with pytest.raises(UnsupportedSchema, match=error):  # what the query start reports
        payloads(schema)


def test_an_invalid_json_schema_is_refused():
    with pytest.raises(UnsupportedSchema, match="not a valid JSON Schema"):
        payloads({"type": "object", "properties": {"x": {"type": 5}}})


def test_documents_read_in_the_readers_shape():
    document = {
        "id": 3.0,  # an integer, written as a float
        "price": 12,
        "day": "2026-11-24",
        "at": "2026-11-24T12:30:15.123+02:00",
        "ship": {"city": "Lyon", "floor": 3},  # floor: unknown to the reader, dropped
        "tags": ["a"],
        "counts": {"x": 1},
        "extra": {"any": "thing"},
    }
    assert read(ORDER, document) == {
        "id": 3,
        "price": 12.0,
        "paid": None,
        "day": date(2026, 11, 24),
        "at": datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=timezone(timedelta(hours=2))),
        "ship": {"city": "Lyon", "zip": None},
        "bill": None,
        "tags": ["a"],
        "counts": {"x": 1},
        "channel": "web",
        "kind": None,
    }


def test_unknown_properties_are_dropped_before_a_closed_reader_judges_them():
    closed = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert read(closed, {"id": 1, "new": "field"}) == {"id": 1}


@pytest.mark.parametrize(
    ("document", "reason", "message"),
    [
        (
            {"price": 1, "day": "2026-11-24", "ship": {"city": "x"}},
            UNRESOLVABLE_SCHEMA,
            "'id' is a required property",
        ),
        (
            {"id": "seven", "price": 1, "day": "2026-11-24", "ship": {"city": "x"}},
            UNRESOLVABLE_SCHEMA,
            "at value.id: 'seven' is not of type 'integer'",
        ),
        (
            {"id": 1, "price": 1, "day": "2026-11-24", "ship": {"zip": "x"}},
            UNRESOLVABLE_SCHEMA,
            "at value.ship: 'city' is a required property",
        ),
        (
            {"id": 1, "price": 1, "day": "24.11.2026", "ship": {"city": "x"}},
            UNRESOLVABLE_SCHEMA,
            "value.day: '24.11.2026' is not a date",
        ),
        (
            {
                "id": 1,
                "price": 1,
                "day": "2026-11-24",
                "at": "2026-11-24T12:00:00",
                "ship": {"city": "x"},
            },
            UNRESOLVABLE_SCHEMA,
            "value.at: '2026-11-24T12:00:00' has no UTC offset",
        ),
        (
            {"id": 2**63, "price": 1, "day": "2026-11-24", "ship": {"city": "x"}},
            UNRESOLVABLE_SCHEMA,
            f"value.id: {2**63} does not fit a long",
        ),
    ],
)
def test_a_document_the_reader_cannot_take_is_poison_naming_the_field(document, reason, message):
    poison = read(ORDER, document)
    assert isinstance(poison, Poison) and poison.reason == reason, poison
    assert message in poison.message and poison.schema_id == 7


@pytest.mark.parametrize("payload", [b"", b"{not json", b"\xff\xfe", b'{"id": NaN}'])
def test_what_is_not_utf8_json_is_a_malformed_payload(payload):
    poison = payloads(ORDER).read(memoryview(payload), 7, None)
    assert isinstance(poison, Poison) and poison.reason == MALFORMED_PAYLOAD
    assert poison.message.startswith("payload of schema id 7 is not UTF-8 JSON")


def test_decoded_values_make_the_column_spark_checks():
    import pyarrow as pa

    from spark_app.formats.decoding import WireDecoder

    class NoRegistry:
        url = "http://registry.data.svc:8081"

    reader = RegisteredSchema(7, 1, json.dumps(ORDER), "JSON")
    decoder = WireDecoder(NoRegistry(), reader, "json")  # type: ignore[arg-type]
    good = {
        "id": 1,
        "price": 2.5,
        "day": "2026-11-24",
        "ship": {"city": "x"},
        "at": "2026-11-24T00:00:00Z",
        "counts": {"a": 1, "b": 2},
        "tags": ["t"],
    }
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None], pa.binary()),
            "value": pa.array([b"\x00\x00\x00\x00\x07" + json.dumps(good).encode()], pa.binary()),
            "topic": ["t"],
            "partition": pa.array([0], pa.int32()),
            "offset": pa.array([0], pa.int64()),
            "timestamp": pa.array([0], pa.timestamp("us", tz="UTC")),
        }
    )
    value = decode_value_column(batch, decoder).column("value").to_pylist()[0]
    assert value["at"] == datetime(2026, 11, 24, tzinfo=UTC) and value["channel"] == "web"
    assert value["ship"] == {"city": "x", "zip": None} and value["day"] == date(2026, 11, 24)
    assert value["counts"] == [("a", 1), ("b", 2)] and value["tags"] == ["t"]  # Arrow's map


def test_an_inline_json_reader_schema_is_checked_as_json_schema_at_start():
    from spark_app.api.option_values import OptionError
    from spark_app.api.options import SourceOptions
    from spark_app.formats.decoding import ReaderSchemaError, inline_reader_schema
    from spark_app.formats.typed_values import TypedValues

    base = {
        "kafka.bootstrap.servers": "b:9092",
        "subscribe": "a,b",  # two topics: no subject needed with an inline schema
        "kafka.group.id": "g",
        "valueFormat": "json",
        "schemaRegistryUrl": "http://registry.data.svc:8081",
    }
    decoding = SourceOptions.parse({**base, "valueSchema": json.dumps(ORDER)}).value_decoding
    assert decoding is not None and decoding.format == "json" and decoding.subject is None
    reader = inline_reader_schema(json.dumps({**ORDER, "title": "Order"}), "json")
    assert reader.schema_type == "JSON" and reader.schema_id is None
    assert TypedValues(decoding, reader).describe().startswith("inline reader schema Order")
    with pytest.raises(OptionError, match="option valueSchema must be a JSON Schema"):
        SourceOptions.parse({**base, "valueSchema": '"string"'})
    with pytest.raises(ReaderSchemaError, match=r"option valueSchema: value\.x: no type"):
        inline_reader_schema(json.dumps({"type": "object", "properties": {"x": {}}}), "json")
