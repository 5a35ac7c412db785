"""A decoded column (valueFormat or keyFormat: avro, json, protobuf) on the driver: the
reader schema, pinned once when the query starts.

`KafkaCheckpointedDataSource.schema()` resolves it (a pinned subject version, the
subject's latest at that moment, or the schema given inline in option valueSchema, which
asks the registry nothing) and keeps it on the data source, which PySpark pickles to
the planning processes: so the column's type that Spark checks batches against and the schema
executors decode with are one answer of the registry, never two. Every partition carries it
(`TypedValues`, one for the value and one for the key when both are decoded), with the
registry's address for writer schemas by id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyspark.sql.types import StructField, StructType

from spark_app.api.decoding_options import ValueDecoding
from spark_app.formats.decoding import (
    ReaderSchemaError,
    inline_reader_schema,
    reader_column_type,
    resolve_reader_schema,
)
from spark_app.formats.schema_registry_client import (
    RegisteredSchema,
    RegistryRefused,
    RegistryTLSError,
    RegistryUnavailable,
    client_for,
)


@dataclass(frozen=True)
class TypedValues:
    """What executors need to decode one column (`decoding.column`: value or key): the
    registry and the pinned reader schema."""

    decoding: ValueDecoding
    reader: RegisteredSchema = field(repr=False)  # its text is long; the repr names its id

    def __repr__(self) -> str:
        return f"TypedValues({self.describe()})"

    def describe(self) -> str:
        if self.reader.schema_id is None:
            name = _full_name(self.reader)
            return f"inline reader schema {name} (option {self.decoding.option('Schema')})"
        message = getattr(self.reader, "message", None)  # Protobuf's: one of the file's
        return (
            f"subject {self.decoding.subject!r} version {self.reader.version} "
            f"(schema id {self.reader.schema_id}){f' message {message}' if message else ''}"
        )


def at_query_start(decoding: ValueDecoding) -> TypedValues:
    """The reader schema from the registry; every failure is a ReaderSchemaError naming the
    option to fix."""
    used = f"{decoding.option('Format')}={decoding.format}"
    try:
        client = client_for(decoding)  # reads schemaRegistryCaFile, if any
        if decoding.reader_schema is not None:
            reader = inline_reader_schema(
                decoding.reader_schema,
                decoding.format,
                decoding.message_name,
                decoding.option("Schema"),
            )
            return TypedValues(decoding, reader)
        assert decoding.subject is not None  # options give one when valueSchema is unset
        reader = resolve_reader_schema(
            client,
            decoding.subject,
            decoding.version,
            decoding.format,
            decoding.message_name,
            decoding.column,
        )
    except RegistryTLSError as exc:
        raise ReaderSchemaError(f"{used}: {exc}") from None
    except RegistryUnavailable as exc:
        raise ReaderSchemaError(
            f"{used} needs the reader schema at query start, but {exc}. "
            f"Start the registry or fix option schemaRegistryUrl={decoding.registry_url!r} "
            f"(the driver must reach it); schemaRegistryTimeoutMs={decoding.registry_timeout_ms} "
            "is how long it is retried"
        ) from None
    except RegistryRefused as exc:
        raise ReaderSchemaError(
            f"{used} needs the reader schema at query start, but {exc}: "
            "fix options schemaRegistryUser / schemaRegistryPassword, or schemaRegistryUrl's path"
        ) from None
    return TypedValues(decoding, reader)


def _full_name(reader: RegisteredSchema) -> str:
    """namespace.Name of a record schema's JSON, a JSON Schema's title, or a Protobuf
    reader's message (what a repr can show of a long text)."""
    message = getattr(reader, "message", None)
    if message:
        return str(message)
    schema = json.loads(reader.schema)
    name, namespace = str(schema.get("name") or schema.get("title") or "?"), schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def source_schema(raw: StructType, *typed: TypedValues) -> StructType:
    """The source's columns with each decoded one (`value`, `key`) the reader schema's type
    (for Avro, what from_avro gives)."""
    types = {t.decoding.column: reader_column_type(t.reader, t.decoding.format) for t in typed}
    return StructType(
        [StructField(f.name, types[f.name], nullable=True) if f.name in types else f for f in raw]
    )
