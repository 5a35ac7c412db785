"""A decoded valueFormat (avro, json) on the driver: the reader schema, pinned once when the
query starts.

`KafkaCheckpointedDataSource.schema()` resolves it (a pinned subject version, or the
subject's latest at that moment) and keeps it on the data source, which PySpark pickles to
the planning processes: so the `value` column's type that Spark checks batches against and
the schema executors decode with are one answer of the registry, never two. Every partition
carries it (`TypedValues`), with the registry's address for writer schemas by id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.types import StructField, StructType

from spark_app.options import ValueDecoding
from spark_app.schema_registry_client import (
    RegisteredSchema,
    RegistryRefused,
    RegistryUnavailable,
)


@dataclass(frozen=True)
class TypedValues:
    """What executors need to decode values: the registry and the pinned reader schema."""

    decoding: ValueDecoding
    reader: RegisteredSchema = field(repr=False)  # its text is long; the repr names its id

    def __repr__(self) -> str:
        return f"TypedValues({self.describe()})"

    def describe(self) -> str:
        return (
            f"subject {self.decoding.subject!r} version {self.reader.version} "
            f"(schema id {self.reader.schema_id})"
        )


def at_query_start(decoding: ValueDecoding) -> TypedValues:
    """The reader schema from the registry; every failure is a ReaderSchemaError naming the
    option to fix."""
    from spark_app.decoding import ReaderSchemaError, resolve_reader_schema

    client = decoding.registry_client()
    try:
        reader = resolve_reader_schema(client, decoding.subject, decoding.version, decoding.format)
    except RegistryUnavailable as exc:
        raise ReaderSchemaError(
            f"valueFormat={decoding.format} needs the reader schema at query start, but {exc}. "
            f"Start the registry or fix option schemaRegistryUrl={decoding.registry_url!r} "
            f"(the driver must reach it); schemaRegistryTimeoutMs={decoding.registry_timeout_ms} "
            "is how long it is retried"
        ) from None
    except RegistryRefused as exc:
        raise ReaderSchemaError(
            f"valueFormat={decoding.format} needs the reader schema at query start, but {exc}: "
            "fix options schemaRegistryUser / schemaRegistryPassword, or schemaRegistryUrl's path"
        ) from None
    return TypedValues(decoding, reader)


def source_schema(raw: StructType, values: TypedValues) -> StructType:
    """The source's columns with `value` the reader schema's type (for Avro, what from_avro
    gives)."""
    from spark_app.decoding import reader_column_type

    column_type = reader_column_type(values.reader, values.decoding.format)
    value = StructField("value", column_type, nullable=True)
    return StructType([value if f.name == "value" else f for f in raw.fields])
