"""The Spark type of a JSON Schema reader schema, and JSON documents shaped to fit it.

The mapping: an object with `properties` is a struct of them in their order (a property is
non-null when it is `required`, or has a `default`, and its type admits no null); an object
with only `additionalProperties: {schema}` is a map of strings to it; `integer` is a long,
`number` a double, `boolean`, `string` (`format: date` a date, `format: date-time` a
timestamp), `array` an array of its `items`; a type array or a `oneOf`/`anyOf` of one type and
`null` is that type, nullable; `enum`/`const` of strings is a string; `$ref` follows a local
pointer (`#/$defs/...`, `#/definitions/...`). Anything else has no column shape and is refused
at query start (`UnsupportedJsonSchema`, naming the field): a recursive `$ref`, a union of
several non-null types, `allOf`, a schema with no type, tuples.

`Shape` is that mapping compiled once per reader schema: `project` keeps a document's known
properties and fills the missing ones that have a `default` (what a reader does not know is
dropped), `convert` turns the validated document into the column's Python values.
"""

from __future__ import annotations

import copy
import datetime
import re
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_SCALARS: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
}
_STRING_FORMATS: dict[str, DataType] = {"date": DateType(), "date-time": TimestampType()}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # RFC 3339 full-date (fromisoformat takes more)
_LONG = (-(2**63), 2**63 - 1)


class UnsupportedJsonSchema(ValueError):
    """A reader schema with no Spark column shape here; names the field."""


class Unfit(ValueError):
    """A valid JSON document whose value does not fit its column (a date that is not one, an
    integer beyond a long); names the field."""


@dataclass(frozen=True)
class Property:
    name: str
    shape: Shape
    default: Any = None
    has_default: bool = False


@dataclass(frozen=True)
class Shape:
    """One node of the reader schema, compiled: its Spark type and how values become it."""

    data_type: DataType
    nullable: bool
    kind: str  # struct, map, array, long, double, date, timestamp, plain
    path: str
    properties: tuple[Property, ...] = ()
    item: Shape | None = field(default=None)

    def project(self, value: Any) -> Any:
        """`value` with only the properties the reader knows, missing ones with a default
        filled in; other values as they are (validation judges them)."""
        if self.kind == "struct" and isinstance(value, dict):
            out = {}
            for p in self.properties:
                if p.name in value:
                    out[p.name] = p.shape.project(value[p.name])
                elif p.has_default:
                    out[p.name] = p.shape.project(copy.deepcopy(p.default))
            return out
        if self.kind == "array" and isinstance(value, list) and self.item is not None:
            return [self.item.project(x) for x in value]
        if self.kind == "map" and isinstance(value, dict) and self.item is not None:
            return {k: self.item.project(x) for k, x in value.items()}
        return value

    def convert(self, value: Any) -> Any:
        """A document valid against the reader schema as the column's value; raises Unfit."""
        if value is None:
            return None
        if self.kind == "struct":
            return {p.name: p.shape.convert(value.get(p.name)) for p in self.properties}
        if self.kind == "array":
            assert self.item is not None
            return [self.item.convert(x) for x in value]
        if self.kind == "map":
            assert self.item is not None
            return {k: self.item.convert(x) for k, x in value.items()}
        if self.kind == "long":
            if not _LONG[0] <= value <= _LONG[1]:
                raise Unfit(f"{self.path}: {value} does not fit a long")
            return int(value)
        if self.kind == "double":
            return float(value)
        if self.kind == "date":
            return _date(value, self.path)
        if self.kind == "timestamp":
            return _timestamp(value, self.path)
        return value


def _date(value: str, path: str) -> datetime.date:
    try:
        if _DATE.match(value):
            return datetime.date.fromisoformat(value)
    except ValueError:
        pass
    raise Unfit(f"{path}: {value!r} is not a date (format date: YYYY-MM-DD)")


def _timestamp(value: str, path: str) -> datetime.datetime:
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise Unfit(f"{path}: {value!r} is not a date-time (RFC 3339)") from None
    if parsed.tzinfo is None:
        raise Unfit(f"{path}: {value!r} has no UTC offset (RFC 3339 date-time needs one)")
    return parsed


def compile_shape(root: Any) -> Shape:
    """The reader schema (parsed JSON) compiled; raises UnsupportedJsonSchema."""
    return _Compiler(root).shape(root, "value", ("#",))  # inside the root: "#" is recursion


class _Compiler:
    def __init__(self, root: Any):
        self.root = root

    def shape(self, schema: Any, path: str, refs: tuple[str, ...]) -> Shape:
        if not isinstance(schema, dict):
            raise UnsupportedJsonSchema(
                f"{path}: the schema {schema!r} admits any value, which has no column shape; "
                "give it a type"
            )
        if "$ref" in schema:
            return self._ref(schema["$ref"], path, refs)
        for union in ("oneOf", "anyOf"):
            if union in schema:
                return self._union(schema[union], union, path, refs)
        if "allOf" in schema:
            raise UnsupportedJsonSchema(f"{path}: allOf has no column shape here; merge it")
        kind, nullable = self._type(schema, path)
        node = self._typed(schema, kind, path, refs)
        return Shape(node.data_type, nullable, node.kind, path, node.properties, node.item)

    def _ref(self, ref: Any, path: str, refs: tuple[str, ...]) -> Shape:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise UnsupportedJsonSchema(
                f"{path}: $ref {ref!r} is not local; only #/$defs/... or #/definitions/... "
                "in the schema itself"
            )
        if ref in refs:
            raise UnsupportedJsonSchema(
                f"{path}: $ref {ref} is recursive (a type that contains itself has no column shape)"
            )
        target: Any = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise UnsupportedJsonSchema(f"{path}: $ref {ref} points at nothing")
            target = target[part]
        return self.shape(target, path, (*refs, ref))

    def _union(self, branches: Any, union: str, path: str, refs: tuple[str, ...]) -> Shape:
        others = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        if len(others) != 1:
            raise UnsupportedJsonSchema(
                f"{path}: {union} with {len(others)} non-null types has no column shape here; "
                'use one type, or one type and {"type": "null"}'
            )
        inner = self.shape(others[0], path, refs)
        nullable = inner.nullable or len(others) < len(branches)
        return Shape(inner.data_type, nullable, inner.kind, path, inner.properties, inner.item)

    def _type(self, schema: dict[str, Any], path: str) -> tuple[str, bool]:
        """The one non-null type a schema names, and whether null is allowed too."""
        kind = schema.get("type")
        if kind is None:
            if "properties" in schema:
                return "object", False
            values = schema.get("enum", [schema["const"]] if "const" in schema else None)
            if values and all(isinstance(v, str) for v in values):
                return "string", False
            raise UnsupportedJsonSchema(
                f"{path}: no type (any JSON value) has no column shape here; give it a type"
            )
        kinds = kind if isinstance(kind, list) else [kind]
        others = [k for k in kinds if k != "null"]
        if len(others) != 1:
            raise UnsupportedJsonSchema(
                f"{path}: type {kind!r} has {len(others)} non-null types and no column shape "
                'here; use one type, or [T, "null"]'
            )
        return others[0], len(others) < len(kinds)

    def _typed(self, schema: dict[str, Any], kind: str, path: str, refs: tuple[str, ...]) -> Shape:
        if kind == "object":
            return self._object(schema, path, refs)
        if kind == "array":
            items = schema.get("items")
            if not isinstance(items, dict) or "prefixItems" in schema:
                raise UnsupportedJsonSchema(
                    f"{path}: an array needs items: one schema (a tuple has no column shape)"
                )
            item = self.shape(items, f"{path}[]", refs)
            return Shape(ArrayType(item.data_type, item.nullable), False, "array", path, item=item)
        if kind == "string" and schema.get("format") in _STRING_FORMATS:
            fmt = schema["format"]
            kind_name = "date" if fmt == "date" else "timestamp"
            return Shape(_STRING_FORMATS[fmt], False, kind_name, path)
        if kind in _SCALARS:
            kind_name = {"integer": "long", "number": "double"}.get(kind, "plain")
            return Shape(_SCALARS[kind], False, kind_name, path)
        raise UnsupportedJsonSchema(f"{path}: type {kind!r} has no column shape here")

    def _object(self, schema: dict[str, Any], path: str, refs: tuple[str, ...]) -> Shape:
        properties = schema.get("properties")
        if not properties:
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                raise UnsupportedJsonSchema(
                    f"{path}: an object with no properties has no column shape here; give it "
                    "properties (a struct) or additionalProperties: a schema (a map)"
                )
            item = self.shape(extra, f"{path}{{}}", refs)
            data_type = MapType(StringType(), item.data_type, item.nullable)
            return Shape(data_type, False, "map", path, item=item)
        required = set(schema.get("required", ()))
        compiled = []
        for name, sub in properties.items():
            shape = self.shape(sub, f"{path}.{name}", refs)
            has_default = isinstance(sub, dict) and "default" in sub
            if name not in required and not has_default and not shape.nullable:
                shape = Shape(shape.data_type, True, shape.kind, shape.path, shape.properties,
                              shape.item)  # fmt: skip
            compiled.append(Property(name, shape, sub.get("default"), has_default))
        fields = [StructField(p.name, p.shape.data_type, p.shape.nullable) for p in compiled]
        return Shape(StructType(fields), False, "struct", path, tuple(compiled))
