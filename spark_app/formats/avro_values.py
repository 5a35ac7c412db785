"""valueFormat=avro: Avro payloads resolved to one reader schema (a
`spark_app.formats.value_formats` plug-in).

The payload after the wire header is Avro binary written with the writer's schema (from the
registry by id); it is resolved to the reader schema by Avro's resolution rules (fields added
with defaults, removed fields skipped, promotions such as int -> long), so records written with
older or newer compatible schemas mid-stream all decode to one shape. The column type is
Spark's own from_avro mapping (`spark_app.formats.avro_types`).
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from spark_app.formats.avro_types import (
    UnsupportedAvroSchema,
    arrow_column,
    converter,
    plain_timestamps,
    read_type,
    spark_type,
)
from spark_app.formats.poison import MALFORMED_PAYLOAD, TRUNCATED, UNRESOLVABLE_SCHEMA, Poison
from spark_app.formats.schema_registry_client import RegisteredSchema, SchemaRegistryClient
from spark_app.formats.value_formats import InvalidSchema, UnsupportedSchema

SCHEMA_TYPE = "AVRO"


def pinned_reader(
    found: RegisteredSchema, client: SchemaRegistryClient | None, message: str | None
) -> RegisteredSchema:
    """An Avro reader is its text alone: kept as found."""
    return found


def column_type(reader: RegisteredSchema) -> Any:
    """The Spark type a reader schema's values decode to (Spark's from_avro mapping)."""
    try:
        return spark_type(_parse(reader.schema, expand=True))[0]
    except UnsupportedAvroSchema as exc:
        raise UnsupportedSchema(str(exc)) from None
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise InvalidSchema(f"not a valid Avro schema: {exc}") from None


def payload_decoder(
    reader: RegisteredSchema, client: SchemaRegistryClient | None = None
) -> AvroPayloads:
    """`client` is not needed: a writer schema is its own text (no references)."""
    return AvroPayloads(reader)


class AvroPayloads:
    """Avro binary payloads resolved to the reader schema."""

    def __init__(self, reader: RegisteredSchema):
        self._reader_schema = _parse(reader.schema)
        expanded = _parse(reader.schema, expand=True)
        self.column_type = spark_type(expanded)[0]
        self._convert = converter(expanded)
        # `read_batch` reads the timestamps as longs, straight into Arrow: fastavro would
        # make a datetime of each, which pyarrow turns back into an integer. None: no
        # timestamps to gain on.
        self._plain = None
        plain = plain_timestamps(json.loads(reader.schema))
        if plain != json.loads(reader.schema):
            self._plain = fastavro.parse_schema(plain, named_schemas={})
            self._plain_type = read_type(expanded, self.column_type)

    def writer(self, found: RegisteredSchema) -> Any:
        try:
            return _parse(found.schema)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            message = f"schema id {found.schema_id} is not a valid Avro schema: {exc}"
            return Poison(UNRESOLVABLE_SCHEMA, message, found.schema_id)

    def read(self, payload: memoryview, schema_id: int, writer: Any) -> Any:
        buffer = io.BytesIO(payload)
        try:
            record = fastavro.schemaless_reader(buffer, writer, self._reader_schema)
        except SchemaResolutionError as exc:
            message = f"schema id {schema_id} does not resolve to the reader schema: {exc}"
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)
        except Exception as exc:  # fastavro's errors on garbage are not one class
            # Running off the end is EOFError, or IndexError inside a varint.
            if isinstance(exc, EOFError) or buffer.tell() >= len(payload):
                message = f"{len(payload)}-byte payload ends inside a value (schema id {schema_id})"
                return Poison(TRUNCATED, message, schema_id)
            message = f"payload does not decode with schema id {schema_id}: {exc!r}"
            return Poison(MALFORMED_PAYLOAD, message, schema_id)
        left = len(payload) - buffer.tell()
        if left:
            message = f"{left} bytes left after a value of schema id {schema_id}"
            return Poison(MALFORMED_PAYLOAD, message, schema_id)
        return record if self._convert is None else self._convert(record)

    def read_batch(self, payloads: list[memoryview | None]) -> Any:
        """Payloads all written with the reader schema itself (None: a null value) as the
        column's Arrow array, timestamps read as longs and cast in Arrow: the column `read`
        gives, faster. None when there are no timestamps or any payload does not decode
        whole: then `read` takes each and names the poison one."""
        if self._plain is None:
            return None
        plain, convert = self._plain, self._convert
        rows: list[Any] = []
        try:
            for payload in payloads:
                if payload is None:
                    rows.append(None)
                    continue
                buffer = io.BytesIO(payload)
                row = fastavro.schemaless_reader(buffer, plain, plain)
                if buffer.tell() != len(payload):
                    return None
                rows.append(row if convert is None else convert(row))
            return arrow_column(rows, self.column_type, self._plain_type)
        except Exception:  # a poison record (or a long no timestamp holds): `read` says which
            return None


def _parse(schema_text: str, expand: bool = False) -> Any:
    """A parsed schema with its own table of named types (writer and reader schemas often
    share type names; one shared table would mix them up); `expand` writes named types out
    where they are used (what the column type is read from)."""
    return fastavro.parse_schema(json.loads(schema_text), named_schemas={}, expand=expand)
