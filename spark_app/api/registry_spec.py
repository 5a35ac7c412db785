"""`spec.job.source.value.schemaRegistry`: the registry's URL, its credentials and CA Secrets,
and the subject name strategy that finds the reader schema's subject. Pure (no pyspark): the
operator imports it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spark_app.api.decoding_options import RECORD_NAME_PATTERN
from spark_app.api.spec_base import (
    MAX_TEXT,
    SpecModel,
    secret_key,
    secret_name,
)

# http(s)://host[:port][/path]: no user info (credentials come from credentialsSecret), no
# query or fragment.
REGISTRY_URL = r"^https?://[A-Za-z0-9._~:\[\]-]+(/[A-Za-z0-9._~/%+=,-]*)?$"
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
_STRATEGY = "(has(self.subjectStrategy) ? self.subjectStrategy : 'topic')"


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
