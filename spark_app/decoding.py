"""Avro values in the Confluent wire format, decoded to one reader schema.

A record's value is a magic byte (0), the writer's schema id (4 bytes, big-endian) and the
Avro binary payload. The writer's schema comes from the registry by that id (cached by the
client: once per id); the payload is resolved to the reader schema by Avro's resolution rules
(fields added with defaults, removed fields skipped, promotions such as int -> long), so
records written with older or newer compatible schemas mid-stream all decode to one shape.
The reader schema is fixed when the query starts: a pinned subject version, or the subject's
latest version at that moment (`resolve_reader_schema`).

A record that cannot be decoded is *poison*, returned as `Poison` with a reason (one of
POISON_REASONS) and a message naming the cause, never raised: the caller decides whether it
goes to a dead-letter topic or fails the query naming the record. A registry outage is not
poison (the record is fine): `RegistryUnavailable` propagates after the client's retries.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from spark_app.avro_types import (
    UnsupportedAvroSchema,
    arrow_column,
    converter,
    plain_timestamps,
    read_type,
    spark_type,
)
from spark_app.dead_letter import DeadRecord
from spark_app.schema_registry_client import (
    RegisteredSchema,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRegistryClient,
)

MAGIC_BYTE = 0
HEADER_SIZE = 5  # magic byte + 4-byte schema id

BAD_MAGIC_BYTE = "bad-magic-byte"
TRUNCATED = "truncated"
UNKNOWN_SCHEMA_ID = "unknown-schema-id"
UNRESOLVABLE_SCHEMA = "unresolvable-schema"
MALFORMED_PAYLOAD = "malformed-payload"
POISON_REASONS = (
    BAD_MAGIC_BYTE,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    MALFORMED_PAYLOAD,
)


@dataclass(frozen=True)
class Poison:
    """A record that cannot be decoded: `reason` is one of POISON_REASONS."""

    reason: str
    message: str
    schema_id: int | None = None


class ReaderSchemaError(ValueError):
    """The reader schema cannot be had (no such subject or version, not Avro, not valid)."""


def resolve_reader_schema(
    client: SchemaRegistryClient, subject: str, version: int | str = "latest"
) -> RegisteredSchema:
    """The reader schema, once at query start; the answer is pinned for the query's life."""
    try:
        found = client.subject_version(subject, version)
    except SchemaNotFound:
        raise ReaderSchemaError(
            f"subject {subject!r} has no version {version} in the schema registry at "
            f"{client.url}: register the schema or fix valueSubject / valueSchemaVersion"
        ) from None
    if found.schema_type.upper() != "AVRO":
        raise ReaderSchemaError(
            f"subject {subject!r} version {found.version} is {found.schema_type}, not AVRO"
        )
    try:
        spark_type(_parse(found.schema, expand=True))
    except UnsupportedAvroSchema as exc:
        raise ReaderSchemaError(f"subject {subject!r} version {found.version}: {exc}") from None
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise ReaderSchemaError(f"subject {subject!r}: not a valid Avro schema: {exc}") from None
    return found


def inline_reader_schema(schema_text: str) -> RegisteredSchema:
    """The reader schema given in option valueSchema, checked as the registry's answer is: a
    valid Avro record schema of types Spark can hold. Not registered: no id, no version."""
    try:
        spark_type(_parse(schema_text, expand=True))
    except UnsupportedAvroSchema as exc:
        raise ReaderSchemaError(f"option valueSchema: {exc}") from None
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise ReaderSchemaError(
            f"option valueSchema is not a valid Avro schema: {exc}: fix the schema JSON"
        ) from None
    return RegisteredSchema(schema_id=None, version=None, schema=schema_text)


def reader_column_type(reader: RegisteredSchema) -> Any:
    """The Spark type a reader schema's values decode to (Spark's from_avro mapping)."""
    return spark_type(_parse(reader.schema, expand=True))[0]


class AvroDecoder:
    """Decodes wire-format values to the reader schema; `decode` never raises for a bad
    record, only for a registry outage."""

    def __init__(self, client: SchemaRegistryClient, reader: RegisteredSchema):
        self.client = client
        self.reader = reader
        self._reader_schema = _parse(reader.schema)
        expanded = _parse(reader.schema, expand=True)
        self.column_type = spark_type(expanded)[0]  # the decoded column's Spark type
        self._convert = converter(expanded)
        # schema id -> parsed writer schema, or Poison; records written with the reader
        # schema itself (the usual case) need no registry at all
        self._writers: dict[int, Any] = {}
        if reader.schema_id is not None:  # an inline reader schema has no id of its own
            self._writers[reader.schema_id] = self._reader_schema
        # A batch all of the reader's own schema id (the usual case) is read with its
        # timestamps as longs, straight into Arrow (`own_batch`); None: no timestamps, or
        # an inline reader schema (no id of its own: every record resolves from its writer).
        self._plain = None
        plain = plain_timestamps(json.loads(reader.schema))
        if reader.schema_id is not None and plain != json.loads(reader.schema):
            self._own_header = struct.pack(">BI", MAGIC_BYTE, reader.schema_id)
            self._plain = fastavro.parse_schema(plain, named_schemas={})
            self._plain_type = read_type(expanded, self.column_type)

    def decode(self, value: bytes | None) -> Any:
        """The value in the shape of `column_type` (a dict for a record schema), a `Poison`,
        or None for a null value (a tombstone is not poison)."""
        if value is None:
            return None
        if len(value) < HEADER_SIZE:
            return Poison(TRUNCATED, f"{len(value)} bytes: shorter than the 5-byte header")
        if value[0] != MAGIC_BYTE:
            return Poison(BAD_MAGIC_BYTE, f"magic byte {value[0]}, expected {MAGIC_BYTE}")
        (schema_id,) = struct.unpack_from(">I", value, 1)
        writer = self._writer(schema_id)
        if isinstance(writer, Poison):
            return writer
        return self._read(memoryview(value)[HEADER_SIZE:], schema_id, writer)

    def own_batch(self, values: list[bytes | None]) -> Any:
        """`values` decoded into the column's Arrow array when every one is the reader's own
        schema id and decodes (timestamps read as longs, cast in Arrow: the same column,
        faster); None otherwise, and `decode` classifies each record as usual."""
        if self._plain is None:
            return None
        header, plain, convert = self._own_header, self._plain, self._convert
        rows: list[Any] = []
        try:
            for value in values:
                if value is None:
                    rows.append(None)
                    continue
                if value[:HEADER_SIZE] != header:
                    return None
                buffer = io.BytesIO(memoryview(value)[HEADER_SIZE:])
                row = fastavro.schemaless_reader(buffer, plain, plain)
                if buffer.tell() != len(value) - HEADER_SIZE:
                    return None
                rows.append(row if convert is None else convert(row))
            return arrow_column(rows, self.column_type, self._plain_type)
        except Exception:  # a poison record (or a long no timestamp holds): decode says which
            return None

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self._writers:
            self._writers[schema_id] = self._fetch_writer(schema_id)
        return self._writers[schema_id]

    def _fetch_writer(self, schema_id: int) -> Any:
        try:
            found = self.client.schema_by_id(schema_id)
        except SchemaNotFound:
            return Poison(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not registered", schema_id)
        if found.schema_type.upper() != "AVRO":
            message = f"schema id {schema_id} is {found.schema_type}, not AVRO"
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)
        try:
            return _parse(found.schema)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            message = f"schema id {schema_id} is not a valid Avro schema: {exc}"
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)

    def _read(self, payload: memoryview, schema_id: int, writer: Any) -> Any:
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


def _parse(schema_text: str, expand: bool = False) -> Any:
    """A parsed schema with its own table of named types (writer and reader schemas often
    share type names; one shared table would mix them up); `expand` writes named types out
    where they are used (what the column type is read from)."""
    return fastavro.parse_schema(json.loads(schema_text), named_schemas={}, expand=expand)


class PoisonRecordError(RuntimeError):
    """A record that cannot be decoded, where no dead-letter topic takes it: names the record
    (topic, partition, offset), the reason and how to skip it. `range_start` is where the
    failing batch began reading the partition: the records from there to the poison one
    were read but are not output either (the batch fails whole)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        poison: Poison,
        range_start: int | None = None,
    ):
        self.topic, self.partition, self.offset, self.poison = topic, partition, offset, poison
        skipped = ""
        if range_start is not None and range_start < offset:
            skipped = (
                f"; that also skips offsets {range_start}..{offset - 1}, which this batch read "
                "before it"
            )
        super().__init__(
            f"poison record {topic}-{partition} offset {offset}: {poison.reason}: "
            f"{poison.message}. The batch fails and nothing of it is committed: a restart "
            f"meets the record again. To skip it, stop the job and move the group's offset of "
            f"{topic}-{partition} to {offset + 1} (an offsets action, alter), then start it "
            f"fresh{skipped}"
        )


def decode_value_column(
    batch: Any,
    decoder: AvroDecoder,
    range_start: int | None = None,
    dead: list[DeadRecord] | None = None,
) -> Any:
    """An Arrow record batch of the source's columns with `value` decoded into the reader
    schema's column type; raises RegistryUnavailable naming the record whose writer schema
    could not be fetched. A record that cannot be decoded raises PoisonRecordError, or, given
    a `dead` list (a dead-letter topic takes them), is left out and appended to it."""
    import pyarrow as pa

    values = batch.column("value").to_pylist()
    own = decoder.own_batch(values)
    if own is not None:
        index = batch.schema.get_field_index("value")
        return batch.set_column(index, pa.field("value", own.type), own)
    rows, kept = [], []
    for i, value in enumerate(values):
        try:
            row = decoder.decode(value)
        except RegistryUnavailable as exc:
            topic, partition, offset = _where(batch, i)
            raise RegistryUnavailable(
                f"{topic}-{partition} offset {offset}: {exc}. The batch fails and nothing of it "
                "is committed; once the registry answers (option schemaRegistryUrl; "
                "schemaRegistryTimeoutMs is how long it is retried) a restart reads it again"
            ) from None
        if isinstance(row, Poison):
            if dead is None:
                raise PoisonRecordError(*_where(batch, i), row, range_start)
            dead.append(_dead_record(batch, i, row))
            continue
        rows.append(row)
        kept.append(i)
    if len(kept) < batch.num_rows:
        batch = batch.take(pa.array(kept, pa.int64()))
    column = arrow_column(rows, decoder.column_type)
    index = batch.schema.get_field_index("value")
    return batch.set_column(index, pa.field("value", column.type), column)


def _dead_record(batch: Any, i: int, poison: Poison) -> DeadRecord:
    """Row `i` as it was read, and why it cannot be decoded."""
    topic, partition, offset = _where(batch, i)
    column = batch.column
    timestamp = column("timestamp")[i].as_py()
    headers = column("headers")[i].as_py() if "headers" in batch.schema.names else None
    return DeadRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp=int(timestamp.timestamp() * 1000) if timestamp is not None else None,
        key=column("key")[i].as_py(),
        value=column("value")[i].as_py(),
        reason=poison.reason,
        message=poison.message,
        headers=[(h["key"], h["value"]) for h in headers or []],
    )


def _where(batch: Any, i: int) -> tuple[str, int, int]:
    """The topic, partition and offset of row `i`."""
    column = batch.column
    return column("topic")[i].as_py(), column("partition")[i].as_py(), column("offset")[i].as_py()
