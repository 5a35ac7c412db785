"""Values in the Confluent wire format, decoded to one reader schema, whatever the format.

A record's value is a magic byte (0), the writer's schema id (4 bytes, big-endian) and the
payload in the value format (Avro binary, UTF-8 JSON, ...). This module owns what every format
shares: the header, the writer schemas by id (cached: once per id; records written with the
reader schema itself need no registry at all), the poison reasons, and what becomes of a
poison record (the dead-letter topic, or the query fails naming it). The format's own part,
the reader schema's column type and one payload's decoding (optionally a whole batch's, when
every record is of the reader schema's own id), is a plug-in (`spark_app.formats.value_formats`:
`avro_values`, `json_values`, `protobuf_values`). The reader schema is fixed when the query
starts: a pinned subject version, or the subject's latest version at that moment
(`resolve_reader_schema`).

A record that cannot be decoded is *poison*, returned as `Poison` with a reason (one of
POISON_REASONS) and a message naming the cause, never raised: the caller decides whether it
goes to a dead-letter topic or fails the query naming the record. A registry outage is not
poison (the record is fine): `RegistryUnavailable` propagates after the client's retries.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from spark_app.formats import native_avro
from spark_app.formats.avro_types import arrow_column  # Spark type -> Arrow: not Avro's own
from spark_app.formats.poison import (
    BAD_MAGIC_BYTE,
    MALFORMED_PAYLOAD,
    POISON_REASONS,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    DeadRecord,
    Poison,
)
from spark_app.formats.schema_registry_client import (
    RegisteredSchema,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRegistryClient,
)
from spark_app.formats.value_formats import InvalidSchema, UnsupportedSchema, format_module

__all__ = [  # the reasons and Poison live in spark_app.formats.poison; callers know them from here
    "BAD_MAGIC_BYTE",
    "MALFORMED_PAYLOAD",
    "POISON_REASONS",
    "TRUNCATED",
    "UNKNOWN_SCHEMA_ID",
    "UNRESOLVABLE_SCHEMA",
    "AvroDecoder",
    "Poison",
    "PoisonRecordError",
    "ReaderSchemaError",
    "WireDecoder",
    "decode_columns",
    "decode_value_column",
    "inline_reader_schema",
    "reader_column_type",
    "resolve_reader_schema",
]

MAGIC_BYTE = 0
HEADER_SIZE = 5  # magic byte + 4-byte schema id


def wire_header(schema_id: int) -> bytes:
    """The Confluent wire format's header of a record written with schema `schema_id`."""
    return struct.pack(">BI", MAGIC_BYTE, schema_id)


class ReaderSchemaError(ValueError):
    """The reader schema cannot be had (no such subject or version, of another format, not
    valid, or with no column shape)."""


def resolve_reader_schema(
    client: SchemaRegistryClient,
    subject: str,
    version: int | str = "latest",
    value_format: str = "avro",
    message: str | None = None,
    column: str = "value",
) -> RegisteredSchema:
    """The reader schema of the `column` (value or key), once at query start; the answer is
    pinned for the query's life (`message`: Protobuf's reader message, <column>MessageName)."""
    fmt = format_module(value_format)
    try:
        found = client.subject_version(subject, version)
    except SchemaNotFound:
        raise ReaderSchemaError(
            f"subject {subject!r} has no version {version} in the schema registry at "
            f"{client.url}: register the schema or fix {column}Subject / {column}SchemaVersion"
        ) from None
    if found.schema_type.upper() != fmt.SCHEMA_TYPE:
        raise ReaderSchemaError(
            f"subject {subject!r} version {found.version} is {found.schema_type}, not "
            f"{fmt.SCHEMA_TYPE} ({column}Format={value_format})"
        )
    try:
        pinned = fmt.pinned_reader(found, client, message)
        fmt.column_type(pinned)
    except UnsupportedSchema as exc:
        raise ReaderSchemaError(f"subject {subject!r} version {found.version}: {exc}") from None
    return pinned


def inline_reader_schema(
    schema_text: str,
    value_format: str = "avro",
    message: str | None = None,
    option: str = "valueSchema",
) -> RegisteredSchema:
    """The reader schema given in option valueSchema (or keySchema), checked as the
    registry's answer is: a valid schema of the format, of types Spark can hold. Not
    registered: no id, no version."""
    fmt = format_module(value_format)
    found = RegisteredSchema(
        schema_id=None, version=None, schema=schema_text, schema_type=fmt.SCHEMA_TYPE
    )
    try:
        pinned = fmt.pinned_reader(found, None, message)
        fmt.column_type(pinned)
    except InvalidSchema as exc:
        raise ReaderSchemaError(f"option {option} is {exc}: fix the schema text") from None
    except UnsupportedSchema as exc:
        raise ReaderSchemaError(f"option {option}: {exc}") from None
    return pinned


def reader_column_type(reader: RegisteredSchema, value_format: str = "avro") -> Any:
    """The Spark type a reader schema's values decode to."""
    return format_module(value_format).column_type(reader)


class WireDecoder:
    """Decodes wire-format values of one format to the reader schema; `decode` never raises
    for a bad record, only for a registry outage."""

    def __init__(
        self,
        client: SchemaRegistryClient,
        reader: RegisteredSchema,
        value_format: str = "avro",
        native: bool = True,
    ):
        self.client = client
        self.reader = reader
        self.format = format_module(value_format)
        self._payloads = self.format.payload_decoder(reader, client)
        self.column_type = self._payloads.column_type  # the decoded column's Spark type
        # schema id -> the format's writer schema, or Poison; records written with the
        # reader schema itself (the usual case) need no registry at all
        self._writers: dict[int, Any] = {}
        self._own_header = None  # the header of a record written with the reader schema
        self._texts: dict[int, str] = {}  # schema id -> the writer schema's text
        if reader.schema_id is not None:  # an inline reader schema has no id of its own
            self._writers[reader.schema_id] = self._payloads.writer(reader)
            self._texts[reader.schema_id] = reader.schema
            self._own_header = wire_header(reader.schema_id)
        # Avro: whole columns decode in Rust where the native module can give this column
        # (`native=False`: Python alone, what the bench and tests compare it with)
        self.native = None
        if native and value_format == "avro":
            self.native = native_avro.for_reader(reader, self.column_type)

    def decode(self, value: bytes | None) -> Any:
        """The value in the shape of `column_type` (a dict for a struct), a `Poison`, or None
        for a null value (a tombstone is not poison)."""
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
        return self._payloads.read(memoryview(value)[HEADER_SIZE:], schema_id, writer)

    def decode_column(self, column: Any) -> Any:
        """A batch's Arrow column of values decoded whole: in Rust (`spark_app.formats.native_avro`)
        when it can, else through `decode_batch`; None when neither takes it, and `decode`
        takes each record (and names poison)."""
        if self.native is not None:
            decoded = self.native.decode(column, self._writer_text)
            if decoded is not None:
                return decoded
        return self.decode_batch(column.to_pylist())

    def decode_batch(self, values: list[bytes | None]) -> Any:
        """`values` as the column's Arrow array through the format's optional batch path
        (`read_batch`), when every value is null or written with the reader schema itself
        (the usual batch); None otherwise, and `decode` takes each record (and names poison)."""
        read_batch = getattr(self._payloads, "read_batch", None)
        if read_batch is None or self._own_header is None:
            return None
        header = self._own_header
        payloads: list[memoryview | None] = []
        for value in values:
            if value is None:
                payloads.append(None)
            elif value[:HEADER_SIZE] == header:
                payloads.append(memoryview(value)[HEADER_SIZE:])
            else:
                return None
        return read_batch(payloads)

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self._writers:
            self._writers[schema_id] = self._fetch_writer(schema_id)
        return self._writers[schema_id]

    def _writer_text(self, schema_id: int) -> str | None:
        """The writer schema's text (fetched once, as `_writer`), or None for poison."""
        if isinstance(self._writer(schema_id), Poison):
            return None
        return self._texts[schema_id]

    def _fetch_writer(self, schema_id: int) -> Any:
        try:
            found = self.client.schema_by_id(schema_id)
        except SchemaNotFound:
            return Poison(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not registered", schema_id)
        expected = self.format.SCHEMA_TYPE
        if found.schema_type.upper() != expected:
            message = f"schema id {schema_id} is {found.schema_type}, not {expected}"
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)
        self._texts[schema_id] = found.schema
        return self._payloads.writer(found)


class AvroDecoder(WireDecoder):
    """valueFormat=avro's decoder."""

    def __init__(self, client: SchemaRegistryClient, reader: RegisteredSchema, native: bool = True):
        super().__init__(client, reader, "avro", native)


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
            f"{poison.column or 'value'}: {poison.message}. The batch fails and nothing of it "
            "is committed: a restart meets the record again. To skip it, stop the job and move "
            f"the group's offset of {topic}-{partition} to {offset + 1} (an offsets action, "
            f"alter), then start it fresh{skipped}"
        )


def decode_value_column(
    batch: Any,
    decoder: WireDecoder,
    range_start: int | None = None,
    dead: list[DeadRecord] | None = None,
) -> Any:
    """`decode_columns` with the value column alone."""
    return decode_columns(batch, {"value": decoder}, range_start, dead)


def decode_columns(
    batch: Any,
    decoders: dict[str, WireDecoder],
    range_start: int | None = None,
    dead: list[DeadRecord] | None = None,
) -> Any:
    """An Arrow record batch of the source's columns with each column of `decoders` (value,
    key) decoded into its reader schema's column type; raises RegistryUnavailable naming the
    record whose writer schema could not be fetched. A record of which one column cannot be
    decoded raises PoisonRecordError, or, given a `dead` list (a dead-letter topic takes
    them), is left out and appended to it with its original bytes."""
    import pyarrow as pa

    whole = {}
    for name, decoder in decoders.items():  # the usual batch: every column decodes whole
        whole[name] = decoder.decode_column(batch.column(name))
        if whole[name] is None:
            break
    else:
        for name, column in whole.items():
            index = batch.schema.get_field_index(name)
            batch = batch.set_column(index, pa.field(name, column.type), column)
        return batch
    raw = {name: batch.column(name).to_pylist() for name in decoders}
    columns: dict[str, list[Any]] = {name: [] for name in decoders}
    kept = []
    for i in range(batch.num_rows):
        row = _decode_row(batch, i, decoders, raw)
        if isinstance(row, Poison):
            if dead is None:
                raise PoisonRecordError(*_where(batch, i), row, range_start)
            dead.append(_dead_record(batch, i, row))
            continue
        for name, decoded in row.items():
            columns[name].append(decoded)
        kept.append(i)
    if len(kept) < batch.num_rows:
        batch = batch.take(pa.array(kept, pa.int64()))
    for name, decoder in decoders.items():
        column = arrow_column(columns[name], decoder.column_type)
        index = batch.schema.get_field_index(name)
        batch = batch.set_column(index, pa.field(name, column.type), column)
    return batch


def _decode_row(
    batch: Any, i: int, decoders: dict[str, WireDecoder], raw: dict[str, list[Any]]
) -> dict[str, Any] | Poison:
    """Row `i`'s decoded columns, or the first column's Poison (naming that column)."""
    row = {}
    for name, decoder in decoders.items():
        try:
            decoded = decoder.decode(raw[name][i])
        except RegistryUnavailable as exc:
            topic, partition, offset = _where(batch, i)
            raise RegistryUnavailable(
                f"{topic}-{partition} offset {offset}: {exc}. The batch fails and "
                "nothing of it is committed; once the registry answers (option "
                "schemaRegistryUrl; schemaRegistryTimeoutMs is how long it is retried) a "
                "restart reads it again"
            ) from None
        if isinstance(decoded, Poison):
            return dataclasses.replace(decoded, column=name)
        row[name] = decoded
    return row


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
        column=poison.column,
        headers=[(h["key"], h["value"]) for h in headers or []],
    )


def _where(batch: Any, i: int) -> tuple[str, int, int]:
    """The topic, partition and offset of row `i`."""
    column = batch.column
    return column("topic")[i].as_py(), column("partition")[i].as_py(), column("offset")[i].as_py()
