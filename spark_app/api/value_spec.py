"""Typed records in the job spec: `spec.job.source.value` (the value's format, its reader
schema, the field rules a key shares: spark_app.api.key_spec), with the registry in
spark_app.api.registry_spec and `spec.job.deadLetter` in spark_app.api.dead_letter_spec.
`spark_app.kafka.config` turns them into the source's options (valueFormat,
schemaRegistry*, valueSubject, valueSubjectStrategy, valueRecordName, valueSchemaVersion,
valueSchema, valueMessageName, deadLetter*); the registry's basic-auth credentials come only
from a Secret, as the environment variables SCHEMA_REGISTRY_USERNAME and
SCHEMA_REGISTRY_PASSWORD of the driver and executors (secretKeyRef), never from the manifest;
the CA of an https registry comes from a Secret mounted as a file (schemaRegistryCaFile).

Pure (no pyspark): the operator imports it through `spark_app.api.manifest`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spark_app.api.decoding_options import RECORD_NAME_PATTERN
from spark_app.api.registry_spec import SchemaRegistrySpec
from spark_app.api.spec_base import (
    MAX_TEXT,
    TRIMMED,
    SpecModel,
)

FORMAT_OR_RAW = "(has(self.format) ? self.format : 'raw')"
NEEDS_REGISTRY = (
    "value.schemaRegistry (with its url) is required when value.format is avro, json or "
    "protobuf: the "
    "registry's Confluent-compatible API, http(s)://host:port[/path]"
)
REGISTRY_ONLY = (
    "value.schemaRegistry, value.subject, value.version, value.readerSchema and "
    "value.messageName are used only with value.format avro, json or protobuf: set "
    "value.format or remove them"
)
MAX_READER_SCHEMA = 64 * 1024


def subject_field(description: str) -> Any:
    """A reader schema's subject (the value's or the key's)."""
    return Field(
        default=None, min_length=1, max_length=MAX_TEXT, pattern=TRIMMED, description=description
    )


def version_field(of: str) -> Any:
    """A reader schema's version in its subject."""
    return Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description=f"Version of the {of} in its subject. Unset: the subject's latest when "
        "the epoch starts, pinned in its checkpoint (a restore keeps it; a redeploy, a new "
        "epoch, takes the latest again).",
    )


def reader_schema_field(description: str) -> Any:
    """A reader schema given as its text instead of a subject's version."""
    return Field(default=None, min_length=1, max_length=MAX_READER_SCHEMA, description=description)


READER_SCHEMA_ALONE = (
    "spec.job.source.value.readerSchema is the reader schema itself (no subject is looked "
    "up): remove value.version, value.subject and schemaRegistry.subjectStrategy/recordName, "
    "or remove readerSchema"
)
MESSAGE_NAME_PROTOBUF_ONLY = (
    "spec.job.source.value.messageName is used only with value.format protobuf: set "
    "value.format: protobuf or remove messageName"
)
# The value's and the key's format; the decoded ones are spark_app.formats.value_formats.FORMATS
# (this module stays pure).
ColumnFormat = Literal["raw", "avro", "json", "protobuf"]


class ValueSpec(SpecModel):
    """How record values are read: raw bytes, or Avro, JSON (JSON Schema) or Protobuf in the
    Confluent wire format decoded with schemas from a schema registry into a typed column
    `value`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{FORMAT_OR_RAW} == 'raw' || has(self.schemaRegistry)",
                    "message": NEEDS_REGISTRY,
                },
                {
                    "rule": f"{FORMAT_OR_RAW} != 'raw' || !(has(self.schemaRegistry) || "
                    "has(self.subject) || has(self.version) || has(self.readerSchema) || "
                    "has(self.messageName))",
                    "message": REGISTRY_ONLY,
                },
                {
                    "rule": f"!has(self.messageName) || {FORMAT_OR_RAW} == 'protobuf'",
                    "message": MESSAGE_NAME_PROTOBUF_ONLY,
                    "fieldPath": ".messageName",
                },
                {
                    "rule": "!has(self.readerSchema) || !(has(self.version) || "
                    "has(self.subject) || (has(self.schemaRegistry) && "
                    "(has(self.schemaRegistry.subjectStrategy) || "
                    "has(self.schemaRegistry.recordName))))",
                    "message": READER_SCHEMA_ALONE,
                    "fieldPath": ".readerSchema",
                },
            ]
        }
    )

    format: ColumnFormat = Field(
        default="raw",
        description="raw: the value as bytes; avro: Avro, json: JSON Schema, protobuf: "
        "Protobuf, each in the Confluent wire format (magic byte, schema id, payload), "
        "decoded into a column value of the reader schema's type.",
    )
    schema_registry: SchemaRegistrySpec | None = Field(
        default=None,
        description="The schema registry. Required with format avro, json or protobuf.",
    )
    subject: str | None = subject_field(
        "Subject of the reader schema. Unset: the one schemaRegistry."
        "subjectStrategy names (by default <topic>-value, which needs exactly one topic in "
        "subscribe: Confluent's TopicNameStrategy).",
    )
    version: int | None = version_field("reader schema")
    reader_schema: str | None = reader_schema_field(
        "The reader schema itself, Avro schema JSON of a record, or with format "
        "json a JSON Schema, with format protobuf a .proto file importing only Google's "
        "well-known types (instead of a "
        "subject's version): values decode to its fields; the registry is asked only for "
        "the writer schemas by the ids in the records. Excludes version, subject and "
        "schemaRegistry.subjectStrategy/recordName.",
    )
    message_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=RECORD_NAME_PATTERN,
        description="With format protobuf: the full name (package.Message) of the top-level "
        "message in the reader schema that values decode to. Unset: "
        "schemaRegistry.recordName if set, else the schema's first message.",
    )

    @field_validator("reader_schema")
    @classmethod
    def _reader_schema(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        check_reader_schema(value, info.data.get("format"), "value")
        registry = info.data.get("schema_registry")
        named = registry is not None and (registry.subject_strategy or registry.record_name)
        if info.data.get("version") is not None or info.data.get("subject") or named:
            raise ValueError(READER_SCHEMA_ALONE)
        return value

    @model_validator(mode="after")
    def _check(self) -> ValueSpec:
        if self.format != "raw" and self.schema_registry is None:
            raise ValueError(NEEDS_REGISTRY)
        if self.format == "raw" and (
            self.schema_registry is not None
            or self.subject is not None
            or self.version
            or self.reader_schema is not None
            or self.message_name is not None
        ):
            raise ValueError(REGISTRY_ONLY)
        if self.message_name is not None and self.format != "protobuf":
            raise ValueError(MESSAGE_NAME_PROTOBUF_ONLY)
        return self


def check_reader_schema(text: str, column_format: str | None, column: str) -> None:
    """A readerSchema is JSON of the format's kind: a JSON Schema object, or an Avro record
    (a .proto file is checked by protoc at query start)."""
    if column_format == "protobuf":
        return
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"is not JSON ({exc}): give the schema's JSON") from None
    if column_format == "json":
        if not isinstance(schema, dict):
            raise ValueError("must be a JSON Schema: a JSON object")
    elif not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError(
            'must be an Avro record schema ({"type": "record", "name": ..., "fields": '
            f"[...]}}): the {column} column is a struct of its fields"
        )


# Cross-field rules of the job and source that name these fields (CEL, message).
SUBJECT_NEEDED = (
    "value.subject is required with value.format avro, json or protobuf unless subscribe names "
    "exactly "
    "one topic (then it defaults to <topic>-value, or <topic>-<recordName> with subjectStrategy "
    "topic-record), value.readerSchema is given, or schemaRegistry.subjectStrategy is record"
)
SUBJECT_RULE = (
    "!has(self.value) || (has(self.value.format) ? self.value.format : 'raw') == 'raw' || "
    "has(self.value.subject) || has(self.value.readerSchema) || "
    "(has(self.value.schemaRegistry) && has(self.value.schemaRegistry.subjectStrategy) && "
    "self.value.schemaRegistry.subjectStrategy == 'record') || "
    "(has(self.subscribe) && size(self.subscribe) == 1)"
)


def needs_subject(value: ValueSpec | None, topics: list[str] | None) -> bool:
    """SUBJECT_RULE in Python: decoded values whose reader schema's subject is not known."""
    if value is None or value.format == "raw" or value.subject or value.reader_schema:
        return False
    registry = value.schema_registry
    if registry is not None and registry.subject_strategy == "record":
        return False
    return not (topics is not None and len(topics) == 1)
