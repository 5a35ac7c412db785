"""The typed Kafka sink's Protobuf: a proto3 schema from the query's value column (a Spark struct
in its JSON form), as a Confluent serializer would register for such a message, and the
encoding of the column's values with the compiled schema on the executors.

The mapping is the reverse of the reader's (`protobuf_types`), so a record written here reads
back as the same value: string, bytes (binary), bool, int32 (byte, short, integer), int64
(long), float, double, google.protobuf.Timestamp (timestamp); a struct is a nested message;
an array `repeated`; a map `map<K, V>` with string, integral or boolean keys. A nullable
scalar is a proto3 `optional` (it has presence: null is unset); a message field has presence
of its own. Protobuf has no null element and no null list: arrays and maps that may hold a
null are refused (drop them with `array_compact` / `map_filter` in spec.job.sql), and a null
array or map is written empty. date, timestamp_ntz, decimal and arrays of arrays have no
Protobuf form here: refused, naming the field, before the query reads (`UnwritableType`).

The message is the file's first, so each record's message indexes are the single byte 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_app.formats.writer_schemas import UnwritableType

_SCALARS = {
    "string": "string",
    "binary": "bytes",
    "boolean": "bool",
    "byte": "int32",
    "short": "int32",
    "integer": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
}
TIMESTAMP = "google.protobuf.Timestamp"
_MAP_KEYS = {"string", "byte", "short", "integer", "long", "boolean"}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIX = "cast it in spec.job.sql"


def protobuf_schema(struct: dict[str, Any], name: str) -> str:
    """The proto3 file of a Spark struct (its JSON form): one top-level message `name`."""
    imports: set[str] = set()
    body = _Message(imports, indent="").lines(struct, name, name)
    head = ['syntax = "proto3";', ""]
    if imports:
        head[1:1] = ["", *(f'import "{path}";' for path in sorted(imports))]
    return "\n".join([*head, *body, ""])


@dataclass
class _Message:
    """One message being written: the file's imports, its indent, and the messages nested in
    it (one per struct field, named after the field and unique in it)."""

    imports: set[str]
    indent: str
    nested: list[str] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)

    def lines(self, struct: dict[str, Any], name: str, path: str) -> list[str]:
        fields = []
        for number, f in enumerate(struct["fields"], start=1):
            where = f"{path}.{f['name']}"
            if not _IDENTIFIER.match(f["name"]):
                raise UnwritableType(f"{where}: {f['name']!r} is no Protobuf field name; rename it")
            label, kind = self._field(f, where)
            fields.append(f"{self.indent}  {label}{kind} {f['name']} = {number};")
        return [f"{self.indent}message {name} {{", *self.nested, *fields, f"{self.indent}}}"]

    def _field(self, f: dict[str, Any], path: str) -> tuple[str, str]:
        """A field's label (`optional `, `repeated ` or none) and type."""
        kind = f["type"]
        if isinstance(kind, dict) and kind["type"] == "array":
            if kind["containsNull"]:
                raise UnwritableType(f"{path}: a repeated field holds no null; use array_compact")
            element = kind["elementType"]
            if isinstance(element, dict) and element["type"] in ("array", "map"):
                raise UnwritableType(f"{path}: Protobuf has no list of {element['type']}s; {_FIX}")
            return "repeated ", self._single(element, f["name"], path)
        if isinstance(kind, dict) and kind["type"] == "map":
            if kind["valueContainsNull"]:
                raise UnwritableType(f"{path}: a map field holds no null value; use map_filter")
            if kind["keyType"] not in _MAP_KEYS:
                raise UnwritableType(f"{path}: a Protobuf map's keys are not {kind['keyType']}")
            value = kind["valueType"]
            if isinstance(value, dict) and value["type"] in ("array", "map"):
                raise UnwritableType(f"{path}: a Protobuf map's values are no {value['type']}s")
            return "", f"map<{_SCALARS[kind['keyType']]}, {self._single(value, f['name'], path)}>"
        scalar = isinstance(kind, str) and kind in _SCALARS
        label = "optional " if scalar and f.get("nullable", True) else ""
        return label, self._single(kind, f["name"], path)

    def _single(self, kind: Any, name: str, path: str) -> str:
        """The type of one value (an element, a map's value) of field `name`."""
        if isinstance(kind, str) and kind in _SCALARS:
            return _SCALARS[kind]
        if kind == "timestamp":
            self.imports.add("google/protobuf/timestamp.proto")
            return TIMESTAMP
        if isinstance(kind, dict) and kind["type"] == "struct":
            message = self._message_name(name)
            inner = _Message(self.imports, self.indent + "  ")
            self.nested.extend(inner.lines(kind, message, path))
            return message
        shown = kind if isinstance(kind, str) else kind["type"]
        raise UnwritableType(f"{path}: Protobuf has no type for Spark's {shown} here; {_FIX}")

    def _message_name(self, name: str) -> str:
        """A nested message's name from its field's (`address` -> `Address`)."""
        base = name[0].upper() + name[1:]
        message, n = base, 1
        while message in self.taken:
            n += 1
            message = f"{base}{n}"
        self.taken.add(message)
        return message


class ProtobufEncoder:
    """One record's message bytes from the column's value: the compiled schema's first
    message (its FileDescriptorSet, serialized, from the driver), filled field by field by
    setters made once from its descriptor (Protobuf checks each value's type as it is set).
    It travels pickled to the executors: what does not pickle is made on first use."""

    def __init__(self, descriptor_set: bytes, value_type: Any):
        self.descriptor_set, self.value_type = descriptor_set, value_type
        self._new: Any = None
        self._fill: Filler | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_new": None, "_fill": None}

    def encode(self, plain: dict[str, Any]) -> bytes:
        if self._new is None or self._fill is None:
            self._new = _first_message_class(self.descriptor_set)
            self._fill = _filler(self._new.DESCRIPTOR)
        message = self._new()
        self._fill(message, plain)
        return message.SerializeToString()


def _first_message_class(descriptor_set: bytes) -> Any:
    """The class of the first top-level message of the set's last file (the schema's own)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file
    pool = descriptor_pool.DescriptorPool()
    for file in files:
        pool.AddSerializedFile(file.SerializeToString())
    main = files[-1]
    name = main.message_type[0].name
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{main.package}.{name}" if main.package else name)
    )


Filler = Callable[[Any, Any], None]  # (a message, a value) -> the message filled


def _filler(descriptor: Any) -> Filler:
    """Sets each field of a message of `descriptor` from a dict's non-null values (null:
    left unset; a list or a map: written empty)."""
    setters = [(fd.name, _setter(fd)) for fd in descriptor.fields]

    def fill(message: Any, value: dict[str, Any]) -> None:
        for name, set_field in setters:
            if (item := value.get(name)) is not None:
                set_field(message, item)

    return fill


def _setter(fd: Any) -> Filler:
    """Sets field `fd` (its FieldDescriptor) of a message from a non-null value."""
    name = fd.name
    if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
        entry = fd.message_type.fields_by_name["value"]
        if entry.message_type is None:
            return lambda message, items: getattr(message, name).update(items)
        into = _into(entry.message_type)
        return lambda message, items: _each_entry(getattr(message, name), items, into)
    if fd.is_repeated:
        if fd.message_type is None:
            return lambda message, items: getattr(message, name).extend(items)
        into = _into(fd.message_type)
        return lambda message, items: _each_added(getattr(message, name), items, into)
    if fd.message_type is not None:
        into = _into(fd.message_type)
        return lambda message, item: into(getattr(message, name), item)
    return lambda message, item: setattr(message, name, item)


def _into(message_type: Any) -> Filler:
    """Fills a (sub)message of `message_type`: a Timestamp from a datetime (naive: UTC, as
    Spark's instants), a nested message from a dict (set even when all its fields are null)."""
    if message_type.full_name == TIMESTAMP:
        return lambda target, item: target.FromDatetime(item)
    fill = _filler(message_type)

    def into(target: Any, item: dict[str, Any]) -> None:
        target.SetInParent()
        fill(target, item)

    return into


def _each_added(repeated: Any, items: list, into: Filler) -> None:
    for item in items:
        into(repeated.add(), item)


def _each_entry(entries: Any, items: dict, into: Filler) -> None:
    for key, item in items.items():
        into(entries[key], item)
