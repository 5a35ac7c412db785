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

import base64
import datetime
import re
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
    message (its FileDescriptorSet, serialized, from the driver) filled through Protobuf's
    own JSON mapping (`json_format.ParseDict`), so every field is checked by its descriptor.
    It travels pickled to the executors: the message class (no pickle) is made on first use."""

    def __init__(self, descriptor_set: bytes, value_type: Any):
        self.descriptor_set, self.value_type = descriptor_set, value_type
        self._new: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_new": None}

    def encode(self, plain: dict[str, Any]) -> bytes:
        from google.protobuf import json_format

        if self._new is None:
            self._new = _first_message_class(self.descriptor_set)
        message = self._new()
        json_format.ParseDict(_json_form(plain, self.value_type), message)
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


def _json_form(value: Any, kind: Any) -> Any:
    """A value in Protobuf's JSON mapping: timestamps RFC 3339, bytes base64, map keys
    strings, a null list or map empty, null fields left out (unset)."""
    if isinstance(kind, dict):
        if kind["type"] == "struct":
            return {
                f["name"]: _json_form(value[f["name"]], f["type"])
                for f in kind["fields"]
                if value.get(f["name"]) is not None
            }
        if kind["type"] == "array":
            return [_json_form(v, kind["elementType"]) for v in value or ()]
        if kind["type"] == "map":
            items = (value or {}).items()
            return {_key(k): _json_form(v, kind["valueType"]) for k, v in items}
    if kind == "binary":
        return base64.b64encode(value).decode()
    if kind == "timestamp":
        return _rfc3339(value)
    return value


def _key(key: Any) -> str:
    return ("true" if key else "false") if isinstance(key, bool) else str(key)


def _rfc3339(value: datetime.datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)  # Spark's timestamps are UTC instants
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
