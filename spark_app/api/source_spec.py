"""spec.job.source: the Kafka source's fields (named after the options of Spark's built-in Kafka
source), its client properties and the cross-field rules among them.

This module must not import pyspark: the operator imports it too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from spark_app.api.field_rules import (
    CLIENT_KEY,
    Options,
    check_keys,
    refusing_keys_schema,
)
from spark_app.api.key_spec import (
    KEY_NEEDS_REGISTRY,
    KEY_REGISTRY_RULE,
    KEY_SUBJECT_NEEDED,
    KEY_SUBJECT_RULE,
    KeySpec,
    key_problem,
)
from spark_app.api.offsets import MAX_TOPIC, parse_starting_offsets
from spark_app.api.spec_base import (
    BOOTSTRAP,
    MAX_TEXT,
    TOPIC,
    TOPIC_RULE,
    TRIMMED,
    SpecModel,
)
from spark_app.api.value_spec import SUBJECT_NEEDED, SUBJECT_RULE, ValueSpec, needs_subject

# A start mode: named, a timestamp (ms), or per-partition JSON (checked by the models).
STARTING_OFFSETS = r"^(committed|earliest|latest|timestamp:[0-9]{1,13}|\{[\s\S]*\})$"
# Kafka client properties under source.kafka that have a field of their own (the source sets
# them from it; `spark_app.api.options` refuses the managed ones in its options too).
CLIENT_KEY_FIELDS = {
    "bootstrap.servers": "bootstrapServers",
    "group.id": "groupId",
    "enable.auto.commit": "commitOffsetsOnCheckpoints",
    "auto.offset.reset": "offsetResetStrategy",
    "isolation.level": "isolationLevel",
}


def _own_field(key: str) -> str:
    return (
        f"Kafka client property {key!r} has a field of its own: remove it and set "
        f"spec.job.source.{CLIENT_KEY_FIELDS[key]}"
    )


def _client_keys_schema() -> dict[str, Any]:
    return refusing_keys_schema(CLIENT_KEY_FIELDS, "k", "properties with a field of their own")


_COMMITTED_NEEDS_GROUP = (
    "groupId is required while startingOffsets is committed (the default): set groupId, or "
    "startingOffsets earliest, latest, timestamp:<ms> or JSON"
)


class SourceSpec(SpecModel):
    """The Kafka source. Field names mirror the options of Spark's built-in Kafka source."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.subscribe) != has(self.subscribePattern)",
                    "message": "set exactly one of subscribe or subscribePattern",
                },
                {
                    "rule": "!(has(self.commitOffsetsOnCheckpoints) ? "
                    "self.commitOffsetsOnCheckpoints : true) || has(self.groupId)",
                    "message": "groupId is required while commitOffsetsOnCheckpoints is true",
                },
                {
                    "rule": "(has(self.startingOffsets) ? self.startingOffsets : 'committed') "
                    "!= 'committed' || has(self.groupId)",
                    "message": _COMMITTED_NEEDS_GROUP,
                },
                {"rule": SUBJECT_RULE, "message": SUBJECT_NEEDED, "fieldPath": ".value"},
                {"rule": KEY_REGISTRY_RULE, "message": KEY_NEEDS_REGISTRY, "fieldPath": ".key"},
                {"rule": KEY_SUBJECT_RULE, "message": KEY_SUBJECT_NEEDED, "fieldPath": ".key"},
            ]
        }
    )

    bootstrap_servers: str = Field(
        min_length=1,
        max_length=MAX_TEXT,
        pattern=BOOTSTRAP,
        description="Kafka bootstrap servers, host:port[,host:port] (kafka.bootstrap.servers).",
    )
    subscribe: (
        list[Annotated[str, Field(min_length=1, max_length=MAX_TOPIC, pattern=TOPIC)]] | None
    ) = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="Topics to read. Exactly one of subscribe and subscribePattern is set. "
        f"{TOPIC_RULE}.",
    )
    subscribe_pattern: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=TRIMMED,
        description="A regular expression (Python re syntax) that must match a topic's whole "
        "name; internal __ topics never match; new matching topics are picked up by "
        "partition discovery.",
    )
    group_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=TRIMMED,
        description="Consumer group that receives the offsets of each completed checkpoint "
        "(kafka.group.id). Required while commitOffsetsOnCheckpoints is true. Use a group of "
        "its own: commits fail while another consumer is a live member of it.",
    )
    starting_offsets: str = Field(
        default="committed",
        max_length=65536,
        pattern=STARTING_OFFSETS,
        description="Where a fresh start (no checkpoint) begins: committed (the group's "
        "committed offsets, offsetResetStrategy where a partition has none), earliest, "
        'latest, timestamp:<epoch-ms>, or JSON {"topic":{"0":42}} (-2 earliest, -1 latest). '
        "Ignored when the job restores from its checkpoint.",
    )
    offset_reset_strategy: Literal["earliest", "latest", "error"] = Field(
        default="earliest",
        description="Where a partition without a usable committed offset starts on a fresh "
        "start: earliest, latest, or error (fail the start).",
    )
    commit_offsets_on_checkpoints: bool = Field(
        default=True,
        description="Commit each completed batch's end offsets (next offset to read) to the "
        "consumer group, asynchronously, newest first. Commits are for monitoring and "
        "redeploys; a failed commit never fails the job.",
    )
    max_offsets_per_trigger: int | None = Field(
        default=None,
        ge=1,
        le=10**15,
        description="Upper bound of offsets per micro-batch, split across partitions in "
        "proportion to their backlog. Unset: everything available.",
    )
    fail_on_data_loss: bool = Field(
        default=True,
        description="Fail when offsets to read were deleted by retention or a topic was "
        "recreated; false skips ahead with a warning.",
    )
    include_headers: bool = Field(
        default=False, description="Add a headers column (array of key/value structs)."
    )
    partition_discovery_interval_ms: int = Field(
        default=30000,
        ge=0,
        le=86_400_000,
        description="How often to look for new partitions and topics (ms); 0 checks on "
        "every trigger. New partitions are read from their earliest offset.",
    )
    isolation_level: Literal["read_committed", "read_uncommitted"] = Field(
        default="read_committed",
        description="Kafka isolation level for planning and reading (librdkafka's default "
        "is read_committed, unlike Java clients).",
    )
    kafka: Options = Field(
        default_factory=dict,
        description="Extra Kafka client properties passed through as kafka.<key> (for "
        "example security.protocol). Credentials are refused here: use the spec's Secret "
        "references (kafkaCredentials). So are the properties with a field of their own: "
        + ", ".join(f"{key} ({name})" for key, name in CLIENT_KEY_FIELDS.items())
        + ".",
        json_schema_extra=_client_keys_schema(),
    )
    value: ValueSpec | None = Field(
        default=None,
        description="How record values are read (format raw, avro, json or protobuf, the schema "
        "registry, the reader schema). Unset: raw bytes.",
    )
    key: KeySpec | None = Field(
        default=None,
        description="How record keys are read (format raw, avro, json or protobuf, the reader "
        "schema), with the value's schema registry. Unset: raw bytes.",
    )

    @field_validator("starting_offsets")
    @classmethod
    def _starting_offsets(cls, value: str) -> str:
        parse_starting_offsets(value)
        return value

    @field_validator("kafka")
    @classmethod
    def _kafka_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key in CLIENT_KEY_FIELDS:
                raise ValueError(_own_field(key))
        return check_keys(value, CLIENT_KEY, "Kafka client property")

    @field_validator("subscribe_pattern")
    @classmethod
    def _python_regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:  # the source compiles it with Python's re
                raise ValueError(f"not a Python regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _check(self) -> SourceSpec:
        if (self.subscribe is None) == (self.subscribe_pattern is None):
            raise ValueError("set exactly one of subscribe or subscribePattern")
        if self.commit_offsets_on_checkpoints and not self.group_id:
            raise ValueError(
                "groupId is required while commitOffsetsOnCheckpoints is true; set "
                "spec.job.source.groupId or set commitOffsetsOnCheckpoints: false"
            )
        if self.starting_offsets == "committed" and not self.group_id:
            raise ValueError(_COMMITTED_NEEDS_GROUP)
        if needs_subject(self.value, self.subscribe):
            raise ValueError(SUBJECT_NEEDED)
        problem = key_problem(self.key, self.value, self.subscribe)
        if problem:
            raise ValueError(problem)
        return self
