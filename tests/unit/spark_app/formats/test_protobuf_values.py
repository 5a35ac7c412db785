"""Protobuf values without services: the message-index varints, the Spark type of a message
(Spark's from_protobuf mapping), records written with the reader's own schema id (which need
no registry) decoded through the seam's WireDecoder to column values, and a reader given
inline (spark_app/formats/protobuf_values.py, protobuf_types.py, protobuf_schema.py). With the
registry: tests/integration/test_protobuf_decoding.py."""

from __future__ import annotations

import pickle
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
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

from spark_app.formats.avro_types import arrow_column
from spark_app.formats.decoding import (
    MALFORMED_PAYLOAD,
    TRUNCATED,
    UNRESOLVABLE_SCHEMA,
    Poison,
    ReaderSchemaError,
    WireDecoder,
    inline_reader_schema,
)
from spark_app.formats.protobuf_schema import ProtobufSchemaError, compile_schema, message_at
from spark_app.formats.protobuf_values import (
    MessageIndexError,
    ProtobufReaderSchema,
    column_type,
    encode_message_indexes,
    payload_decoder,
    pinned_reader,
    read_message_indexes,
)
from spark_app.formats.schema_registry_client import (
    RegisteredSchema,
    SchemaReference,
    SchemaRegistryClient,
)
from spark_app.formats.value_formats import InvalidSchema, UnsupportedSchema
from tests.support.protobuf_messages import message_classes, proto_wire_format, zigzag_varint

pytestmark = pytest.mark.unit

SCHEMA_ID = 7
# Every scalar type, nested and repeated messages, a map, an enum, presence of every kind,
# and the well-known types with a column form of their own.
EVERYTHING = """
syntax = "proto3";
package test.types;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/any.proto";

enum Color { COLOR_UNSPECIFIED = 0; RED = 1; GREEN = 2; }

message All {
  double d = 1;
  float f = 2;
  int32 i32 = 3;
  sint32 s32 = 4;
  sfixed32 sf32 = 5;
  uint32 u32 = 6;
  fixed32 f32 = 7;
  int64 i64 = 8;
  sint64 s64 = 9;
  sfixed64 sf64 = 10;
  uint64 u64 = 11;
  fixed64 f64 = 12;
  bool b = 13;
  string s = 14;
  bytes raw = 15;
  Color color = 16;
  optional string maybe = 17;
  Inner inner = 18;
  repeated Inner inners = 19;
  repeated int64 numbers = 20;
  map<string, Inner> by_name = 21;
  map<int32, Color> colors = 22;
  google.protobuf.Timestamp at = 23;
  google.protobuf.Duration took = 24;
  google.protobuf.Int64Value wrapped_long = 25;
  google.protobuf.UInt64Value wrapped_big = 26;
  google.protobuf.StringValue wrapped_string = 27;
  google.protobuf.Any any = 28;
  oneof choice { string word = 29; int32 number = 30; }
  message Inner { string name = 1; repeated Color shades = 2; }
}

message Second { string x = 1; message Deep { message Deeper { int32 y = 1; } } }
"""
INNER = StructType(
    [
        StructField("name", StringType(), False),
        StructField("shades", ArrayType(StringType(), False), False),
    ]
)
ALL_TYPE = StructType(
    [
        StructField("d", DoubleType(), False),
        StructField("f", FloatType(), False),
        StructField("i32", IntegerType(), False),
        StructField("s32", IntegerType(), False),
        StructField("sf32", IntegerType(), False),
        StructField("u32", LongType(), False),
        StructField("f32", LongType(), False),
        StructField("i64", LongType(), False),
        StructField("s64", LongType(), False),
        StructField("sf64", LongType(), False),
        StructField("u64", DecimalType(20, 0), False),
        StructField("f64", DecimalType(20, 0), False),
        StructField("b", BooleanType(), False),
        StructField("s", StringType(), False),
        StructField("raw", BinaryType(), False),
        StructField("color", StringType(), False),
        StructField("maybe", StringType(), True),
        StructField("inner", INNER, True),
        StructField("inners", ArrayType(INNER, False), False),
        StructField("numbers", ArrayType(LongType(), False), False),
        StructField("by_name", MapType(StringType(), INNER, False), False),
        StructField("colors", MapType(IntegerType(), StringType(), False), False),
        StructField("at", TimestampType(), True),
        StructField("took", DayTimeIntervalType(0, 3), True),
        StructField("wrapped_long", LongType(), True),
        StructField("wrapped_big", DecimalType(20, 0), True),
        StructField("wrapped_string", StringType(), True),
        StructField(
            "any",
            StructType(
                [
                    StructField("type_url", StringType(), False),
                    StructField("value", BinaryType(), False),
                ]
            ),
            True,
        ),
        StructField("word", StringType(), True),
        StructField("number", IntegerType(), True),
    ]
)
# Every field at its default: what an empty payload decodes to.
ALL_DEFAULTS = {
    **dict.fromkeys(["d", "f"], 0.0),
    **dict.fromkeys(["i32", "s32", "sf32", "u32", "f32", "i64", "s64", "sf64"], 0),
    **dict.fromkeys(["u64", "f64"], Decimal(0)),
    "b": False,
    "s": "",
    "raw": b"",
    "color": "COLOR_UNSPECIFIED",
    "inners": [],
    "numbers": [],
    "by_name": {},
    "colors": {},
    **dict.fromkeys(
        ["maybe", "inner", "at", "took", "wrapped_long", "wrapped_big", "wrapped_string"], None
    ),
    **dict.fromkeys(["any", "word", "number"], None),
}
# A client no test reaches: records of the reader's own schema id need no registry.
NO_REGISTRY = SchemaRegistryClient("http://127.0.0.1:9/apis/ccompat/v7", timeout_s=0.1)


def _reader(text: str = EVERYTHING, message: str | None = None) -> ProtobufReaderSchema:
    """The reader as the seam pins it at query start (its own id: no registry needed)."""
    return pinned_reader(RegisteredSchema(SCHEMA_ID, 1, text, "PROTOBUF"), NO_REGISTRY, message)


@pytest.fixture(scope="module")
def decoder() -> WireDecoder:
    return WireDecoder(NO_REGISTRY, _reader(), "protobuf")


@pytest.fixture(scope="module")
def classes() -> dict:
    return message_classes({"all.proto": EVERYTHING}, "all.proto")


# -- the message indexes -------------------------------------------------------------------


@given(st.lists(st.integers(min_value=0, max_value=2**31 - 1), min_size=1, max_size=6))
def test_message_indexes_read_back_as_written(indexes: list[int]) -> None:
    written = encode_message_indexes(indexes) + b"payload"
    assert read_message_indexes(written) == (indexes, len(written) - len(b"payload"))


def test_a_single_zero_byte_is_the_first_message_and_so_is_an_explicit_zero() -> None:
    assert encode_message_indexes([0]) == b"\x00"
    assert read_message_indexes(b"\x00\x0a") == ([0], 1)
    assert read_message_indexes(b"\x02\x00\x0a") == ([0], 2)  # count 1 (zigzag 2), index 0
    # zigzag: 1 -> 2, 2 -> 4, 300 -> 600 (two bytes)
    assert encode_message_indexes([1, 2, 300]) == b"\x06\x02\x04\xd8\x04"
    assert encode_message_indexes([1, 2, 300]) == b"".join(map(zigzag_varint, [3, 1, 2, 300]))


@pytest.mark.parametrize(
    ("indexes", "error"),
    [
        (b"", "end at payload byte 0, inside a varint"),
        (b"\x04\x02", "end at payload byte 2"),  # a count of 2, one index
        (b"\x80", "end at payload byte 1"),  # a varint whose continuation bit has nothing after it
        (b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
        (b"\x01", "count -1 is negative"),
        (b"\x02\x03", "index -2 is negative"),
    ],
)
def test_bad_message_indexes_are_errors(indexes: bytes, error: str) -> None:
    with pytest.raises(MessageIndexError, match=error):
        read_message_indexes(memoryview(indexes))


def test_message_indexes_name_top_level_then_nested_messages() -> None:
    main = _reader().compiled.main_file()
    assert message_at(main, [0]) == "test.types.All"
    assert message_at(main, [0, 0]) == "test.types.All.Inner"
    # protoc's map-entry messages (All.ByNameEntry, All.ColorsEntry, before Inner in its
    # descriptor) are not counted: Confluent's serializer counts declared messages only
    assert message_at(main, [1]) == "test.types.Second"
    assert message_at(main, [1, 0, 0]) == "test.types.Second.Deep.Deeper"
    assert message_at(main, [2]) is None
    assert message_at(main, [1, 1]) is None


# -- the Spark type ------------------------------------------------------------------------


def test_the_column_type_is_spark_from_protobufs_mapping() -> None:
    reader = _reader()
    assert reader.message == "test.types.All"  # no message named: the file's first
    assert column_type(reader) == ALL_TYPE


def test_a_recursive_message_is_refused_naming_the_field() -> None:
    tree = """syntax = "proto3"; package t;
      message Tree { string label = 1; Branch left = 2; }
      message Branch { int32 weight = 1; Tree subtree = 2; }"""
    with pytest.raises(UnsupportedSchema, match=r"value\.left\.subtree: message t\.Tree"):
        column_type(_reader(tree, "t.Tree"))
    # google.protobuf.Struct is recursive (Struct -> Value -> ListValue -> Value)
    struct = """syntax = "proto3"; import "google/protobuf/struct.proto";
      message M { google.protobuf.Struct attributes = 1; }"""
    with pytest.raises(UnsupportedSchema, match=r"value\.attributes\.fields\.value"):
        column_type(_reader(struct, "M"))


def test_proto2_fields_with_presence_are_nullable() -> None:
    proto2 = """syntax = "proto2"; package p;
      message M { optional int32 a = 1; required string b = 2; repeated int64 c = 3; }"""
    assert column_type(_reader(proto2, "p.M")) == StructType(
        [
            StructField("a", IntegerType(), True),
            StructField("b", StringType(), True),
            StructField("c", ArrayType(LongType(), False), False),
        ]
    )


def test_a_schema_that_does_not_compile_is_protocs_error() -> None:
    broken = RegisteredSchema(8, 1, 'syntax = "proto3"; message M { strin x = 1; }', "PROTOBUF")
    with pytest.raises(ProtobufSchemaError, match=r"protoc: .*\.proto:1:.*strin"):
        compile_schema(NO_REGISTRY, broken)


# -- decoding ------------------------------------------------------------------------------


def test_every_field_decodes_to_its_column_value(decoder: WireDecoder, classes: dict) -> None:
    message = classes["test.types.All"](
        d=1.5, f=0.25, i32=-3, s32=-4, sf32=-5, u32=2**32 - 1, f32=7, i64=-(2**63), s64=9,
        sf64=10, u64=2**64 - 1, f64=12, b=True, s="text", raw=b"\x00\xff", color=2,
        maybe="", numbers=[1, 2], word="hi",
    )  # fmt: skip
    message.inner.name = "a"
    message.inner.shades.extend([1, 2])
    message.inners.add(name="b")
    message.by_name["k"].name = "c"
    message.colors[5] = 1
    message.at.FromDatetime(datetime(2026, 11, 24, 12, 30, 15, 123456))
    message.took.FromTimedelta(timedelta(seconds=-90, microseconds=-5))
    message.wrapped_long.value = 0  # present, at its default: not null
    message.wrapped_big.value = 2**64 - 2
    message.any.type_url = "type.example/x"
    decoded = decoder.decode(proto_wire_format(SCHEMA_ID, message))
    assert decoded == {
        **ALL_DEFAULTS,
        "d": 1.5, "f": 0.25, "i32": -3, "s32": -4, "sf32": -5, "u32": 2**32 - 1, "f32": 7,
        "i64": -(2**63), "s64": 9, "sf64": 10, "u64": Decimal(2**64 - 1), "f64": Decimal(12),
        "b": True, "s": "text", "raw": b"\x00\xff", "color": "GREEN", "maybe": "",
        "inner": {"name": "a", "shades": ["RED", "GREEN"]},
        "inners": [{"name": "b", "shades": []}], "numbers": [1, 2],
        "by_name": {"k": {"name": "c", "shades": []}}, "colors": {5: "RED"},
        "at": datetime(2026, 11, 24, 12, 30, 15, 123456, tzinfo=UTC),
        "took": timedelta(seconds=-90, microseconds=-5),
        "wrapped_long": 0, "wrapped_big": Decimal(2**64 - 2),
        "any": {"type_url": "type.example/x", "value": b""}, "word": "hi",
    }  # fmt: skip
    # and the dict fits the column, as Spark checks it
    row = arrow_column([decoded], decoder.column_type).to_pylist()[0]
    assert row["at"] == decoded["at"] and row["u64"] == Decimal(2**64 - 1)
    assert row["by_name"] == [("k", {"name": "c", "shades": []})]  # Arrow's map: pairs


def test_an_empty_payload_is_every_field_at_its_default(decoder: WireDecoder) -> None:
    assert decoder.decode(b"\x00" + SCHEMA_ID.to_bytes(4, "big") + b"\x00") == ALL_DEFAULTS


def test_an_enum_number_the_reader_does_not_know_is_kept_as_its_digits(
    decoder: WireDecoder, classes: dict
) -> None:
    message = classes["test.types.All"](color=9)
    assert decoder.decode(proto_wire_format(SCHEMA_ID, message))["color"] == "9"


def test_a_field_sent_with_another_wire_type_is_an_unknown_field(decoder: WireDecoder) -> None:
    # field 8 (i64, a varint) sent length-delimited: Protobuf skips it, as a field it does
    # not know, and the reader's field keeps its default
    value = b"\x00" + SCHEMA_ID.to_bytes(4, "big") + b"\x00" + b"\x42\x02ab"
    assert decoder.decode(value) == ALL_DEFAULTS


def test_records_that_cannot_be_decoded_are_poison(decoder: WireDecoder, classes: dict) -> None:
    good = proto_wire_format(SCHEMA_ID, classes["test.types.All"](s="x" * 20))
    header = good[:5]
    second = proto_wire_format(SCHEMA_ID, classes["test.types.Second"](x="y"), [1])
    cases = {
        header[:4]: (TRUNCATED, "shorter than the 5-byte header"),
        header: (TRUNCATED, "end at payload byte 0, inside a varint"),
        header + b"\x04\x00": (TRUNCATED, "end at payload byte 2"),
        header + b"\xff" * 6: (TRUNCATED, "longer than 5 bytes"),
        header + b"\x02\x08": (UNRESOLVABLE_SCHEMA, r"indexes \[4\] name no message"),
        second: (UNRESOLVABLE_SCHEMA, r"wrote message test\.types\.Second \(indexes \[1\]\)"),
        good[:-5]: (MALFORMED_PAYLOAD, "does not parse"),
        header + b"\x00\x72\x02\xc3\x28": (MALFORMED_PAYLOAD, "does not parse"),  # bad UTF-8
    }
    for value, (reason, message) in cases.items():
        poison = decoder.decode(value)
        assert isinstance(poison, Poison) and poison.reason == reason, value
        assert re.search(message, poison.message), poison
    assert decoder.decode(None) is None  # a tombstone is not poison


def test_a_timestamp_outside_its_valid_range_is_a_malformed_payload(
    decoder: WireDecoder, classes: dict
) -> None:
    message = classes["test.types.All"]()
    message.at.seconds = 400_000_000_000  # year ~14600
    poison = decoder.decode(proto_wire_format(SCHEMA_ID, message))
    assert isinstance(poison, Poison) and poison.reason == MALFORMED_PAYLOAD
    assert "no column form" in poison.message


def test_the_reader_pickles_to_the_executors_with_its_descriptors(classes: dict) -> None:
    reader = _reader()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy == reader and hash(copy) == hash(reader)  # a key of the per-process decoders
    # an executor decodes with the copy's descriptors: no compiler, no registry
    message = classes["test.types.All"](i64=42)
    decoded = WireDecoder(NO_REGISTRY, copy, "protobuf").decode(
        proto_wire_format(SCHEMA_ID, message)
    )
    assert decoded == {**ALL_DEFAULTS, "i64": 42}


# -- the reader at query start -------------------------------------------------------------


def test_the_reader_message_is_chosen_by_full_name_or_refused_listing_the_files() -> None:
    assert _reader(message="test.types.Second").message == "test.types.Second"
    listed = r"no top-level message 'Second'; it has test\.types\.All, test\.types\.Second"
    with pytest.raises(UnsupportedSchema, match=listed + r" \(option valueMessageName"):
        _reader(message="Second")
    with pytest.raises(UnsupportedSchema, match="defines no message"):
        _reader('syntax = "proto3"; package e; enum E { E_ZERO = 0; }')
    broken = RegisteredSchema(8, 1, 'syntax = "proto3"; message M { strin x = 1; }', "PROTOBUF")
    with pytest.raises(InvalidSchema, match=r"not a valid Protobuf schema: protoc: .*strin"):
        pinned_reader(broken, NO_REGISTRY, None)


def test_an_inline_proto_reader_decodes_records_of_its_message(classes: dict) -> None:
    reader = inline_reader_schema(EVERYTHING, "protobuf", "test.types.Second")
    assert isinstance(reader, ProtobufReaderSchema) and reader.schema_id is None
    assert column_type(reader).simpleString() == "struct<x:string>"
    # a record of the file's second message: a writer schema id needs the registry, so the
    # payload is read through the seam's format part with the writer compiled here
    payloads = payload_decoder(reader)
    writer = payloads.writer(reader)
    record = proto_wire_format(SCHEMA_ID, classes["test.types.Second"](x="y"), [1])
    assert payloads.read(memoryview(record)[5:], SCHEMA_ID, writer) == {"x": "y"}


def test_an_inline_proto_reader_is_refused_at_start_naming_the_option() -> None:
    with pytest.raises(ReaderSchemaError, match=r"option valueSchema is not a valid Protobuf "
                       r"schema: protoc: .*strin.*fix the schema text"):  # fmt: skip
        inline_reader_schema('syntax = "proto3"; message M { strin x = 1; }', "protobuf")
    with pytest.raises(ReaderSchemaError, match=r"option valueSchema: has no top-level message"):
        inline_reader_schema(EVERYTHING, "protobuf", "test.types.Nope")
    # an import by reference needs the registry: an inline schema has none
    imports = RegisteredSchema(
        None, None, 'syntax = "proto3"; import "a.proto"; message M { A a = 1; }', "PROTOBUF",
        (SchemaReference("a.proto", "a", 1),),
    )  # fmt: skip
    with pytest.raises(InvalidSchema, match=r"imports 'a\.proto' by reference, with no registry"):
        pinned_reader(imports, None, None)
