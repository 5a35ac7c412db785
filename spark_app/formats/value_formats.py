"""The value formats a schema registry describes, each a small plug-in behind one seam.

Every format shares the Confluent wire format's header (magic byte 0, the writer's schema id),
the poison reasons (`spark_app.formats.poison`), the writer-schema cache per id and the dead-letter
handling: all in `spark_app.formats.decoding`. What differs is one module per format, named here by
the option value (`valueFormat=<name>`) and imported only when a query uses it. Such a module
gives:

- `SCHEMA_TYPE`: the registry's `schemaType` of its schemas ("AVRO", "JSON", "PROTOBUF"); a
  record whose writer schema id is of another type is poison (`unresolvable-schema`);
- `pinned_reader(found, client, message) -> RegisteredSchema`: the reader schema as the
  query keeps it, made once on the driver at query start: what it needs beyond its own text
  fetched and fixed there (Protobuf: the files it imports, compiled, and the message chosen,
  `message` being option valueMessageName; `client` is None for a schema given inline).
  Avro and JSON keep the schema as found. Raises `InvalidSchema` / `UnsupportedSchema`;
- `column_type(reader: RegisteredSchema) -> DataType`: the Spark type of the (pinned) reader
  schema, asked on the driver at query start; raises `UnsupportedSchema` naming the field
  that has no column shape (the query does not start);
- `payload_decoder(reader, client) -> PayloadDecoder`: what the executors decode one payload
  with (below); `client` is the registry, for what writer schemas import.

A new format is one such module, named `<format>_values`, plus its name in
`spark_app.api.decoding_options.FORMATS` (and the spec's enum,
`spark_app.api.value_spec.ValueSpec.format`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol, cast

from spark_app.api.decoding_options import FORMATS as DECODED

if TYPE_CHECKING:
    from spark_app.formats.schema_registry_client import RegisteredSchema, SchemaRegistryClient

# A pyspark DataType; not imported here: the format modules import what they need.
DataType = Any

# valueFormat option value -> the module that decodes it: <format>_values in this folder
FORMATS: dict[str, str] = {name: f"spark_app.formats.{name}_values" for name in DECODED}


class UnsupportedSchema(ValueError):
    """A reader schema that is not valid, or has no Spark column shape here: names the field
    and what cannot map."""


class InvalidSchema(UnsupportedSchema):
    """A reader schema that is not a valid schema of the format at all; the message reads
    "not a valid <format> schema: <why>"."""


class PayloadDecoder(Protocol):
    """One format's decoding of payloads (the bytes after the 5-byte header) to one reader
    schema. Neither method raises for a bad record: it returns a `Poison`."""

    column_type: DataType  # the reader schema's Spark type: every value is shaped for it

    def writer(self, found: RegisteredSchema) -> Any:
        """A writer schema of this format (already checked to be of SCHEMA_TYPE), in the form
        `read` takes it, or a Poison (`unresolvable-schema`) when it cannot be used. Asked
        once per schema id per process; the reader schema's own id is asked at start."""
        ...

    def read(self, payload: memoryview, schema_id: int, writer: Any) -> Any:
        """The payload of a record written with `writer` (schema id `schema_id`) as a value
        of `column_type` (a dict for a struct), or a Poison."""
        ...

    # Optional, not part of the protocol's type: `read_batch(payloads: list[memoryview |
    # None]) -> pyarrow.Array | None`, the payloads of a batch all written with the reader
    # schema itself (None: a null value) as the column's Arrow array at once, or None to go
    # record by record through `read` (which names the poison record). `avro_values` has one.


class FormatModule(Protocol):
    """What a format's module gives (see the module's docstring)."""

    SCHEMA_TYPE: str

    def pinned_reader(
        self, found: RegisteredSchema, client: SchemaRegistryClient | None, message: str | None
    ) -> RegisteredSchema: ...

    def column_type(self, reader: RegisteredSchema) -> DataType: ...

    def payload_decoder(
        self, reader: RegisteredSchema, client: SchemaRegistryClient | None
    ) -> PayloadDecoder: ...


def format_module(name: str) -> FormatModule:
    """The module of a decoded value format (`valueFormat`), imported on first use."""
    if name not in FORMATS:
        raise ValueError(f"value format {name!r} is not one of {', '.join(FORMATS)}")
    return cast(FormatModule, importlib.import_module(FORMATS[name]))
