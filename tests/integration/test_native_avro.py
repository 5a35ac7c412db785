"""Avro values decoded in Rust (native/src/avro.rs through spark_app/formats/native_avro.py) give
exactly the column the Python decoder gives: same Arrow type, same values, for nested,
optional and logical types, writers older and newer than the reader, several ids in one
batch; a batch with poison falls back to Python whole, with the same reasons. Writer schemas
come from a real registry (Apicurio), asked once per id."""

from __future__ import annotations

import copy
import json
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from devbed.schema_registry import SchemaRegistry, wire_format
from spark_app.formats import native_avro
from spark_app.formats.avro_types import spark_type
from spark_app.formats.decoding import (
    BAD_MAGIC_BYTE,
    MALFORMED_PAYLOAD,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    AvroDecoder,
    PoisonRecordError,
    decode_value_column,
    resolve_reader_schema,
)
from spark_app.formats.schema_registry_client import RegisteredSchema, SchemaRegistryClient
from spark_app.source import native_read

pytestmark = pytest.mark.integration

STATUS = {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}
LINE = {
    "type": "record",
    "name": "Line",
    "fields": [
        {"name": "sku", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "unit", "type": ["null", {"type": "fixed", "name": "Unit", "size": 2}]},
    ],
}
# The reader: every shape the Rust decoder maps (v2 of the subject).
READER = {
    "type": "record",
    "name": "Order",
    "namespace": "test.native",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "status", "type": STATUS},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "lines", "type": {"type": "array", "items": LINE}},
        {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
        {
            "name": "ship",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Ship",
                    "fields": [
                        {"name": "city", "type": "string"},
                        {"name": "zip", "type": ["null", "string"], "default": None},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "channel", "type": "string", "default": "web"},
    ],
}
# v1, older: no note, ship or channel (defaults fill them), id an int, score a float.
OLDER = copy.deepcopy(READER)
OLDER["fields"] = [f for f in OLDER["fields"] if f["name"] not in ("note", "ship", "channel")]
OLDER["fields"][0]["type"] = "int"
OLDER["fields"][1]["type"] = "float"
# v3, newer: one more field the reader skips.
NEWER = copy.deepcopy(READER)
NEWER["fields"].append({"name": "extra", "type": {"type": "array", "items": "long"}})

T0 = datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=UTC)


def order(n: int, schema: dict = READER) -> dict:
    names = {f["name"] for f in schema["fields"]}
    record = {
        "id": n,
        "score": n / 4,  # exact in a float too
        "ok": n % 2 == 0,
        "ratio": n / 8,
        "raw": bytes([n % 256, 0]),
        "status": STATUS["symbols"][n % 3],
        "day": date(2026, 11, 1) + timedelta(days=n),
        "placed": T0 + timedelta(milliseconds=n),
        "seen": None if n % 3 == 0 else T0 + timedelta(microseconds=n),
        "local": datetime(2026, 1, 1, 8, 0) + timedelta(milliseconds=n),
        "at_ms": time(12, 0, 1, 5000),
        "at_us": time(23, 59, 59, n % 1_000_000),
        "price": Decimal(n % 100_000) / 100,
        "note": None if n % 2 else f"n{n}",
        "lines": [
            {"sku": f"s{i}", "qty": i, "unit": None if i % 2 else b"kg"} for i in range(n % 3)
        ],
        "counts": {"a": n, "b": None} if n % 2 else {},
        "ship": None if n % 4 == 0 else {"city": "Lyon", "zip": None if n % 3 else "69001"},
        "channel": "app",
        "extra": [n],
    }
    return {k: v for k, v in record.items() if k in names}


@pytest.fixture(scope="module")
def ids(schema_registry: SchemaRegistry) -> dict[str, int]:
    subject = "native-avro-order-value"
    return {
        "older": schema_registry.register(subject, OLDER),
        "reader": schema_registry.register(subject, READER),
        "newer": schema_registry.register(subject, NEWER),
        "other": schema_registry.register("native-avro-other-value", '"string"'),
    }


def _reader(schema_registry: SchemaRegistry) -> RegisteredSchema:
    client = SchemaRegistryClient(schema_registry.url)
    return resolve_reader_schema(client, "native-avro-order-value", 2)


def _decoders(schema_registry: SchemaRegistry) -> tuple[AvroDecoder, AvroDecoder]:
    """The Rust-backed decoder and the Python-only one, each with its own registry client."""
    reader = _reader(schema_registry)
    rust = AvroDecoder(SchemaRegistryClient(schema_registry.url), reader)
    python = AvroDecoder(SchemaRegistryClient(schema_registry.url), reader, native=False)
    assert rust.native is not None, "the native module with AvroValues is not installed"
    return rust, python


def _batch(values: list[bytes | None]) -> pa.RecordBatch:
    from tests.unit.spark_app.formats.test_typed_values import raw_batch

    return raw_batch(values)


def _values(ids: dict[str, int]) -> list[bytes | None]:
    """Records of three writer schemas interleaved, with tombstones."""
    out: list[bytes | None] = []
    for n in range(60):
        kind = ("reader", "older", "newer")[n % 3] if n % 10 else "reader"
        schema = {"reader": READER, "older": OLDER, "newer": NEWER}[kind]
        out.append(None if n % 11 == 5 else wire_format(ids[kind], schema, order(n, schema)))
    return out


def test_rust_and_python_give_the_same_column_for_every_type_and_writer(schema_registry, ids):
    rust, python = _decoders(schema_registry)
    for values in (_values(ids), [wire_format(ids["reader"], READER, order(n)) for n in range(9)]):
        column = pa.array(values, pa.binary())
        native = rust.native.decode(column, rust._writer_text)  # decoded in Rust, not fallen back
        assert native is not None
        ours = decode_value_column(_batch(values), rust).column("value")
        theirs = decode_value_column(_batch(values), python).column("value")
        assert ours.type == theirs.type
        assert ours.equals(theirs), (ours.to_pylist()[:3], theirs.to_pylist()[:3])
        assert native.equals(theirs)
    expected = spark_type(json.loads(json.dumps(READER)))  # sanity: the mapping is Spark's
    assert expected[0] == rust.column_type


def test_a_batch_with_poison_falls_back_whole_and_names_the_same_reasons(schema_registry, ids):
    rust, python = _decoders(schema_registry)
    good = wire_format(ids["reader"], READER, order(1))
    note = wire_format(ids["reader"], READER, order(2))
    assert note.count(b"n2") == 1
    poison = [
        (b"\x01" + good[1:], BAD_MAGIC_BYTE),
        (good[:-4], TRUNCATED),
        (good + b"\x07", MALFORMED_PAYLOAD),
        (note.replace(b"n2", b"\xff2"), MALFORMED_PAYLOAD),  # not UTF-8
        (wire_format(99_999, READER, order(2)), UNKNOWN_SCHEMA_ID),
        (wire_format(ids["other"], "string", "x"), "unresolvable-schema"),
    ]
    for bad, reason in poison:
        values = [good, bad, None, good]
        assert rust.native.decode(pa.array(values, pa.binary()), rust._writer_text) is None
        dead_rust: list = []
        dead_python: list = []
        ours = decode_value_column(_batch(values), rust, dead=dead_rust)
        theirs = decode_value_column(_batch(values), python, dead=dead_python)
        assert ours.equals(theirs)
        assert [d.reason for d in dead_rust] == [reason] == [d.reason for d in dead_python]
        assert dead_rust == dead_python
        with pytest.raises(PoisonRecordError, match=f"offset 11: {reason}"):
            decode_value_column(_batch(values), rust)
    # and after all that the Rust decoder still takes a good batch
    assert rust.native.decode(pa.array([good], pa.binary()), rust._writer_text) is not None


def test_a_reader_schema_rust_cannot_map_exactly_decodes_in_python(schema_registry):
    uuid = {
        "type": "record",
        "name": "U",
        "fields": [{"name": "u", "type": {"type": "string", "logicalType": "uuid"}}],
    }
    reader = RegisteredSchema(schema_id=None, version=None, schema=json.dumps(uuid))
    assert native_read.module() is not None
    assert native_avro.for_reader(reader, spark_type(uuid)[0]) is None
    decoder = AvroDecoder(SchemaRegistryClient(schema_registry.url), reader)
    assert decoder.native is None
