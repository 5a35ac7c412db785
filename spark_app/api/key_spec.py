"""`spec.job.source.key`: the key column read like a value (raw, or decoded with the value's
registry), and the rules across it and the value. Pure (no pyspark): the operator imports it.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spark_app.api.spec_base import (
    SpecModel,
)
from spark_app.api.value_spec import (
    FORMAT_OR_RAW,
    ColumnFormat,
    ValueSpec,
    check_reader_schema,
    reader_schema_field,
    subject_field,
    version_field,
)

KEY_SUBJECT_ONLY = (
    "key.subject, key.version and key.readerSchema are used only with key.format avro, json "
    "or protobuf: set key.format or remove them"
)
KEY_READER_SCHEMA_ALONE = (
    "spec.job.source.key.readerSchema is the key's reader schema itself (no subject is looked "
    "up): remove key.version and key.subject, or remove readerSchema"
)


class KeySpec(SpecModel):
    """How record keys are read: raw bytes, or decoded like the value into a typed column
    `key`, with the value's schema registry (value.schemaRegistry: one registry for both)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{FORMAT_OR_RAW} != 'raw' || !(has(self.subject) || has(self.version) "
                    "|| has(self.readerSchema))",
                    "message": KEY_SUBJECT_ONLY,
                },
                {
                    "rule": "!has(self.readerSchema) || !(has(self.version) || has(self.subject))",
                    "message": KEY_READER_SCHEMA_ALONE,
                    "fieldPath": ".readerSchema",
                },
            ]
        }
    )

    format: ColumnFormat = Field(
        default="raw",
        description="raw: the key as bytes; avro: Avro, json: JSON Schema, protobuf: Protobuf "
        "(the schema's first message), each in the Confluent wire format, decoded into a "
        "column key of the reader schema's type (a null key stays null). The schema registry "
        "is the value's (value.schemaRegistry), so a decoded key needs a decoded value too.",
    )
    subject: str | None = subject_field(
        "Subject of the key's reader schema. Unset: <topic>-key (Confluent's "
        "TopicNameStrategy; needs exactly one topic in subscribe). value.schemaRegistry's "
        "subjectStrategy and recordName are the value's only.",
    )
    version: int | None = version_field("key's reader schema")
    reader_schema: str | None = reader_schema_field(
        "The key's reader schema itself, Avro schema JSON of a record, with "
        "format json a JSON Schema, with protobuf a .proto file (instead of a subject's "
        "version). Excludes version and subject.",
    )

    @field_validator("reader_schema")
    @classmethod
    def _reader_schema(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        check_reader_schema(value, info.data.get("format"), "key")
        if info.data.get("version") is not None or info.data.get("subject"):
            raise ValueError(KEY_READER_SCHEMA_ALONE)
        return value

    @model_validator(mode="after")
    def _check(self) -> KeySpec:
        if self.format == "raw" and (
            self.subject is not None or self.version or self.reader_schema is not None
        ):
            raise ValueError(KEY_SUBJECT_ONLY)
        return self


KEY_NEEDS_REGISTRY = (
    "key.format avro, json or protobuf reads the key with the value's schema registry: set "
    "value.format avro, json or protobuf and value.schemaRegistry, or key.format raw"
)
KEY_REGISTRY_RULE = (
    "!has(self.key) || (has(self.key.format) ? self.key.format : 'raw') == 'raw' || "
    "(has(self.value) && has(self.value.schemaRegistry))"
)
KEY_SUBJECT_NEEDED = (
    "key.subject is required with a decoded key.format unless subscribe names exactly one "
    "topic (then it defaults to <topic>-key) or key.readerSchema is given"
)
KEY_SUBJECT_RULE = (
    "!has(self.key) || (has(self.key.format) ? self.key.format : 'raw') == 'raw' || "
    "has(self.key.subject) || has(self.key.readerSchema) || "
    "(has(self.subscribe) && size(self.subscribe) == 1)"
)


def key_problem(key: KeySpec | None, value: ValueSpec | None, topics: list[str] | None) -> str:
    """KEY_REGISTRY_RULE and KEY_SUBJECT_RULE in Python: the message of the one broken, or ""."""
    if key is None or key.format == "raw":
        return ""
    if value is None or value.schema_registry is None:
        return KEY_NEEDS_REGISTRY
    if key.subject or key.reader_schema or (topics is not None and len(topics) == 1):
        return ""
    return KEY_SUBJECT_NEEDED
