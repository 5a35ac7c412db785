"""valueFormat=protobuf: Protobuf records (a `spark_app.formats.value_formats` plug-in).

The payload after the wire header (`spark_app.formats.decoding`) begins with the *message indexes*,
then the Protobuf binary of the message. The indexes say which message of the writer's
`.proto` file wrote it: a count, then that many indexes, each a zigzag varint (as Confluent's
serializer writes them); the first index picks among the file's top-level messages, each
next one among the nested messages of the one before; a count of 0 (a single 0 byte, the
serializer's shorthand) means [0], the file's first message.

The reader is pinned when the query starts (`pinned_reader`): the reader schema (a subject's
version, or `.proto` text given inline) and the message in it, the first top-level one or one
named by full name (option valueMessageName); its descriptors are compiled then, on the
driver (`protobuf_schema`), and travel with it (`ProtobufReaderSchema`). A record decodes
when the message its indexes name in the writer's schema (fetched by id, compiled once per
id) has the reader message's full name; its payload is then parsed with the *reader's*
descriptor, so Protobuf's own compatibility applies: fields the reader does not know are
skipped, fields the writer did not send are their default (or null, for fields with
presence: `protobuf_types`).

Poison (besides the header's, `spark_app.formats.decoding`): `truncated` (the message indexes end
early or are not valid varints); `unresolvable-schema` (the writer schema does not compile,
the indexes name no message, or another message than the reader's); `malformed-payload`
(Protobuf cannot parse the payload, a truncated one included, or a value has no column form,
such as a timestamp past year 9999).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError

from spark_app.formats.poison import MALFORMED_PAYLOAD, TRUNCATED, UNRESOLVABLE_SCHEMA, Poison
from spark_app.formats.protobuf_schema import (
    CompiledSchema,
    ProtobufSchemaError,
    compile_schema,
    message_at,
    message_names,
)
from spark_app.formats.protobuf_types import UnsupportedProtobufSchema, converter, spark_type
from spark_app.formats.schema_registry_client import RegisteredSchema, SchemaRegistryClient
from spark_app.formats.value_formats import InvalidSchema, UnsupportedSchema

SCHEMA_TYPE = "PROTOBUF"
_MAX_VARINT_BYTES = 5  # a 32-bit varint, as Confluent's serializer writes an index


@dataclass(frozen=True)
class ProtobufReaderSchema(RegisteredSchema):
    """The pinned reader: the registered (or inline) schema, the message values decode to
    (full name), and its compiled descriptors (so executors need no compiler for it).
    Hashable and picklable: a key of the executors' per-process decoders."""

    message: str = ""
    compiled: CompiledSchema = field(default=CompiledSchema(b""), repr=False)

    def descriptor(self) -> Descriptor:
        return _pool(self.compiled).FindMessageTypeByName(self.message)


def pinned_reader(
    found: RegisteredSchema, client: SchemaRegistryClient | None, message: str | None
) -> ProtobufReaderSchema:
    """`found` compiled with what it imports (through `client`; None: an inline schema,
    which can import only Google's well-known types) and `message` chosen in it (a full name
    such as `shop.Order`; None: the first top-level message). Raises InvalidSchema for text
    protoc rejects, UnsupportedSchema for a message that is not there."""
    if isinstance(found, ProtobufReaderSchema):
        return found
    try:
        compiled = compile_schema(client, found)
    except ProtobufSchemaError as exc:
        raise InvalidSchema(f"not a valid Protobuf schema: {exc}") from None
    names = message_names(compiled.main_file())
    if not names:
        raise UnsupportedSchema("defines no message: the value column is a message's struct")
    if message is not None and message not in names:
        raise UnsupportedSchema(
            f"has no top-level message {message!r}; it has {', '.join(names)} (option "
            "valueMessageName: the message's full name, package included)"
        )
    as_found = {f.name: getattr(found, f.name) for f in fields(RegisteredSchema)}
    return ProtobufReaderSchema(**as_found, message=message or names[0], compiled=compiled)


def column_type(reader: RegisteredSchema) -> Any:
    """The Spark type values decode to (Spark's from_protobuf mapping); raises
    UnsupportedSchema naming a field that has no column shape (a recursive message)."""
    try:
        return spark_type(_pinned(reader).descriptor())
    except UnsupportedProtobufSchema as exc:
        raise UnsupportedSchema(str(exc)) from None


def payload_decoder(
    reader: RegisteredSchema, client: SchemaRegistryClient | None = None
) -> ProtobufPayloads:
    return ProtobufPayloads(_pinned(reader), client)


def _pinned(reader: RegisteredSchema) -> ProtobufReaderSchema:
    """The reader as `pinned_reader` made it (a schema of no imports is compiled here)."""
    return pinned_reader(reader, None, None)


class _Writer:
    """A writer schema id's main file, to follow message indexes in (each index list is
    followed once: the same few repeat record after record)."""

    def __init__(self, compiled: CompiledSchema):
        self._file = compiled.main_file()
        self._names: dict[tuple[int, ...], str | None] = {}

    def message(self, indexes: tuple[int, ...]) -> str | None:
        if indexes not in self._names:
            self._names[indexes] = message_at(self._file, list(indexes))
        return self._names[indexes]


class ProtobufPayloads:
    """Message indexes and a Protobuf payload, parsed with the reader message's descriptor."""

    def __init__(self, reader: ProtobufReaderSchema, client: SchemaRegistryClient | None):
        self._reader = reader
        self._client = client  # for what a writer schema imports
        descriptor = reader.descriptor()
        self.column_type = spark_type(descriptor)
        self._message_class = message_factory.GetMessageClass(descriptor)
        self._convert = converter(descriptor)

    def writer(self, found: RegisteredSchema) -> _Writer | Poison:
        if isinstance(found, ProtobufReaderSchema):  # the reader's own id: compiled already
            return _Writer(found.compiled)
        try:
            return _Writer(compile_schema(self._client, found))
        except ProtobufSchemaError as exc:
            message = f"schema id {found.schema_id} is not a valid Protobuf schema: {exc}"
            return Poison(UNRESOLVABLE_SCHEMA, message, found.schema_id)

    def read(self, payload: memoryview, schema_id: int, writer: _Writer) -> Any:
        try:
            indexes, start = read_message_indexes(payload)
        except MessageIndexError as exc:
            return Poison(TRUNCATED, f"{exc} (schema id {schema_id})", schema_id)
        name = writer.message(tuple(indexes))
        if name != self._reader.message:
            return Poison(UNRESOLVABLE_SCHEMA, self._other(name, indexes, schema_id), schema_id)
        return self._parse(payload[start:], schema_id)

    def _other(self, name: str | None, indexes: list[int], schema_id: int) -> str:
        if name is None:
            return f"message indexes {indexes} name no message in schema id {schema_id}"
        return (
            f"schema id {schema_id} wrote message {name} (indexes {indexes}), "
            f"not the reader's {self._reader.message}"
        )

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


# -- the message indexes -----------------------------------------------------------------


class MessageIndexError(ValueError):
    """The message indexes at the payload's start are cut short or are not valid varints."""


def read_message_indexes(payload: bytes | memoryview) -> tuple[list[int], int]:
    """The message indexes the payload begins with, and where the message begins."""
    count, at = _zigzag_varint(payload, 0)
    if count < 0:
        raise MessageIndexError(f"message index count {count} is negative")
    if count == 0:
        return [0], at  # the serializer's shorthand for the file's first message
    indexes = []
    for _ in range(count):
        index, at = _zigzag_varint(payload, at)
        if index < 0:
            raise MessageIndexError(f"message index {index} is negative")
        indexes.append(index)
    return indexes, at


def _zigzag_varint(payload: bytes | memoryview, at: int) -> tuple[int, int]:
    """One zigzag-encoded varint of at most 32 bits at `at`: (its value, the next position)."""
    raw = shift = 0
    for i in range(_MAX_VARINT_BYTES):
        if at + i >= len(payload):
            raise MessageIndexError(
                f"the message indexes end at payload byte {at + i}, inside a varint"
            )
        byte = payload[at + i]
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at + i + 1
        shift += 7
    raise MessageIndexError(f"a message index varint at payload byte {at} is longer than 5 bytes")


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
