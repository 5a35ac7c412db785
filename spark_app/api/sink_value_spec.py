"""`spec.job.sink.value`: how the Kafka sink writes the `value` column. Raw (string or bytes,
as they are), or typed: a struct encoded in the Confluent wire format (magic byte, schema id,
payload) as Avro, JSON (JSON Schema) or Protobuf, so that a typed pipeline writes typed records its
consumers' Confluent deserializers read. The schema is a subject's pinned version, or the
query's own schema registered under the subject when the query starts (what a Confluent
serializer's auto.register.schemas does; the registry answers with the id it has for the
same schema, so a restore writes with the same id). The registry is the source's
(`spec.job.source.value.schemaRegistry`: its URL, credentials and CA).

Pure (no pyspark): the operator imports it through `spark_app.api.sink_spec`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from spark_app.api.spec_base import SpecModel
from spark_app.api.value_spec import subject_field

_FORMAT = "(has(self.format) ? self.format : 'raw')"
RAW_ALONE = (
    "spec.job.sink.value.subject and .version are for a typed value (format avro, json or "
    "protobuf): set value.format or remove them"
)
# a job-level rule (spark_app.api.job_spec): the sink encodes with the source's registry
NEEDS_SOURCE_REGISTRY = (
    "spec.job.sink.value.format avro, json or protobuf encodes with the schema registry of "
    "spec.job.source.value.schemaRegistry: set it (source.value.format avro, json or protobuf) "
    "or write the value raw"
)
NEEDS_SOURCE_REGISTRY_RULE = (
    "!has(self.sink.value) || !has(self.sink.value.format) || self.sink.value.format == 'raw' "
    "|| (has(self.source.value) && has(self.source.value.schemaRegistry))"
)


class SinkValueSpec(SpecModel):
    """How the kafka sink writes the value column."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"{_FORMAT} != 'raw' || !(has(self.subject) || has(self.version))",
                    "message": RAW_ALONE,
                }
            ]
        }
    )

    format: Literal["raw", "avro", "json", "protobuf"] = Field(
        default="raw",
        description="raw: the value column (string or binary) as it is; avro, json, protobuf: "
        "the value column, a struct, encoded as Avro, JSON (JSON Schema) or Protobuf (proto3, "
        "the file's first message) in the Confluent wire format with a schema of the source's "
        "registry (source.value.schemaRegistry).",
    )
    subject: str | None = subject_field(
        "Subject of the value's schema. Unset: <sink topic>-value (Confluent's TopicNameStrategy)."
    )
    version: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="The subject's version to write with (its fields must be the struct's). "
        "Unset: the query's schema is registered under the subject when the query starts "
        "(the registry's compatibility rules apply; the same schema keeps its id).",
    )

    @model_validator(mode="after")
    def _check(self) -> SinkValueSpec:
        if self.format == "raw" and (self.subject is not None or self.version is not None):
            raise ValueError(RAW_ALONE)
        return self
