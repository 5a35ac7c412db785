"""spec.job: the source, the SQL or transform between, the sink, the trigger, and the rules
across them (a key or a dead-letter topic needs a decoded value and a group).

This module must not import pyspark: the operator imports it too.
"""

from __future__ import annotations

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from spark_app.api.dead_letter_spec import (
    DEAD_LETTER_DECODED_RULE,
    DEAD_LETTER_GROUP_RULE,
    DEAD_LETTER_NEEDS_DECODED,
    DEAD_LETTER_NEEDS_GROUP,
    DeadLetterSpec,
)
from spark_app.api.sink_rules import transaction_problem
from spark_app.api.sink_spec import SinkSpec
from spark_app.api.sink_value_spec import NEEDS_SOURCE_REGISTRY, NEEDS_SOURCE_REGISTRY_RULE
from spark_app.api.source_spec import SourceSpec
from spark_app.api.spec_base import (
    SpecModel,
)

_TRANSFORM_REF = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
# spec.job.sql: the view the source is registered as, the statement's bound, and the rule that
# keeps it apart from spec.job.transform (CEL and pydantic, one message naming both fields).
SQL_VIEW = "source"
MAX_SQL = 16384
SQL_OR_TRANSFORM = (
    "set at most one of spec.job.sql and spec.job.transform: sql is a Spark SQL query over the "
    f"view `{SQL_VIEW}`, transform a module:function in the image"
)


class TriggerSpec(SpecModel):
    """When micro-batches run. Unset means as fast as possible."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.processingTime), has(self.availableNow) && "
                    "self.availableNow].filter(x, x).size() <= 1",
                    "message": "set at most one of processingTime and availableNow",
                }
            ]
        }
    )

    processing_time: str | None = Field(
        default=None,
        max_length=32,
        pattern=r"^[0-9]{1,9} (milliseconds?|seconds?|minutes?|hours?)$",
        description='Run a micro-batch every interval, e.g. "1 second" or "500 milliseconds".',
    )
    available_now: bool = Field(
        default=False,
        description="Process what is available at start in bounded batches, then stop "
        "(for backfills; the operator treats the stop as completion only for such jobs).",
    )

    @model_validator(mode="after")
    def _check(self) -> TriggerSpec:
        if self.processing_time and self.available_now:
            raise ValueError("set at most one of processingTime and availableNow")
        return self


class JobSpec(SpecModel):
    """What the Spark job does: source → optional transform or SQL query → sink."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": DEAD_LETTER_DECODED_RULE,
                    "message": DEAD_LETTER_NEEDS_DECODED,
                    "fieldPath": ".deadLetter",
                },
                {
                    "rule": DEAD_LETTER_GROUP_RULE,
                    "message": DEAD_LETTER_NEEDS_GROUP,
                    "fieldPath": ".deadLetter",
                },
                {
                    "rule": NEEDS_SOURCE_REGISTRY_RULE,
                    "message": NEEDS_SOURCE_REGISTRY,
                    "fieldPath": ".sink.value",
                },
                {
                    "rule": "!(has(self.sql) && has(self.transform))",
                    "message": SQL_OR_TRANSFORM,
                    "fieldPath": ".sql",
                },
            ]
        }
    )

    source: SourceSpec = Field(description="The Kafka source.")
    transform: str | None = Field(
        default=None,
        max_length=256,
        pattern=_TRANSFORM_REF,
        description="Optional module:function applied to the source DataFrame "
        "(DataFrame -> DataFrame); the module must be importable in the image. Excludes sql.",
    )
    sql: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SQL,
        pattern=r"\S",
        description="Optional Spark SQL query (one SELECT, no custom image needed) over the "
        f"source, registered as the temporary view `{SQL_VIEW}` with its columns (key, value, "
        "topic, partition, offset, timestamp, timestampType, headers with includeHeaders; "
        "value and key typed with a decoded format), e.g. SELECT CAST(value AS STRING) AS "
        f"body, offset FROM {SQL_VIEW} WHERE partition = 0. Checked when the driver starts, "
        "before anything is read: an invalid query makes the job Invalid (InvalidSpec with "
        "Spark's message) until the spec changes. Excludes transform.",
    )
    sink: SinkSpec = Field(description="Where the job writes.")
    trigger: TriggerSpec = Field(default_factory=TriggerSpec, description="When micro-batches run.")
    dead_letter: DeadLetterSpec | None = Field(
        default=None,
        description="Where records that cannot be decoded go, exactly once, instead of "
        "failing the query. Only with source.value.format avro, json or protobuf; needs "
        "source.groupId.",
    )

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if self.sql is not None and self.transform is not None:
            raise ValueError(SQL_OR_TRANSFORM)
        if self.dead_letter is not None:
            value = self.source.value
            if value is None or value.format == "raw":
                raise ValueError(DEAD_LETTER_NEEDS_DECODED)
            if not self.source.group_id:
                raise ValueError(DEAD_LETTER_NEEDS_GROUP)
        typed = self.sink.value_format != "raw"
        if typed and (self.source.value is None or self.source.value.schema_registry is None):
            raise ValueError(NEEDS_SOURCE_REGISTRY)
        s, trigger = self.sink, self.trigger.processing_time
        if problem := transaction_problem(
            s.format, s.delivery_guarantee, s.transaction_timeout_ms, trigger
        ):
            raise ValueError(problem)
        return self
