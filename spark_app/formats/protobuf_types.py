"""The Spark type of a Protobuf message, and parsed messages as values shaped to fit it.

The mapping is Spark's own `from_protobuf` one (spark-protobuf's SchemaConverters) with the
options a typed column wants: messages are structs, `repeated` an array, `map<K, V>` a map,
enums the value's name (a string), int32/sint32/sfixed32 int, int64/sint64/sfixed64 long,
**uint32/fixed32 long and uint64/fixed64 decimal(20,0)** (Spark's `upcast.unsigned.ints`:
no value wraps negative), float, double, bool, string, bytes binary,
google.protobuf.Timestamp timestamp, Duration a day-time interval, and the wrappers
(google.protobuf.Int64Value …) their scalar, nullable (Spark's
`unwrap.primitive.wrapper.types`). Any other well-known type is the message it is (Any is a
struct of type_url and value).

Nulls follow Protobuf's field presence: a field that has presence (a message, a wrapper, a
proto3 `optional`, a oneof member, a proto2 `optional`) is nullable and null when unset; a
field without it (a plain proto3 scalar, an enum, a repeated field, a map) cannot be unset
on the wire and is its default (0, "", false, the enum's first value, empty) when absent,
as Spark gives it with `emit.default.values`. A recursive message has no column shape and is
refused at query start, naming the field (`UnsupportedProtobufSchema`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

F = FieldDescriptor
_SCALARS: dict[int, DataType] = {
    F.TYPE_DOUBLE: DoubleType(),
    F.TYPE_FLOAT: FloatType(),
    F.TYPE_INT32: IntegerType(),
    F.TYPE_SINT32: IntegerType(),
    F.TYPE_SFIXED32: IntegerType(),
    F.TYPE_UINT32: LongType(),
    F.TYPE_FIXED32: LongType(),
    F.TYPE_INT64: LongType(),
    F.TYPE_SINT64: LongType(),
    F.TYPE_SFIXED64: LongType(),
    F.TYPE_UINT64: DecimalType(20, 0),
    F.TYPE_FIXED64: DecimalType(20, 0),
    F.TYPE_BOOL: BooleanType(),
    F.TYPE_STRING: StringType(),
    F.TYPE_BYTES: BinaryType(),
    F.TYPE_ENUM: StringType(),
}
_UNSIGNED_64 = (F.TYPE_UINT64, F.TYPE_FIXED64)
TIMESTAMP = "google.protobuf.Timestamp"
DURATION = "google.protobuf.Duration"
WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
Converter = Callable[[Any], Any]


class UnsupportedProtobufSchema(ValueError):
    """A reader message with no Spark column shape here; names the field."""


def spark_type(message: Descriptor, path: str = "value") -> StructType:
    """The struct a message decodes to."""
    return _struct(message, path, (message.full_name,))


def _struct(message: Descriptor, path: str, seen: tuple[str, ...]) -> StructType:
    fields = []
    for field in message.fields:
        data_type = _field_type(field, f"{path}.{field.name}", seen)
        fields.append(StructField(field.name, data_type, nullable=_nullable(field)))
    return StructType(fields)


def _nullable(field: FieldDescriptor) -> bool:
    return field.has_presence and not _is_repeated(field)


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _is_map(field: FieldDescriptor) -> bool:
    return (
        _is_repeated(field)
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def _field_type(field: FieldDescriptor, path: str, seen: tuple[str, ...]) -> DataType:
    if _is_map(field):
        entry = field.message_type
        key = _single_type(entry.fields_by_name["key"], f"{path}.key", seen)
        value = _single_type(entry.fields_by_name["value"], f"{path}.value", seen)
        return MapType(key, value, valueContainsNull=False)
    single = _single_type(field, path, seen)
    return ArrayType(single, containsNull=False) if _is_repeated(field) else single


def _single_type(field: FieldDescriptor, path: str, seen: tuple[str, ...]) -> DataType:
    """The type of one value of `field` (an element, for a repeated field)."""
    if field.type not in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return _SCALARS[field.type]
    message = field.message_type
    name = message.full_name
    if name == TIMESTAMP:
        return TimestampType()
    if name == DURATION:
        return DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND)
    if name in WRAPPERS:
        return _SCALARS[message.fields_by_name["value"].type]
    if name in seen:
        raise UnsupportedProtobufSchema(
            f"{path}: message {name} contains itself (a recursive message has no column "
            "shape); read a message without the cycle, or use valueFormat=raw"
        )
    return _struct(message, path, (*seen, name))


def converter(message: Descriptor) -> Converter:
    """What turns a parsed message of `message` into the column's value (a dict)."""
    fields = [(field.name, _field_converter(field)) for field in message.fields]
    return lambda m: {name: convert(m) for name, convert in fields}


def _field_converter(field: FieldDescriptor) -> Converter:
    """Reads `field` out of a parsed message, as its column value."""
    name = field.name
    if _is_map(field):
        entry = field.message_type
        key = _value_converter(entry.fields_by_name["key"])
        value = _value_converter(entry.fields_by_name["value"])
        if key is None and value is None:
            return lambda m: dict(getattr(m, name))
        key_of = key or _same
        value_of = value or _same
        return lambda m: {key_of(k): value_of(v) for k, v in getattr(m, name).items()}
    one = _value_converter(field)
    if _is_repeated(field):
        if one is None:
            return lambda m: list(getattr(m, name))
        return lambda m: [one(v) for v in getattr(m, name)]
    if _nullable(field):
        present = one or _same
        return lambda m: present(getattr(m, name)) if m.HasField(name) else None
    if one is None:
        return lambda m: getattr(m, name)
    return lambda m: one(getattr(m, name))


def _same(value: Any) -> Any:
    return value


def _value_converter(field: FieldDescriptor) -> Converter | None:
    """Turns one Python value of `field` (an element, for a repeated field) into the column's
    value, or None where it already is (most scalars)."""
    if field.type == F.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        # proto3 enums are open: a number the reader does not know is kept, as its digits
        return lambda number: names.get(number) or str(number)
    if field.type in _UNSIGNED_64:
        return Decimal
    if field.type not in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return None
    name = field.message_type.full_name
    if name == TIMESTAMP:
        return timestamp
    if name == DURATION:
        return duration
    if name in WRAPPERS:
        inner = _value_converter(field.message_type.fields_by_name["value"])
        return (lambda w: inner(w.value)) if inner else (lambda w: w.value)
    return converter(field.message_type)


def timestamp(value: Any) -> datetime.datetime:
    """A google.protobuf.Timestamp as an aware UTC datetime (to the microsecond, as Spark
    keeps it); one outside 0001..9999 raises OverflowError (the type's own valid range)."""
    return _EPOCH + datetime.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


def duration(value: Any) -> datetime.timedelta:
    """A google.protobuf.Duration (seconds and nanos share a sign) to the microsecond."""
    micros = abs(value.nanos) // 1000
    signed = -micros if value.nanos < 0 else micros
    return datetime.timedelta(seconds=value.seconds, microseconds=signed)
