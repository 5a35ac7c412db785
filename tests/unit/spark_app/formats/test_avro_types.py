"""Avro reader schemas become Spark's `from_avro` column types; decoded values fit them."""

import datetime
import io
import uuid
from decimal import Decimal

import fastavro
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_app.formats.avro_types import UnsupportedAvroSchema, arrow_column, converter, spark_type

pytestmark = pytest.mark.unit

UUID = {"type": "string", "logicalType": "uuid"}
SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": UUID},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
        {
            "name": "amount",
            "type": {
                "type": "fixed",
                "name": "Money",
                "size": 8,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 3,
            },
        },
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "raw", "type": ["null", "bytes"], "default": None},
        {
            "name": "from",
            "type": {"type": "record", "name": "Place", "fields": [{"name": "n", "type": "int"}]},
        },
        {"name": "to", "type": ["null", "Place"], "default": None},
        {"name": "hops", "type": {"type": "array", "items": ["null", "Place"]}},
        {
            "name": "ids",
            "type": {"type": "map", "values": {"type": "string", "logicalType": "uuid"}},
        },
    ],
}
PLACE = StructType([StructField("n", IntegerType(), False)])
EXPECTED = StructType(
    [
        StructField("id", StringType(), False),
        StructField("at", TimestampType(), False),
        StructField("local", TimestampNTZType(), False),
        StructField("day", DateType(), False),
        StructField("tod", IntegerType(), False),
        StructField("amount", DecimalType(12, 3), False),
        StructField("kind", StringType(), False),
        StructField("raw", BinaryType(), True),
        StructField("from", PLACE, False),
        StructField("to", PLACE, True),
        StructField("hops", ArrayType(PLACE, True), False),
        StructField("ids", MapType(StringType(), StringType(), False), False),
    ]
)


def _parsed(schema: dict):
    return fastavro.parse_schema(schema, named_schemas={}, expand=True)


def test_the_column_type_is_sparks_from_avro_mapping():
    assert spark_type(_parsed(SCHEMA)) == (EXPECTED, False)
    assert spark_type(_parsed({"type": "array", "items": "long"})) == (
        ArrayType(LongType(), False),
        False,
    )


def test_decoded_values_fit_the_columns_arrow_type():
    event_id = uuid.uuid4()
    record = {
        "id": str(event_id),
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC),
        "local": datetime.datetime(2026, 1, 2, 3, 4, 5, 678000),
        "day": datetime.date(2026, 1, 2),
        "tod": datetime.time(1, 2, 3, 456000),
        "amount": Decimal("123.456"),
        "kind": "B",
        "raw": None,
        "from": {"n": 1},
        "to": {"n": 2},
        "hops": [{"n": 3}, None],
        "ids": {"k": str(event_id)},
    }
    schema = _parsed(SCHEMA)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    decoded = fastavro.schemaless_reader(io.BytesIO(out.getvalue()), schema, schema)
    assert decoded["id"] == event_id  # fastavro's UUID; the column holds its string
    convert = converter(schema)
    assert convert is not None
    row = convert(decoded)
    assert row["id"] == str(event_id) and row["ids"] == {"k": str(event_id)}
    assert row["tod"] == 3_723_456  # milliseconds of the day
    column = arrow_column([row, None], EXPECTED).to_pylist()
    assert column[1] is None
    assert column[0]["at"] == record["at"]
    assert column[0]["amount"] == Decimal("123.456")
    assert column[0]["hops"] == [{"n": 3}, None]
    assert dict(column[0]["ids"]) == {"k": str(event_id)}


def test_a_schema_of_plain_types_is_not_walked_at_all():
    plain = {"type": "record", "name": "P", "fields": [{"name": "a", "type": ["null", "long"]}]}
    assert converter(_parsed(plain)) is None


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        (
            {"type": "record", "name": "U", "fields": [{"name": "x", "type": ["int", "string"]}]},
            r"value\.x: a union of 2 non-null types",
        ),
        (
            {"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]},
            r"value\.next: Avro type 'L' is not supported \(a recursive type",
        ),
    ],
)
def test_schemas_without_a_column_shape_are_refused_naming_the_field(schema, error):
    with pytest.raises(UnsupportedAvroSchema, match=error):
        spark_type(_parsed(schema))
