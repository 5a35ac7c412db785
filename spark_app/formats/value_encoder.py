"""Typed values into the Confluent wire format, on the executors: magic byte 0, the schema id
(4 bytes, big-endian), then the Avro binary encoding, the JSON text of the record, or the
message indexes (the single byte 0: the file's first message) and the Protobuf binary. The
schema and its id come resolved from the driver (the sink's options valueFormat,
valueSchemaId, valueSchema, valueType, the column's Spark type, and for Protobuf
valueDescriptors, the schema compiled: spark_app/runner/sink_schema.py); the values are the
value column's rows as Arrow gives them (structs as dicts, maps as lists of pairs)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from spark_app.formats.decoding import wire_header
from spark_app.formats.protobuf_writer import ProtobufEncoder

FIRST_MESSAGE = b"\x00"  # Confluent's message indexes [0]: the schema file's first message


class ValueEncoder:
    def __init__(
        self,
        schema_format: str,
        schema_id: int,
        schema: str,
        value_type: Any,
        descriptors: bytes = b"",
    ):
        self.format = schema_format
        self.prefix = wire_header(schema_id)
        self.value_type = value_type
        if schema_format == "protobuf":
            self.prefix += FIRST_MESSAGE
            self._protobuf = ProtobufEncoder(descriptors, value_type)
        if schema_format == "avro":
            import fastavro

            self._avro = fastavro.parse_schema(json.loads(schema), named_schemas={})
            self._write_avro = fastavro.schemaless_writer  # per record: imported once

    @classmethod
    def of_options(cls, options: Mapping[str, str]) -> ValueEncoder | None:
        """The encoder the sink's options name; None: the value is written raw."""
        lower = {k.lower(): v for k, v in options.items()}
        schema_format = lower.get("valueformat", "raw")
        if schema_format == "raw":
            return None
        value_type = json.loads(lower["valuetype"])
        descriptors = base64.b64decode(lower.get("valuedescriptors", ""))
        schema_id = int(lower["valueschemaid"])
        return cls(schema_format, schema_id, lower["valueschema"], value_type, descriptors)

    def encode(self, value: Any) -> bytes | None:
        """One record's value; a null value stays null (a tombstone)."""
        if value is None:
            return None
        plain = _plain(value, self.value_type)
        if self.format == "json":
            return self.prefix + json.dumps(plain, default=_json_default).encode()
        if self.format == "protobuf":
            return self.prefix + self._protobuf.encode(plain)
        out = io.BytesIO(self.prefix)
        out.seek(len(self.prefix))
        self._write_avro(out, self._avro, plain)
        return out.getvalue()


def _plain(value: Any, kind: Any) -> Any:
    """Arrow's Python value of a Spark type (`kind`, its JSON form) as the encoders take it: a
    map (a list of key-value pairs) as a dict, through structs and arrays."""
    if value is None or not isinstance(kind, dict):
        return value
    if kind["type"] == "struct":
        return {f["name"]: _plain(value.get(f["name"]), f["type"]) for f in kind["fields"]}
    if kind["type"] == "array":
        return [_plain(v, kind["elementType"]) for v in value]
    if kind["type"] == "map":
        pairs = value.items() if isinstance(value, dict) else value
        return {k: _plain(v, kind["valueType"]) for k, v in pairs}
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"a {type(value).__name__} has no JSON form")
