"""Typed records in the job spec: `spec.job.source.value` (the value's format, the schema
registry and the reader schema) and `spec.job.deadLetter` (where records that cannot be
decoded go). `spark_app.kafka_config` turns them into the source's options (valueFormat,
schemaRegistry*, valueSubject, valueSchemaVersion, deadLetter*); the registry's basic-auth
credentials come only from a Secret, as the environment variables SCHEMA_REGISTRY_USERNAME and
SCHEMA_REGISTRY_PASSWORD of the driver and executors (secretKeyRef), never from the manifest.

Pure (no pyspark): the operator imports it through `spark_app.manifest`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from spark_app.offsets import MAX_TOPIC
from spark_app.spec_base import (
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
    "value.schemaRegistry (with its url) is required when value.format is avro or json: the "
    "registry's Confluent-compatible API, http(s)://host:port[/path]"
)
REGISTRY_ONLY = (
    "value.schemaRegistry, value.subject and value.version are used only with value.format "
    "avro or json: set value.format or remove them"
)


class RegistryCredentialsSecret(SpecModel):
    """Basic-auth credentials for the schema registry, from a Secret in the job's namespace.
    The values reach the driver and executors only as environment variables
    (SCHEMA_REGISTRY_USERNAME, SCHEMA_REGISTRY_PASSWORD) through secretKeyRef; they never
    appear in the job ConfigMap, the driver's arguments, the status or the logs."""

    name: str = secret_name("Name of the Secret in the job's namespace.")
    username_key: str = secret_key("username", "Key of the registry user name in the Secret.")
    password_key: str = secret_key("password", "Key of the registry password in the Secret.")


class SchemaRegistrySpec(SpecModel):
    """The schema registry (Confluent-compatible API) the reader and writer schemas come from."""

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


class ValueSpec(SpecModel):
    """How record values are read: raw bytes, or Avro or JSON (JSON Schema) in the Confluent
    wire format decoded with schemas from a schema registry into a typed column `value`."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{_FORMAT} == 'raw' || has(self.schemaRegistry)",
                    "message": NEEDS_REGISTRY,
                },
                {
                    "rule": f"{_FORMAT} != 'raw' || !(has(self.schemaRegistry) || "
                    "has(self.subject) || has(self.version))",
                    "message": REGISTRY_ONLY,
                },
            ]
        }
    )

    # the decoded formats are spark_app.value_formats.FORMATS (this module stays pure)
    format: Literal["raw", "avro", "json"] = Field(
        default="raw",
        description="raw: the value as bytes; avro: Avro, json: JSON Schema, each in the "
        "Confluent wire format (magic byte, schema id, payload), decoded into a column value "
        "of the reader schema's type.",
    )
    schema_registry: SchemaRegistrySpec | None = Field(
        default=None, description="The schema registry. Required with format avro or json."
    )
    subject: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=TRIMMED,
        description="Subject of the reader schema. Unset: <topic>-value, which needs exactly "
        "one topic in subscribe (Confluent's TopicNameStrategy).",
    )
    version: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="Version of the reader schema in its subject. Unset: the subject's "
        "latest when the query starts (again at every restart).",
    )

    @model_validator(mode="after")
    def _check(self) -> ValueSpec:
        if self.format != "raw" and self.schema_registry is None:
            raise ValueError(NEEDS_REGISTRY)
        if self.format == "raw" and (
            self.schema_registry is not None or self.subject is not None or self.version
        ):
            raise ValueError(REGISTRY_ONLY)
        return self


class DeadLetterSpec(SpecModel):
    """Where records that cannot be decoded go, exactly once, instead of failing the query
    (with source.value.format avro or json only; needs source.groupId)."""

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
    "value.subject is required with value.format avro or json unless subscribe names exactly "
    "one topic (then it defaults to <topic>-value)"
)
SUBJECT_RULE = (
    "!has(self.value) || (has(self.value.format) ? self.value.format : 'raw') == 'raw' || "
    "has(self.value.subject) || (has(self.subscribe) && size(self.subscribe) == 1)"
)
DEAD_LETTER_NEEDS_DECODED = (
    "deadLetter needs source.value.format avro or json (only records that cannot be decoded go "
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
