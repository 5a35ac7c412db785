"""The schema a typed Kafka sink writes with, from the query's value column (a Spark struct, in
its JSON form: `StructType.jsonValue()`): an Avro record or a JSON Schema object, as a
Confluent serializer would register for such a record, and the check that a pinned schema
takes the struct's fields. Pure (no pyspark), so the mapping is tested without Spark.

Avro: integral types to int or long, float and double, string, bytes, boolean, date
(int/date), timestamp (long/timestamp-micros), timestamp_ntz (local-timestamp-micros),
decimal (bytes/decimal), structs to records (named after their path), arrays, maps with
string keys; a nullable field is a union with null and defaults to null. JSON Schema: the
same with integer and number, strings for dates (format date) and times (format
date-time), base64 strings for bytes, decimals as numbers; a nullable field is a oneOf with
null, a non-nullable one required.
"""

from __future__ import annotations

import json
import re
from typing import Any

_AVRO_PRIMITIVES = {
    "string": "string",
    "binary": "bytes",
    "boolean": "boolean",
    "byte": "int",
    "short": "int",
    "integer": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp_ntz": {"type": "long", "logicalType": "local-timestamp-micros"},
}
_JSON_PRIMITIVES = {
    "string": {"type": "string"},
    "binary": {"type": "string", "contentEncoding": "base64"},
    "boolean": {"type": "boolean"},
    "byte": {"type": "integer"},
    "short": {"type": "integer"},
    "integer": {"type": "integer"},
    "long": {"type": "integer"},
    "float": {"type": "number"},
    "double": {"type": "number"},
    "date": {"type": "string", "format": "date"},
    "timestamp": {"type": "string", "format": "date-time"},
    "timestamp_ntz": {"type": "string", "format": "date-time"},
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
# Avro types a pinned field may have for the struct's (the struct's type first): the
# promotions Avro's own schema resolution allows
_AVRO_TAKES = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "enum"},
    "timestamp-micros": {"timestamp-micros", "timestamp-millis"},
    "local-timestamp-micros": {"local-timestamp-micros", "local-timestamp-millis"},
}


class UnwritableType(ValueError):
    """A column type the format has no place for (a map with non-string keys, an unknown type)."""


def record_name(subject: str) -> str:
    """An Avro name from a subject: orders-out-value -> orders_out_value."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", subject)
    return name if re.match(r"[A-Za-z_]", name) else f"_{name}"


def avro_schema(struct: dict[str, Any], name: str) -> dict[str, Any]:
    """The Avro record of a Spark struct (its JSON form), named `name`."""
    return _avro_record(struct, name)


def _avro_record(struct: dict[str, Any], name: str) -> dict[str, Any]:
    fields = []
    for f in struct["fields"]:
        kind = _avro_type(f["type"], f"{name}_{f['name']}")
        if f.get("nullable", True):
            fields.append({"name": f["name"], "type": ["null", kind], "default": None})
        else:
            fields.append({"name": f["name"], "type": kind})
    return {"type": "record", "name": name, "fields": fields}


def _avro_type(kind: Any, path: str) -> Any:
    if isinstance(kind, str):
        if kind in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[kind]
        if match := _DECIMAL.match(kind):
            precision, scale = int(match.group(1)), int(match.group(2))
            return {"type": "bytes", "logicalType": "decimal", "precision": precision,
                    "scale": scale}  # fmt: skip
        raise UnwritableType(f"{path}: Avro has no type for Spark's {kind}")
    if kind["type"] == "struct":
        return _avro_record(kind, path)
    if kind["type"] == "array":
        items = _avro_type(kind["elementType"], path)
        return {"type": "array", "items": ["null", items] if kind["containsNull"] else items}
    if kind["type"] == "map":
        if kind["keyType"] != "string":
            raise UnwritableType(f"{path}: an Avro map's keys are strings, not {kind['keyType']}")
        values = _avro_type(kind["valueType"], path)
        return {"type": "map", "values": ["null", values] if kind["valueContainsNull"] else values}
    raise UnwritableType(f"{path}: Avro has no type for Spark's {kind['type']}")


def json_schema(struct: dict[str, Any], name: str) -> dict[str, Any]:
    """The JSON Schema object of a Spark struct, titled `name`."""
    return {"title": name, **_json_type(struct, name)}


def _json_type(kind: Any, path: str) -> dict[str, Any]:
    if isinstance(kind, str):
        if kind in _JSON_PRIMITIVES:
            return dict(_JSON_PRIMITIVES[kind])
        if _DECIMAL.match(kind):
            return {"type": "number"}
        raise UnwritableType(f"{path}: JSON Schema has no type for Spark's {kind}")
    if kind["type"] == "struct":
        properties = {
            f["name"]: _nullable(_json_type(f["type"], f"{path}.{f['name']}"), f["nullable"])
            for f in kind["fields"]
        }
        required = [f["name"] for f in kind["fields"] if not f.get("nullable", True)]
        return {"type": "object", "properties": properties, "required": required,
                "additionalProperties": False}  # fmt: skip
    if kind["type"] == "array":
        items = _json_type(kind["elementType"], path)
        return {"type": "array", "items": _nullable(items, kind["containsNull"])}
    if kind["type"] == "map":
        if kind["keyType"] != "string":
            raise UnwritableType(f"{path}: a JSON object's keys are strings, not {kind['keyType']}")
        values = _nullable(_json_type(kind["valueType"], path), kind["valueContainsNull"])
        return {"type": "object", "additionalProperties": values}
    raise UnwritableType(f"{path}: JSON Schema has no type for Spark's {kind['type']}")


def _nullable(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    return {"oneOf": [{"type": "null"}, schema]} if nullable else schema


def pinned_problems(schema_format: str, pinned: str, struct: dict[str, Any]) -> list[str]:
    """Why a pinned schema (its text) cannot take the struct's records: a field it lacks, a
    required field the struct lacks, an Avro type the struct's does not promote to. Empty:
    it takes them."""
    ours = {f["name"]: f for f in struct["fields"]}
    schema = json.loads(pinned)
    if schema_format == "avro":
        theirs = {f["name"]: f for f in schema.get("fields", [])}
        required = {n for n, f in theirs.items() if "default" not in f}
    else:
        theirs = schema.get("properties", {})
        required = set(schema.get("required", []))
    problems = [f"it has no field {n}" for n in ours if n not in theirs]
    problems += [
        f"its field {n} is required and the query has none" for n in required - ours.keys()
    ]
    if schema_format == "avro":
        for name in ours.keys() & theirs.keys():
            want = _avro_type(ours[name]["type"], name)
            if not _avro_takes(want, theirs[name]["type"]):
                problems.append(f"its field {name} is {json.dumps(theirs[name]['type'])}, the "
                                f"query's is {json.dumps(want)}")  # fmt: skip
    return problems


def _avro_takes(ours: Any, theirs: Any) -> bool:
    """Whether a pinned field's type (a union: one of its branches) takes our type: the same
    kind (records, arrays, maps by kind; logical types by name) or a promotion of it."""
    if isinstance(theirs, list):
        return any(_avro_takes(ours, branch) for branch in theirs if branch != "null")
    ours_kind, theirs_kind = _kind(ours), _kind(theirs)
    return theirs_kind in _AVRO_TAKES.get(ours_kind, {ours_kind})


def _kind(avro: Any) -> str:
    if isinstance(avro, str):
        return avro
    return str(avro.get("logicalType") or avro["type"])
