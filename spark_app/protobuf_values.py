"""Protobuf values in the Confluent wire format, decoded to one reader message.

A record's value is a magic byte (0), the writer's schema id (4 bytes, big-endian), the
*message indexes* and the Protobuf binary payload. The indexes say which message of the
writer's `.proto` file wrote the payload: a count, then that many indexes, each a zigzag
varint (as Confluent's serializer writes them); the first index picks among the file's
top-level messages, each next one among the nested messages of the one before; a count of
0 (a single 0 byte, the serializer's shorthand) means [0], the file's first message.

The reader message is fixed when the query starts (`resolve_reader`): a subject version (a
pinned one, or the latest at that moment) and the message in it, the first top-level one
or one named by full name; its descriptors are compiled then, on the driver
(`protobuf_schema`), and travel with it. A record decodes when the message its indexes name
in the writer's schema (fetched by id, compiled once per id) has the reader message's full
name; its payload is then parsed with the *reader's* descriptor, so Protobuf's own
compatibility applies: fields the reader does not know are skipped, fields the writer did
not send are their default (or null, for fields with presence: `protobuf_types`).

A record that cannot be decoded is a `Poison` (decoding.py's reasons), never raised:
`bad-magic-byte`; `truncated` (shorter than the header, or the message indexes end early or
are not valid varints); `unknown-schema-id`; `unresolvable-schema` (the writer schema is not
Protobuf or does not compile, the indexes name no message, or another message than the
reader's); `malformed-payload` (Protobuf cannot parse the payload, a truncated one
included, or a value has no column form, such as a timestamp past year 9999). A registry
outage is not poison: `RegistryUnavailable` propagates after the client's retries.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError
from pyspark.sql.types import StructType

from spark_app.decoding import (
    BAD_MAGIC_BYTE,
    HEADER_SIZE,
    MAGIC_BYTE,
    MALFORMED_PAYLOAD,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    Poison,
    ReaderSchemaError,
)
from spark_app.protobuf_schema import (
    CompiledSchema,
    ProtobufSchemaError,
    compile_schema,
    message_at,
    message_names,
)
from spark_app.protobuf_types import UnsupportedProtobufSchema, converter, spark_type
from spark_app.schema_registry_client import (
    RegisteredSchema,
    SchemaNotFound,
    SchemaRegistryClient,
)

PROTOBUF = "PROTOBUF"
_MAX_VARINT_BYTES = 5  # a 32-bit varint, as Confluent's serializer writes an index


class MessageIndexError(ValueError):
    """The message indexes after the header are cut short or are not valid varints."""


def read_message_indexes(value: bytes | memoryview, start: int) -> tuple[list[int], int]:
    """The message indexes that begin at `start`, and where the payload begins."""
    count, at = _zigzag_varint(value, start)
    if count < 0:
        raise MessageIndexError(f"message index count {count} is negative")
    if count == 0:
        return [0], at  # the serializer's shorthand for the file's first message
    indexes = []
    for _ in range(count):
        index, at = _zigzag_varint(value, at)
        if index < 0:
            raise MessageIndexError(f"message index {index} is negative")
        indexes.append(index)
    return indexes, at


def _zigzag_varint(value: bytes | memoryview, at: int) -> tuple[int, int]:
    """One zigzag-encoded varint of at most 32 bits at `at`: (its value, the next position)."""
    raw = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if at + i >= len(value):
            raise MessageIndexError(f"the message indexes end at byte {at + i}, inside a varint")
        byte = value[at + i]
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at + i + 1
        shift += 7
    raise MessageIndexError(f"a message index varint at byte {at} is longer than 5 bytes")


def encode_message_indexes(indexes: list[int]) -> bytes:
    """The indexes as Confluent's serializer writes them ([0] as the single byte 0)."""
    if indexes == [0]:
        return b"\x00"
    return b"".join(_zigzag(n) for n in [len(indexes), *indexes])


def _zigzag(n: int) -> bytes:
    raw = (n << 1) ^ (n >> 31)
    out = bytearray()
    while raw > 0x7F:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


@dataclass(frozen=True)
class ProtobufReader:
    """The pinned reader: its registered schema, the message values decode to (full name),
    and its compiled descriptors (so executors need no compiler for it)."""

    registered: RegisteredSchema = field(repr=False)
    message: str
    compiled: CompiledSchema = field(repr=False)

    def __repr__(self) -> str:
        return f"ProtobufReader({self.message}, schema id {self.registered.schema_id})"

    def descriptor(self) -> Descriptor:
        return _pool(self.compiled).FindMessageTypeByName(self.message)

    def column_type(self) -> StructType:
        """The Spark type values decode to (Spark's from_protobuf mapping)."""
        return spark_type(self.descriptor())


def resolve_reader(
    client: SchemaRegistryClient,
    subject: str,
    version: int | str = "latest",
    message: str | None = None,
) -> ProtobufReader:
    """The reader, once at query start (pinned for the query's life): `subject` at `version`,
    and `message` in it (a full name such as `shop.Order`; None: the first top-level
    message). Every failure is a ReaderSchemaError naming what to fix."""
    try:
        found = client.subject_version(subject, version)
    except SchemaNotFound:
        raise ReaderSchemaError(
            f"subject {subject!r} has no version {version} in the schema registry at "
            f"{client.url}: register the schema or fix valueSubject / valueSchemaVersion"
        ) from None
    where = f"subject {subject!r} version {found.version}"
    if found.schema_type.upper() != PROTOBUF:
        raise ReaderSchemaError(f"{where} is {found.schema_type}, not {PROTOBUF}")
    try:
        compiled = compile_schema(client, found)
    except ProtobufSchemaError as exc:
        raise ReaderSchemaError(f"{where} is not a valid Protobuf schema: {exc}") from None
    names = message_names(compiled.main_file())
    if not names:
        raise ReaderSchemaError(f"{where} defines no message")
    if message is not None and message not in names:
        raise ReaderSchemaError(
            f"{where} has no top-level message {message!r}; it has {', '.join(names)} "
            "(give the message's full name, package included)"
        )
    reader = ProtobufReader(found, message or names[0], compiled)
    try:
        reader.column_type()
    except UnsupportedProtobufSchema as exc:
        raise ReaderSchemaError(f"{where}: {exc}") from None
    return reader


@dataclass(frozen=True)
class _Writer:
    """What a writer schema id says: its main file (to follow message indexes in)."""

    schema_id: int
    compiled: CompiledSchema

    def message(self, indexes: list[int]) -> str | None:
        return message_at(self.compiled.main_file(), indexes)


class ProtobufDecoder:
    """Decodes wire-format values to the reader message; `decode` never raises for a bad
    record, only for a registry outage."""

    def __init__(self, client: SchemaRegistryClient, reader: ProtobufReader):
        self.client = client
        self.reader = reader
        descriptor = reader.descriptor()
        self.column_type = spark_type(descriptor)  # the decoded column's Spark type
        self._message_class = message_factory.GetMessageClass(descriptor)
        self._convert = converter(descriptor)
        # schema id -> writer, or Poison; the reader's own id needs no registry
        self._writers: dict[int, _Writer | Poison] = {
            reader.registered.schema_id: _Writer(reader.registered.schema_id, reader.compiled)
        }
        # (schema id, indexes) -> the message's full name: indexes repeat record after record
        self._names: dict[tuple[int, tuple[int, ...]], str | None] = {}

    def decode(self, value: bytes | None) -> Any:
        """The value in the shape of `column_type` (a dict), a `Poison`, or None for a null
        value (a tombstone is not poison)."""
        if value is None:
            return None
        if len(value) < HEADER_SIZE:
            return Poison(TRUNCATED, f"{len(value)} bytes: shorter than the 5-byte header")
        if value[0] != MAGIC_BYTE:
            return Poison(BAD_MAGIC_BYTE, f"magic byte {value[0]}, expected {MAGIC_BYTE}")
        (schema_id,) = struct.unpack_from(">I", value, 1)
        try:
            indexes, start = read_message_indexes(value, HEADER_SIZE)
        except MessageIndexError as exc:
            return Poison(TRUNCATED, f"{exc} (schema id {schema_id})", schema_id)
        unresolved = self._check_message(schema_id, indexes)
        if unresolved is not None:
            return unresolved
        return self._parse(memoryview(value)[start:], schema_id)

    def _check_message(self, schema_id: int, indexes: list[int]) -> Poison | None:
        """None where the indexes name the reader's message in the writer's schema."""
        writer = self._writer(schema_id)
        if isinstance(writer, Poison):
            return writer
        key = (schema_id, tuple(indexes))
        if key not in self._names:
            self._names[key] = writer.message(indexes)
        name = self._names[key]
        if name == self.reader.message:
            return None
        if name is None:
            message = f"message indexes {indexes} name no message in schema id {schema_id}"
        else:
            message = (
                f"schema id {schema_id} wrote message {name} (indexes {indexes}), "
                f"not the reader's {self.reader.message}"
            )
        return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)

    def _writer(self, schema_id: int) -> _Writer | Poison:
        if schema_id not in self._writers:
            self._writers[schema_id] = self._fetch_writer(schema_id)
        return self._writers[schema_id]

    def _fetch_writer(self, schema_id: int) -> _Writer | Poison:
        try:
            found = self.client.schema_by_id(schema_id)
        except SchemaNotFound:
            return Poison(UNKNOWN_SCHEMA_ID, f"schema id {schema_id} is not registered", schema_id)
        if found.schema_type.upper() != PROTOBUF:
            message = f"schema id {schema_id} is {found.schema_type}, not {PROTOBUF}"
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)
        try:
            return _Writer(schema_id, compile_schema(self.client, found))
        except ProtobufSchemaError as exc:
            message = f"schema id {schema_id} is not a valid Protobuf schema: {exc}"
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)

    def _parse(self, payload: memoryview, schema_id: int) -> Any:
        try:
            parsed = self._message_class.FromString(payload)
        except DecodeError as exc:
            message = f"{len(payload)}-byte payload does not parse (schema id {schema_id}): {exc}"
            return Poison(MALFORMED_PAYLOAD, message, schema_id)
        try:
            return self._convert(parsed)
        except (OverflowError, ValueError) as exc:  # e.g. a Timestamp past year 9999
            message = f"a value has no column form (schema id {schema_id}): {exc}"
            return Poison(MALFORMED_PAYLOAD, message, schema_id)


def _pool(compiled: CompiledSchema) -> descriptor_pool.DescriptorPool:
    """A pool of its own per schema: two versions of one file define the same names."""
    pool = descriptor_pool.DescriptorPool()
    for file in compiled.files():
        pool.AddSerializedFile(file.SerializeToString())
    return pool
