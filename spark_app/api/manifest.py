"""The job part of a StreamingJob manifest: the one place where YAML becomes a typed job.

The runner reads a whole StreamingJob manifest (the same YAML users `kubectl apply`) and
uses only `spec.job`, `spec.checkpoint`, `spec.sparkConf` and `spec.s3`; the operator owns the other
spec fields. These models are also the source of the CRD schema for their fields, so every
field carries a description and cross-field rules are mirrored as CEL rules.

This module must not import pyspark: the operator imports it too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from spark_app.api.offsets import MAX_TOPIC, parse_starting_offsets
from spark_app.api.spec_base import (
    BOOTSTRAP,
    MAX_TEXT,
    TOPIC,
    TOPIC_RULE,
    TRIMMED,
    SpecModel,
    secret_key,
    secret_name,
)
from spark_app.api.value_spec import (
    DEAD_LETTER_DECODED_RULE,
    DEAD_LETTER_GROUP_RULE,
    DEAD_LETTER_NEEDS_DECODED,
    DEAD_LETTER_NEEDS_GROUP,
    KEY_NEEDS_REGISTRY,
    KEY_REGISTRY_RULE,
    KEY_SUBJECT_NEEDED,
    KEY_SUBJECT_RULE,
    SUBJECT_NEEDED,
    SUBJECT_RULE,
    DeadLetterSpec,
    KeySpec,
    ValueSpec,
    key_problem,
    needs_subject,
)

API_GROUP = "sparkkafka.dev"
API_VERSION = "v1alpha1"
KIND = "StreamingJob"

_TRANSFORM_REF = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
# spec.job.sql: the view the source is registered as, the statement's bound, and the rule that
# keeps it apart from spec.job.transform (CEL and pydantic, one message naming both fields).
SQL_VIEW = "source"
MAX_SQL = 16384
SQL_OR_TRANSFORM = (
    "set at most one of spec.job.sql and spec.job.transform: sql is a Spark SQL query over the "
    f"view `{SQL_VIEW}`, transform a module:function in the image"
)
# A start mode: named, a timestamp (ms), or per-partition JSON (checked by the models).
STARTING_OFFSETS = r"^(committed|earliest|latest|timestamp:[0-9]{1,13}|\{[\s\S]*\})$"
# A Hadoop file system location: file:///path or scheme://authority[/path]. Characters that
# Hadoop's Path parses specially (':' in the path, '?', '#', '%', spaces) are refused.
LOCATION = (
    r"^file:///[A-Za-z0-9._~/@=+,-]*$"
    r"|^[a-z][a-z0-9+.-]*://[A-Za-z0-9._~@:-]+(/[A-Za-z0-9._~/@=+,-]*)?$"
)
# Each rule is (CEL, message); `check_location` applies the same rules for pydantic, in order.
_LOCATION_RULES = [
    (
        "!self.startsWith('file:') || self.startsWith('file:///')",
        "a file:// location needs an absolute path: file:///path",
    ),
    (
        "!self.startsWith('s3a://') || self.matches('^s3a://[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?(/.*)?$')",
        "an s3a:// location starts with a bucket name (lower case): s3a://bucket/prefix",
    ),
    (
        "self.matches('^[a-z][a-z0-9+.-]*://')",
        "a location names its file system: file:///path on a mounted volume, "
        "s3a://bucket/prefix, hdfs://namenode/path (a bare path would be resolved against "
        "whatever fs.defaultFS is)",
    ),
    (
        "!self.matches('^file://(/+[.]{0,2})*$')",
        "a file:// location is a directory on a mounted volume, not the root (file:/// is the "
        "container's read-only root file system): file:///mnt/checkpoints",
    ),
]
_S3A_BUCKET = re.compile(r"^s3a://[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?(/.*)?$")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")
# The local root (an object store's or a name node's root is a fine base: every job writes
# below <location>/<namespace>/<name>).
_ROOT = re.compile(r"^file://(/+[.]{0,2})*$")
_CLIENT_KEY = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"


def check_location(value: str) -> str:
    """The CEL rules of a location, for pydantic (the same messages)."""
    broken = [
        value.startswith("file:") and not value.startswith("file:///"),
        value.startswith("s3a://") and not _S3A_BUCKET.match(value),
        not _SCHEME.match(value),
        bool(_ROOT.match(value)),
    ]
    for (_, message), fails in zip(_LOCATION_RULES, broken, strict=True):
        if fails:
            raise ValueError(message)
    return value


def _location_schema() -> dict[str, Any]:
    return {
        "x-kubernetes-validations": [{"rule": rule, "message": m} for rule, m in _LOCATION_RULES]
    }


def check_keys(value: dict[str, str], pattern: str, what: str) -> dict[str, str]:
    for key in value:
        if not re.match(pattern, key):
            raise ValueError(f"{what} key {key[:100]!r} must match {pattern}")
    return value


def _keys_schema(pattern: str, limit: int) -> dict[str, Any]:
    """CEL for map keys (a structural schema has no propertyNames); the full pattern is the
    models' (a regex over unbounded keys would exceed the API server's CEL cost budget)."""
    return {
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(k, size(k) >= 1 && size(k) <= {limit})",
                "message": f"keys must have 1 to {limit} characters ({pattern})",
            },
            NO_NULL_VALUES,
        ]
    }


# A null in a map of strings: the API server would drop the key without a word (it prunes
# nulls of fields that are not nullable), so the job would run without the setting. The value
# schemas are therefore nullable and this rule refuses the null, naming it.
NULL_VALUE = "a value is null (the key would be dropped): quote it or remove the key"
NO_NULL_VALUES: dict[str, Any] = {
    "rule": "self.all(k, type(self[k]) != null_type)",
    "message": NULL_VALUE,
}
# A string value of such a map: nullable in the schema (refused by NO_NULL_VALUES instead).
MapValue = Annotated[str, Field(max_length=MAX_TEXT, json_schema_extra={"nullable": True})]
Options = Annotated[dict[str, MapValue], Field(max_length=100)]
FILE_SINK_FORMATS = ("parquet", "json", "csv", "orc")
_MODES = ("append", "update", "complete")
# The output modes Spark runs per sink (measured on Spark 4.3: its file sink refuses update and
# complete; the kafka_checkpointed writer has no update, "does not support Update output mode").
SINK_OUTPUT_MODES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(FILE_SINK_FORMATS, ("append",)),
    "kafka": ("append", "complete"),
    "delta": ("append",),
    "console": _MODES,
    "noop": _MODES,
}
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


def _refusing_keys_schema(fields: dict[str, str], key: str, refused: str) -> dict[str, Any]:
    """A map of client keys whose CEL rule refuses the keys in `fields` (`key`: the CEL
    expression of a key as compared), naming the field to use for each."""
    schema = _keys_schema(_CLIENT_KEY, 255)
    schema["x-kubernetes-validations"].append(
        {
            "rule": f"self.all(k, !({key} in {list(fields)}))",
            "message": f"{refused} are refused: "
            + ", ".join(f"{name} (use {field})" for name, field in fields.items()),
        }
    )
    return schema


def _client_keys_schema() -> dict[str, Any]:
    return _refusing_keys_schema(CLIENT_KEY_FIELDS, "k", "properties with a field of their own")


# Sink options the job sets from a field (Spark's options are case-insensitive, the user's are
# applied last): an override would move the epoch's output or its checkpoint, and with them
# exactly-once and restore.
SINK_OPTION_FIELDS = {
    "path": "spec.job.sink.path",
    "checkpointlocation": "spec.checkpoint.location",
    "topic": "spec.job.sink.topic",
    "kafka.bootstrap.servers": "spec.job.sink.bootstrapServers",
}


def _sink_options_schema() -> dict[str, Any]:
    return _refusing_keys_schema(
        SINK_OPTION_FIELDS, "k.lowerAscii()", "options the job sets from a field"
    )


def _modes_rules() -> list[dict[str, Any]]:
    """CEL: outputMode among the modes its sink runs (SINK_OUTPUT_MODES), one rule per set."""
    by_modes: dict[tuple[str, ...], list[str]] = {}
    for sink, modes in SINK_OUTPUT_MODES.items():
        if modes != _MODES:
            by_modes.setdefault(modes, []).append(sink)
    return [
        {
            "rule": f"!(self.format in {sinks}) || !has(self.outputMode) || "
            f"self.outputMode in {list(modes)}",
            "message": f"outputMode must be {' or '.join(modes)} for the {'/'.join(sinks)} sink",
            "fieldPath": ".outputMode",
        }
        for modes, sinks in by_modes.items()
    ]


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
        return check_keys(value, _CLIENT_KEY, "Kafka client property")

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


COLUMN = r"^[A-Za-z_][A-Za-z0-9_]*$"
DELTA_PATH = "path is required for the delta sink: the table's location"
DELTA_SCHEME = (
    "the delta sink writes to file:///path on a mounted volume or s3a://bucket/prefix "
    "(delta-rs reaches no other file system)"
)
NO_ICEBERG = (
    "format iceberg is not available yet: no Apache Iceberg release runs on Spark 4.3 (its "
    "newest Spark runtime is for Spark 4.1 and fails to load on 4.3); use format delta"
)
NO_DELTA_OPTIONS = (
    "options are passed to Spark's sinks; the delta sink is not one: set partitionBy and "
    "tableProperties instead"
)
TABLE_FIELDS_ONLY = "partitionBy and tableProperties are for table sinks (format delta) only"


class SinkSpec(SpecModel):
    """Where the job writes. File formats use Spark's exactly-once file sink."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!(self.format in ['parquet', 'json', 'csv', 'orc']) || has(self.path)",
                    "message": "path is required for file sinks",
                },
                {
                    "rule": "self.format != 'kafka' || has(self.topic)",
                    "message": "topic is required for the kafka sink",
                },
                {"rule": "self.format != 'delta' || has(self.path)", "message": DELTA_PATH},
                {
                    "rule": "self.format != 'delta' || !has(self.path) || "
                    "self.path.startsWith('file:///') || self.path.startsWith('s3a://')",
                    "message": DELTA_SCHEME,
                    "fieldPath": ".path",
                },
                {"rule": "self.format != 'iceberg'", "message": NO_ICEBERG},
                {
                    "rule": "self.format != 'delta' || !has(self.options) || "
                    "self.options.size() == 0",
                    "message": NO_DELTA_OPTIONS,
                    "fieldPath": ".options",
                },
                {
                    "rule": "self.format == 'delta' || "
                    "(!has(self.partitionBy) && !has(self.tableProperties))",
                    "message": TABLE_FIELDS_ONLY,
                },
                *_modes_rules(),
            ]
        }
    )

    format: Literal[
        "parquet", "json", "csv", "orc", "delta", "iceberg", "kafka", "console", "noop"
    ] = Field(
        description="parquet, json, csv or orc: Spark's file sink (exactly-once with the "
        "checkpoint). delta: a Delta Lake table at path, one table across epochs, exactly "
        "once for every reader. iceberg: not yet (no Apache Iceberg release runs on Spark "
        "4.3). kafka: a topic (at-least-once). console, noop: for trials."
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=LOCATION,
        json_schema_extra=_location_schema(),
        description="Output directory URI of a file sink. Each deployment epoch writes "
        "<path>/epoch-<n> (Spark's file sink log is keyed by batch id, which restarts at 0 "
        "on a redeploy); restarts within an epoch continue the same directory. For the "
        "delta sink: the table's location (file:///... or s3a://...), the same table for "
        "every epoch.",
    )
    topic: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TOPIC,
        pattern=TOPIC,
        description=f"Output topic of the kafka sink. {TOPIC_RULE}.",
    )
    bootstrap_servers: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=BOOTSTRAP,
        description="Bootstrap servers of the kafka sink; defaults to the source's.",
    )
    output_mode: Literal["append", "update", "complete"] = Field(
        default="append",
        description="Spark output mode. File sinks run append only, the kafka sink append or "
        "complete; console and noop run all three.",
    )
    partition_by: list[Annotated[str, Field(min_length=1, max_length=128, pattern=COLUMN)]] = Field(
        default_factory=list,
        max_length=8,
        description="delta: the columns that partition a new table (an existing table "
        "keeps its own partitioning).",
    )
    table_properties: Options = Field(
        default_factory=dict,
        description="delta: table properties set when the job creates the table, e.g. "
        "delta.logRetentionDuration or delta.deletedFileRetentionDuration.",
        json_schema_extra=_keys_schema(_CLIENT_KEY, 255),
    )
    options: Options = Field(
        default_factory=dict,
        description="Extra options passed to the Spark sink. Credentials are refused here: "
        "use the spec's Secret references. So are the options the job sets from a field "
        "(any case: " + ", ".join(SINK_OPTION_FIELDS) + ").",
        json_schema_extra=_sink_options_schema(),
    )

    @field_validator("options")
    @classmethod
    def _option_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if (field := SINK_OPTION_FIELDS.get(key.lower())) is not None:
                raise ValueError(
                    f"sink option {key[:100]!r} would override {field}: remove it and set {field}"
                )
        return check_keys(value, _CLIENT_KEY, "sink option")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return None if value is None else check_location(value)

    @field_validator("output_mode")
    @classmethod
    def _output_mode(cls, value: str, info: ValidationInfo) -> str:
        sink = info.data.get("format")  # absent: format itself is invalid (reported there)
        modes = SINK_OUTPUT_MODES.get(sink, _MODES) if isinstance(sink, str) else _MODES
        if value not in modes:
            raise ValueError(
                f"the {sink} sink runs outputMode {' or '.join(modes)} only (Spark refuses "
                f"{value} for it): set outputMode: {modes[0]}"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> SinkSpec:
        if self.format in FILE_SINK_FORMATS and not self.path:
            raise ValueError(f"path is required for the {self.format} file sink")
        if self.format == "kafka" and not self.topic:
            raise ValueError("topic is required for the kafka sink")
        if self.format == "delta" and not self.path:
            raise ValueError(DELTA_PATH)
        if self.format == "delta" and not self.path.startswith(("file:///", "s3a://")):  # type: ignore[union-attr]
            raise ValueError(DELTA_SCHEME)
        if self.format == "iceberg":
            raise ValueError(NO_ICEBERG)
        if self.format == "delta" and self.options:
            raise ValueError(NO_DELTA_OPTIONS)
        if self.format != "delta" and (self.partition_by or self.table_properties):
            raise ValueError(TABLE_FIELDS_ONLY)
        return self


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
        return self


class CheckpointSpec(SpecModel):
    """Where the job's state lives. The location is the only lever between restore and
    redeploy: each deployment epoch gets <location>/<namespace>/<name>/epoch-<n>."""

    location: str = Field(
        min_length=1,
        max_length=1024,
        pattern=LOCATION,
        json_schema_extra=_location_schema(),
        description="Base URI of checkpoints (file:///mnt/checkpoints on a volume, "
        "s3a://bucket/prefix, ...). Each epoch gets a directory below it.",
    )

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        return check_location(value)


# The environment variables S3A's EnvironmentVariableCredentialsProvider reads; the operator
# fills them from spec.s3.credentialsSecret through secretKeyRef (never an argument or a file).
S3_ACCESS_KEY_ENV, S3_SECRET_KEY_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
_S3A_ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"


class S3CredentialsSecret(SpecModel):
    """A Secret in the job's namespace with an access key pair for the object store."""

    name: str = secret_name("Name of the Secret in the job's namespace.")
    access_key_id_key: str = secret_key("accessKeyId", "Key of the access key id in the Secret.")
    secret_access_key_key: str = secret_key(
        "secretAccessKey", "Key of the secret access key in the Secret."
    )


class S3Spec(SpecModel):
    """The object store behind s3a:// checkpoint and file-sink locations (Spark's S3A
    connector). Credentials come only from a Secret (as environment variables of the driver
    and executors) or, without credentialsSecret, from S3A's default chain (web identity,
    instance profile)."""

    endpoint: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        pattern=r"^https?://[^\s/]+(/.*)?$",
        description="Endpoint URL of an S3-compatible store (http://minio.storage:9000). "
        "Unset: AWS S3 of the region.",
    )
    region: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="Region of the bucket (fs.s3a.endpoint.region). Unset: S3A's default "
        "lookup; set it for S3-compatible stores (us-east-1 is the usual choice).",
    )
    path_style_access: bool = Field(
        default=False,
        description="Address buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint>; "
        "most S3-compatible stores need true.",
    )
    credentials_secret: S3CredentialsSecret | None = Field(
        default=None,
        description="Access key pair by Secret reference. Unset: S3A's default credential "
        "chain (IRSA / web identity, instance profile).",
    )

    def hadoop_conf(self) -> dict[str, str]:
        """The Spark confs (spark.hadoop.fs.s3a.*) for this store: no secret among them."""
        conf = {"spark.hadoop.fs.s3a.path.style.access": str(self.path_style_access).lower()}
        if self.endpoint:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
                self.endpoint.startswith("https://")
            ).lower()
        if self.region:
            conf["spark.hadoop.fs.s3a.endpoint.region"] = self.region
        if self.credentials_secret is not None:
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = _S3A_ENV_PROVIDER
        return conf


class RunnerSpec(BaseModel):
    """The spec fields the runner reads; the operator's fields are ignored here."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    job: JobSpec
    checkpoint: CheckpointSpec
    spark_conf: dict[str, str] = Field(default_factory=dict)
    s3: S3Spec | None = None

    def session_conf(self) -> dict[str, str]:
        """sparkConf with the object store's settings under it (the user's keys win)."""
        return {**(self.s3.hadoop_conf() if self.s3 else {}), **self.spark_conf}


class Metadata(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1)
    namespace: str = "default"


class RunnerManifest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: Literal["StreamingJob"]
    metadata: Metadata
    spec: RunnerSpec

    @model_validator(mode="after")
    def _check(self) -> RunnerManifest:
        expected = f"{API_GROUP}/{API_VERSION}"
        if self.api_version != expected:
            raise ValueError(f"apiVersion must be {expected}, got {self.api_version}")
        return self


class ManifestError(ValueError):
    """A manifest that cannot run, with every problem named by its field path."""


def load_manifest(document: dict[str, Any]) -> RunnerManifest:
    try:
        return RunnerManifest.model_validate(document)
    except ValidationError as exc:
        raise ManifestError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(document)"
        lines.append(f"{path}: {error['msg']}")
    return "invalid StreamingJob manifest:\n  " + "\n  ".join(lines)


def job_checkpoints(base: str, namespace: str, name: str, uid: str = "") -> str:
    """Where one job keeps its epochs' checkpoints: `<base>/<namespace>/<name>/<uid>`. The
    uid keeps a job deleted and created again under the same name apart from the old one
    (its checkpoints, its file sink's directories, its Delta app ids). Without a uid (a
    local run, a job launched by an operator before this layout): `<base>/<namespace>/<name>`."""
    root = f"{base.rstrip('/')}/{namespace}/{name}"
    return f"{root}/{uid}" if uid else root


def checkpoint_location(base: str, namespace: str, name: str, epoch: int, uid: str = "") -> str:
    """The checkpoint directory of one deployment epoch (same epoch = restore)."""
    return f"{job_checkpoints(base, namespace, name, uid)}/epoch-{epoch}"


_EPOCH_TAIL = re.compile(
    r"(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?/epoch-\d+/?$"
)


def epoch_sink_path(path: str, checkpoint: str) -> str | None:
    """A file sink's directory for the query at `checkpoint`: `<path>/<uid>/epoch-<n>`, the
    checkpoint location's own tail (`<path>/epoch-<n>` for a location without uid); None
    for a location that names no epoch.

    Spark's file sink records committed batches by batch id in `<dir>/_spark_metadata` and
    skips any batch id it has seen. A redeploy starts a new checkpoint at batch 0, so in the
    same directory its batches would be silently dropped; each epoch of each job (uid)
    writes its own."""
    tail = _EPOCH_TAIL.search(checkpoint)
    return f"{path.rstrip('/')}{tail.group(0).rstrip('/')}" if tail else None
