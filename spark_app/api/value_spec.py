"""Typed records in the job spec: `spec.job.source.value` (the value's format, the schema
registry and the reader schema) and `spec.job.deadLetter` (where records that cannot be
decoded go). `spark_app.kafka.kafka_config` turns them into the source's options (valueFormat,
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
from spark_app.api.offsets import MAX_TOPIC
from spark_app.api.spec_base import (
    BOOTSTRAP,
    MAX_TEXT,
    TOPIC,
    TRIMMED,
    SpecModel,
    secret_key,
    secret_name,
)

# http(s)://host[:port][/path]: no user info (credentials come from credentialsSecret), no
# query or fragment.
REGISTRY_URL = r"^https?://[A-Za-z0-9._~:\[\]-]+(/[A-Za-z0-9._~/%+=,-]*)?$"

_FORMAT = "(has(self.format) ? self.format : 'raw')"
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


NEEDS_RECORD_NAME = (
    "spec.job.source.value.schemaRegistry.recordName (the value record's full name, "
    "namespace.Name) is required with subjectStrategy record or topic-record"
)
RECORD_NAME_UNUSED = (
    "spec.job.source.value.schemaRegistry.recordName is used only with subjectStrategy record "
    "or topic-record: set subjectStrategy or remove recordName"
)
CA_NEEDS_HTTPS = (
    "spec.job.source.value.schemaRegistry.caSecret needs an https url (an http registry has "
    "no certificate to verify): use https:// or remove caSecret"
)
READER_SCHEMA_ALONE = (
    "spec.job.source.value.readerSchema is the reader schema itself (no subject is looked "
    "up): remove value.version, value.subject and schemaRegistry.subjectStrategy/recordName, "
    "or remove readerSchema"
)
MESSAGE_NAME_PROTOBUF_ONLY = (
    "spec.job.source.value.messageName is used only with value.format protobuf: set "
    "value.format: protobuf or remove messageName"
)
_STRATEGY = "(has(self.subjectStrategy) ? self.subjectStrategy : 'topic')"
# The value's and the key's format; the decoded ones are spark_app.formats.value_formats.FORMATS
# (this module stays pure).
ColumnFormat = Literal["raw", "avro", "json", "protobuf"]


class RegistryCredentialsSecret(SpecModel):
    """Basic-auth credentials for the schema registry, from a Secret in the job's namespace.
    The values reach the driver and executors only as environment variables
    (SCHEMA_REGISTRY_USERNAME, SCHEMA_REGISTRY_PASSWORD) through secretKeyRef; they never
    appear in the job ConfigMap, the driver's arguments, the status or the logs."""

    name: str = secret_name("Name of the Secret in the job's namespace.")
    username_key: str = secret_key("username", "Key of the registry user name in the Secret.")
    password_key: str = secret_key("password", "Key of the registry password in the Secret.")


class RegistryCASecret(SpecModel):
    """The CA certificate (PEM) that signed an https registry's certificate, from a Secret in
    the job's namespace: mounted as a file in the driver and executors (schemaRegistryCaFile)."""

    name: str = secret_name(
        "Name of the Secret in the job's namespace that holds the CA certificate."
    )
    key: str = secret_key("ca.crt", "Key of the PEM CA certificate in the Secret.")


class SchemaRegistrySpec(SpecModel):
    """The schema registry (Confluent-compatible API) the reader and writer schemas come from."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{_STRATEGY} == 'topic' || has(self.recordName)",
                    "message": NEEDS_RECORD_NAME,
                    "fieldPath": ".recordName",
                },
                {
                    "rule": f"{_STRATEGY} != 'topic' || !has(self.recordName)",
                    "message": RECORD_NAME_UNUSED,
                    "fieldPath": ".recordName",
                },
                {
                    "rule": "!has(self.caSecret) || self.url.startsWith('https://')",
                    "message": CA_NEEDS_HTTPS,
                    "fieldPath": ".caSecret",
                },
            ]
        }
    )

    url: str = Field(
        min_length=1,
        max_length=2048,
        pattern=REGISTRY_URL,
        description="The registry's Confluent-compatible API, http(s)://host:port[/path] "
        "(Apicurio: /apis/ccompat/v7). No credentials in the URL: use credentialsSecret.",
    )
    credentials_secret: RegistryCredentialsSecret | None = Field(
        default=None,
        description="Basic-auth user name and password by Secret reference. Unset: no "
        "authentication.",
    )
    timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=3600,
        description="How long an unreachable registry (refused, timeouts, 5xx) is retried, "
        "with backoff, before the job fails with a clear error. Unset: 60.",
    )
    ca_secret: RegistryCASecret | None = Field(
        default=None,
        description="The CA that signed an https registry's certificate, by Secret reference, "
        "mounted into the driver and executors. Unset: the image's system CA bundle. Only "
        "with an https url.",
    )
    subject_strategy: Literal["topic", "record", "topic-record"] | None = Field(
        default=None,
        description="The subject the reader schema is looked up in, as producers' Confluent "
        "serializers register it (their value.subject.name.strategy): topic = "
        "TopicNameStrategy, <topic>-value (needs exactly one topic); record = "
        "RecordNameStrategy, <recordName>; topic-record = TopicRecordNameStrategy, "
        "<topic>-<recordName> (needs exactly one topic). value.subject wins over it. "
        "Unset: topic.",
    )
    record_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=RECORD_NAME_PATTERN,
        description="The value record's full name (Avro: namespace.Name; Protobuf: "
        "package.Message, also the message read unless messageName is set): required with "
        "subjectStrategy record or topic-record, used only with them.",
    )

    @field_validator("ca_secret")
    @classmethod
    def _https_only(cls, value: Any, info: ValidationInfo) -> Any:
        url = info.data.get("url")
        if value is not None and url is not None and not url.startswith("https://"):
            raise ValueError(CA_NEEDS_HTTPS)
        return value

    @model_validator(mode="after")
    def _record_name_with_its_strategy(self) -> SchemaRegistrySpec:
        strategy = self.subject_strategy or "topic"
        if strategy != "topic" and self.record_name is None:
            raise ValueError(NEEDS_RECORD_NAME)
        if strategy == "topic" and self.record_name is not None:
            raise ValueError(RECORD_NAME_UNUSED)
        return self


class ValueSpec(SpecModel):
    """How record values are read: raw bytes, or Avro, JSON (JSON Schema) or Protobuf in the
    Confluent wire format decoded with schemas from a schema registry into a typed column
    `value`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{_FORMAT} == 'raw' || has(self.schemaRegistry)",
                    "message": NEEDS_REGISTRY,
                },
                {
                    "rule": f"{_FORMAT} != 'raw' || !(has(self.schemaRegistry) || "
                    "has(self.subject) || has(self.version) || has(self.readerSchema) || "
                    "has(self.messageName))",
                    "message": REGISTRY_ONLY,
                },
                {
                    "rule": f"!has(self.messageName) || {_FORMAT} == 'protobuf'",
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
                    "rule": f"{_FORMAT} != 'raw' || !(has(self.subject) || has(self.version) "
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


class DeadLetterSpec(SpecModel):
    """Where records that cannot be decoded go, exactly once, instead of failing the query
    (with source.value.format avro, json or protobuf only; needs source.groupId)."""

    topic: str = Field(
        min_length=1,
        max_length=MAX_TOPIC,
        pattern=TOPIC,
        description="The dead-letter topic. Each copy keeps the record's key, value and "
        "headers, plus headers naming its source topic, partition, offset and the reason.",
    )
    bootstrap_servers: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=BOOTSTRAP,
        description="The dead-letter topic's cluster, host:port[,host:port]. Unset: the "
        "source's. The source's credentials either way.",
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


def needs_subject(value: ValueSpec | None, topics: list[str] | None) -> bool:
    """SUBJECT_RULE in Python: decoded values whose reader schema's subject is not known."""
    if value is None or value.format == "raw" or value.subject or value.reader_schema:
        return False
    registry = value.schema_registry
    if registry is not None and registry.subject_strategy == "record":
        return False
    return not (topics is not None and len(topics) == 1)


DEAD_LETTER_NEEDS_DECODED = (
    "deadLetter needs source.value.format avro, json or protobuf (only records that cannot be "
    "decoded go "
    "to the dead-letter topic): set spec.job.source.value.format or remove spec.job.deadLetter"
)
DEAD_LETTER_DECODED_RULE = (
    "!has(self.deadLetter) || (has(self.source.value) && has(self.source.value.format) && "
    "self.source.value.format != 'raw')"
)
DEAD_LETTER_NEEDS_GROUP = (
    "deadLetter needs source.groupId: the dead-letter topic's progress is kept for the group "
    "<groupId>.dead-letter"
)
DEAD_LETTER_GROUP_RULE = "!has(self.deadLetter) || has(self.source.groupId)"
