"""valueFormat=json: JSON Schema records (a `spark_app.formats.value_formats` plug-in).

The payload after the wire header is a UTF-8 JSON document; the writer schema id only has to
name a JSON schema in the registry (a JSON document describes itself: the writer schema is not
needed to read it). Each document is read in the reader schema's shape
(`spark_app.formats.json_schema_types`): properties the reader does not know are dropped, missing
ones get the reader's `default` (else null), then the result is validated against the reader schema
(the `jsonschema` package, the draft its `$schema` names, 2020-12 by default) and converted to
the column's values. So records of older and newer schemas read as one shape, as long as they
are valid for the reader.

Poison: not UTF-8 JSON -> `malformed-payload`; invalid for the reader schema, or a value that
does not fit its column (a `format: date` that is not a date) -> `unresolvable-schema`.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for

from spark_app.formats.json_schema_types import Unfit, UnsupportedJsonSchema, compile_shape
from spark_app.formats.poison import MALFORMED_PAYLOAD, UNRESOLVABLE_SCHEMA, Poison
from spark_app.formats.schema_registry_client import RegisteredSchema, SchemaRegistryClient
from spark_app.formats.value_formats import InvalidSchema, UnsupportedSchema

SCHEMA_TYPE = "JSON"


def pinned_reader(
    found: RegisteredSchema, client: SchemaRegistryClient | None, message: str | None
) -> RegisteredSchema:
    """A JSON Schema reader is its text alone: kept as found."""
    return found


def column_type(reader: RegisteredSchema) -> Any:
    """The Spark type of the reader schema's documents; raises UnsupportedSchema."""
    return JsonPayloads(reader).column_type


def payload_decoder(
    reader: RegisteredSchema, client: SchemaRegistryClient | None = None
) -> JsonPayloads:
    """`client` is not needed: a writer schema is its own text (no references)."""
    return JsonPayloads(reader)


class JsonPayloads:
    """UTF-8 JSON payloads read in the reader schema's shape and checked against it."""

    def __init__(self, reader: RegisteredSchema):
        root = _schema(reader.schema)
        validator_class = validator_for(root, default=Draft202012Validator)
        try:
            validator_class.check_schema(root)
            self._shape = compile_shape(root)
        except SchemaError as exc:
            raise InvalidSchema(f"not a valid JSON Schema: {exc.message}") from None
        except UnsupportedJsonSchema as exc:
            raise UnsupportedSchema(str(exc)) from None
        self._validator = validator_class(root)
        self.column_type = self._shape.data_type

    def writer(self, found: RegisteredSchema) -> Any:
        """Only checked to be JSON: documents are read with the reader schema alone."""
        try:
            return _schema(found.schema)
        except UnsupportedSchema as exc:
            return Poison(
                UNRESOLVABLE_SCHEMA, f"schema id {found.schema_id} is {exc}", found.schema_id
            )

    def read(self, payload: memoryview, schema_id: int, writer: Any) -> Any:
        try:
            document = json.loads(bytes(payload).decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            message = f"payload of schema id {schema_id} is not UTF-8 JSON: {exc}"
            return Poison(MALFORMED_PAYLOAD, message, schema_id)
        projected = self._shape.project(document)
        error = best_match(self._validator.iter_errors(projected))
        if error is not None:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
            message = (
                f"a record of schema id {schema_id} fails the reader schema at value{where}: "
                f"{error.message}"
            )
            return Poison(UNRESOLVABLE_SCHEMA, message, schema_id)
        try:
            return self._shape.convert(projected)
        except Unfit as exc:
            return Poison(UNRESOLVABLE_SCHEMA, f"schema id {schema_id}: {exc}", schema_id)


def _schema(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"not a valid JSON Schema: not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
