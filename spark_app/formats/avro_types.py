"""The Spark type of an Avro reader schema, and decoded values shaped to fit it.

The mapping is Spark's own `from_avro` one (SchemaConverters), so a job moving from
`from_avro` sees the same columns: records are structs, `["null", X]` is a nullable X, enums
and uuids are strings, `bytes`/`fixed` are binary, decimals, dates and timestamps keep their
logical types, `time-millis`/`time-micros` are the int/long of the time of day. A union of
several non-null types (Spark makes it a struct of `member0..n`) is refused at query start
(`UnsupportedAvroSchema`, naming the field) rather than given a shape nobody asked for.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}
_LOGICAL: dict[str, DataType] = {
    "date": DateType(),
    "timestamp-millis": TimestampType(),
    "timestamp-micros": TimestampType(),
    "local-timestamp-millis": TimestampNTZType(),
    "local-timestamp-micros": TimestampNTZType(),
    "uuid": StringType(),
}
Converter = Callable[[Any], Any]
# Avro's timestamps and their Arrow units: read as longs, they go into Arrow as they are.
_TIMESTAMP_UNITS = {
    "timestamp-millis": "ms",
    "timestamp-micros": "us",
    "local-timestamp-millis": "ms",
    "local-timestamp-micros": "us",
}


class UnsupportedAvroSchema(ValueError):
    """A reader schema with no Spark column shape here; names the field."""


def spark_type(schema: Any, path: str = "value") -> tuple[DataType, bool]:
    """The Spark type of a parsed Avro schema (fastavro's `parse_schema` output) and whether
    it is nullable."""
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise UnsupportedAvroSchema(
                f"{path}: a union of {len(branches)} non-null types has no column shape here; "
                'use ["null", T] or one type'
            )
        return spark_type(branches[0], path)[0], len(branches) < len(schema)
    if isinstance(schema, str):
        if schema not in _PRIMITIVES:
            raise UnsupportedAvroSchema(
                f"{path}: Avro type {schema!r} is not supported (a recursive type has no column)"
            )
        return _PRIMITIVES[schema], False
    return _complex_type(schema, path), False


def _complex_type(schema: dict[str, Any], path: str) -> DataType:
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        return DecimalType(schema["precision"], schema.get("scale", 0))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind == "record":
        fields = []
        for f in schema["fields"]:
            data_type, nullable = spark_type(f["type"], f"{path}.{f['name']}")
            fields.append(StructField(f["name"], data_type, nullable))
        return StructType(fields)
    if kind == "array":
        items, nullable = spark_type(schema["items"], f"{path}[]")
        return ArrayType(items, nullable)
    if kind == "map":
        values, nullable = spark_type(schema["values"], f"{path}{{}}")
        return MapType(StringType(), values, nullable)
    if kind == "enum":
        return StringType()
    if kind == "fixed":
        return BinaryType()
    return spark_type(kind, path)[0]  # {"type": "long", "logicalType": "time-micros"} etc.


def converter(schema: Any) -> Converter | None:
    """What turns fastavro's value of `schema` into the column's value, or None where they
    are the same (most schemas: no walk over the record at all)."""
    if isinstance(schema, list):
        inner = [converter(s) for s in schema if s != "null"]
        only = inner[0] if inner else None
        return None if only is None else (lambda v: None if v is None else only(v))
    if isinstance(schema, str):
        return None
    logical = schema.get("logicalType")
    if logical == "uuid":
        return str
    if logical in ("time-millis", "time-micros"):
        scale = 1000 if logical == "time-millis" else 1_000_000
        return lambda t: _time_of_day(t, scale)
    if schema["type"] == "record":
        fields = [(f["name"], converter(f["type"])) for f in schema["fields"]]
        if all(c is None for _, c in fields):
            return None
        return lambda r: {n: (c(r[n]) if c else r[n]) for n, c in fields}
    if schema["type"] == "array":
        item = converter(schema["items"])
        return None if item is None else (lambda a: [item(x) for x in a])
    if schema["type"] == "map":
        value = converter(schema["values"])
        return None if value is None else (lambda m: {k: value(x) for k, x in m.items()})
    return None


def _time_of_day(value: datetime.time, scale: int) -> int:
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * scale + value.microsecond * scale // 1_000_000


def arrow_column(values: list[Any], data_type: DataType, built_as: Any = None) -> Any:
    """Decoded values (fastavro's, through `converter`) as an Arrow array of the column's
    type, as Spark checks it (UTC timestamps); `built_as`: the values were read with
    `plain_timestamps`, and this is their `read_type`."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    column_type = to_arrow_type(data_type, timezone="UTC")
    if built_as is None:
        return pa.array(values, type=column_type)
    return pa.array(values, type=built_as).cast(column_type)


def plain_timestamps(schema: Any) -> Any:
    """A schema's JSON with its timestamps' logical types taken off: fastavro then reads
    their longs as they are, not as datetimes (about a tenth of decoding a record with one
    timestamp; bench/decode_bench.py). The column type stays the timestamp: `read_type`."""
    if isinstance(schema, list):
        return [plain_timestamps(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("type", "fields", "items", "values")}
    if schema.get("logicalType") in _TIMESTAMP_UNITS:
        del out["logicalType"]
    for key in ("type", "items", "values"):
        if key in schema:
            out[key] = plain_timestamps(schema[key])
    if "fields" in schema:
        out["fields"] = [{**f, "type": plain_timestamps(f["type"])} for f in schema["fields"]]
    return out


def read_type(schema: Any, data_type: DataType) -> Any:
    """The Arrow type that takes values read with `plain_timestamps` (timestamps as longs in
    their Avro unit); cast to `data_type`'s Arrow type it is the column. `schema` is the
    parsed, expanded reader schema."""
    from pyspark.sql.pandas.types import to_arrow_type

    return _read_type(schema, to_arrow_type(data_type, timezone="UTC"))


def _read_type(schema: Any, arrow_type: Any) -> Any:
    import pyarrow as pa

    if isinstance(schema, list):
        return _read_type(next(s for s in schema if s != "null"), arrow_type)
    if isinstance(schema, str):
        return arrow_type
    unit = _TIMESTAMP_UNITS.get(schema.get("logicalType", ""))
    if unit is not None:
        return pa.timestamp(unit, tz=arrow_type.tz)
    if schema["type"] == "record":
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        pairs = zip(schema["fields"], fields, strict=True)
        return pa.struct([f.with_type(_read_type(a["type"], f.type)) for a, f in pairs])
    if schema["type"] == "array":
        item = arrow_type.value_field
        return pa.list_(item.with_type(_read_type(schema["items"], item.type)))
    if schema["type"] == "map":
        item = arrow_type.item_field
        return pa.map_(
            arrow_type.key_field, item.with_type(_read_type(schema["values"], item.type))
        )
    return arrow_type
