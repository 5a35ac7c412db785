"""spec.job.sink: where the job writes (files, Kafka, a Delta or Iceberg table, console, noop),
the output modes each sink runs and the options the job sets itself.

This module must not import pyspark: the operator imports it too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spark_app.api.field_rules import (
    CLIENT_KEY,
    LOCATION,
    Options,
    check_keys,
    check_location,
    keys_schema,
    location_schema,
    refusing_keys_schema,
)
from spark_app.api.iceberg_spec import TABLE, IcebergCatalogSpec
from spark_app.api.offsets import MAX_TOPIC
from spark_app.api.sink_rules import (
    AT_LEAST_ONCE_NO_TIMEOUT,
    DEFAULT_GUARANTEE,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    KAFKA_ONLY,
    MAX_TRANSACTION_TIMEOUT_MS,
    MIN_TRANSACTION_TIMEOUT_MS,
    transaction_problem,
)
from spark_app.api.sink_value_spec import SinkValueSpec
from spark_app.api.spec_base import (
    BOOTSTRAP,
    MAX_TEXT,
    TOPIC,
    TOPIC_RULE,
    SpecModel,
)

FILE_SINK_FORMATS = ("parquet", "json", "csv", "orc")
_MODES = ("append", "update", "complete")
# The output modes Spark runs per sink (measured on Spark 4.3: its file sink refuses update and
# complete; the kafka_checkpointed writer has no update, "does not support Update output mode").
SINK_OUTPUT_MODES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(FILE_SINK_FORMATS, ("append",)),
    "kafka": ("append", "complete"),
    "delta": ("append",),
    "iceberg": ("append",),
    "console": _MODES,
    "noop": _MODES,
}
# Sink options the job sets from a field (Spark's options are case-insensitive, the user's are
# applied last): an override would move the epoch's output or its checkpoint, and with them
# exactly-once and restore.
SINK_OPTION_FIELDS = {
    "path": "spec.job.sink.path",
    "checkpointlocation": "spec.checkpoint.location",
    "topic": "spec.job.sink.topic",
    "kafka.bootstrap.servers": "spec.job.sink.bootstrapServers",
    "deliveryguarantee": "spec.job.sink.deliveryGuarantee",
    "transactiontimeoutms": "spec.job.sink.transactionTimeoutMs",
    "kafka.transaction.timeout.ms": "spec.job.sink.transactionTimeoutMs",
    "kafka.transactional.id": "spec.job.sink.deliveryGuarantee",
    "transactionalidprefix": "spec.job.sink.deliveryGuarantee",
    "checkpointid": "spec.checkpoint.location",
    "valueformat": "spec.job.sink.value",
    "valueschemaid": "spec.job.sink.value",
    "valueschema": "spec.job.sink.value",
    "valuetype": "spec.job.sink.value",
}
TABLE_SINKS = ("delta", "iceberg")  # sinks of one table across epochs, written from the driver


def _sink_options_schema() -> dict[str, Any]:
    return refusing_keys_schema(
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


COLUMN = r"^[A-Za-z_][A-Za-z0-9_]*$"
DELTA_PATH = "path is required for the delta sink: the table's location"
DELTA_SCHEME = (
    "the delta sink writes to file:///path on a mounted volume or s3a://bucket/prefix "
    "(delta-rs reaches no other file system)"
)
ICEBERG_TABLE = (
    "table and catalog are required for the iceberg sink: the table's identifier "
    "(namespace.table) and the catalog that holds it"
)
ICEBERG_NO_PATH = "the iceberg sink takes no path: the catalog places the table (catalog.warehouse)"
ICEBERG_ONLY = "table and catalog are for the iceberg sink only"
NO_DELTA_OPTIONS = (
    "options are passed to Spark's sinks; the delta and iceberg sinks are not: set "
    "partitionBy and tableProperties instead"
)
TABLE_FIELDS_ONLY = (
    "partitionBy and tableProperties are for table sinks (format delta or iceberg) only"
)


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
                {
                    "rule": "self.format != 'iceberg' || (has(self.table) && has(self.catalog))",
                    "message": ICEBERG_TABLE,
                },
                {
                    "rule": "self.format != 'iceberg' || !has(self.path)",
                    "message": ICEBERG_NO_PATH,
                    "fieldPath": ".path",
                },
                {
                    "rule": "self.format == 'iceberg' || (!has(self.table) && !has(self.catalog))",
                    "message": ICEBERG_ONLY,
                },
                {
                    "rule": "self.format == 'kafka' || (!has(self.deliveryGuarantee) && "
                    "!has(self.transactionTimeoutMs) && !has(self.value))",
                    "message": KAFKA_ONLY,
                },
                {
                    "rule": "!has(self.transactionTimeoutMs) || !has(self.deliveryGuarantee) || "
                    "self.deliveryGuarantee == 'exactly-once'",
                    "message": AT_LEAST_ONCE_NO_TIMEOUT,
                    "fieldPath": ".transactionTimeoutMs",
                },
                {
                    "rule": "!(self.format in ['delta', 'iceberg']) || !has(self.options) || "
                    "self.options.size() == 0",
                    "message": NO_DELTA_OPTIONS,
                    "fieldPath": ".options",
                },
                {
                    "rule": "self.format in ['delta', 'iceberg'] || "
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
        "once for every reader. iceberg: an Apache Iceberg table in a catalog (table, "
        "catalog), exactly once for every reader. kafka: a topic (exactly once for "
        "read_committed consumers, see deliveryGuarantee). console, noop: for trials."
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=LOCATION,
        json_schema_extra=location_schema(),
        description="Output directory URI of a file sink. Each deployment epoch writes "
        "<path>/epoch-<n> (Spark's file sink log is keyed by batch id, which restarts at 0 "
        "on a redeploy); restarts within an epoch continue the same directory. For the "
        "delta sink: the table's location (file:///... or s3a://...), the same table for "
        "every epoch.",
    )
    table: str | None = Field(
        default=None,
        min_length=3,
        max_length=512,
        pattern=TABLE,
        description="iceberg sink: the table's identifier in the catalog, namespace.table "
        "(created on the first batch when the catalog has no such table).",
    )
    catalog: IcebergCatalogSpec | None = Field(
        default=None, description="iceberg sink: the catalog the table is committed through."
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
    delivery_guarantee: Literal["exactly-once", "at-least-once"] | None = Field(
        default=None,
        description="kafka sink: exactly-once (the default: each source partition's output "
        "per batch in one Kafka transaction with its progress; consumers must read with "
        "isolation.level=read_committed) or at-least-once (no transactions, for consumers "
        "that cannot read read_committed; a restore may write a batch again). Needs a "
        "query without a shuffle (no aggregation, join or repartition) or union for "
        "exactly-once.",
    )
    transaction_timeout_ms: int | None = Field(
        default=None,
        ge=MIN_TRANSACTION_TIMEOUT_MS,
        le=MAX_TRANSACTION_TIMEOUT_MS,
        description="kafka sink, exactly-once: the transactions' timeout (default "
        f"{DEFAULT_TRANSACTION_TIMEOUT_MS}). A writer that died holds read_committed "
        "readers back at most this long; a task (its read and its write) must finish "
        "within it, and a processingTime trigger must be shorter.",
    )
    value: SinkValueSpec | None = Field(
        default=None,
        description="kafka sink: how the value column is written (raw, or a struct encoded as "
        "Avro, JSON or Protobuf with a registered schema). Unset: raw.",
    )
    output_mode: Literal["append", "update", "complete"] = Field(
        default="append",
        description="Spark output mode. File sinks run append only, the kafka sink append or "
        "complete; console and noop run all three.",
    )
    partition_by: list[Annotated[str, Field(min_length=1, max_length=128, pattern=COLUMN)]] = Field(
        default_factory=list,
        max_length=8,
        description="delta, iceberg: the columns that partition a new table (identity "
        "partitions; an existing table keeps its own partitioning).",
    )
    table_properties: Options = Field(
        default_factory=dict,
        description="delta, iceberg: table properties set when the job creates the table, "
        "e.g. delta.logRetentionDuration, or Iceberg's write.target-file-size-bytes.",
        json_schema_extra=keys_schema(CLIENT_KEY, 255),
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
        return check_keys(value, CLIENT_KEY, "sink option")

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
        self._check_iceberg()
        if self.format in TABLE_SINKS and self.options:
            raise ValueError(NO_DELTA_OPTIONS)
        if self.format not in TABLE_SINKS and (self.partition_by or self.table_properties):
            raise ValueError(TABLE_FIELDS_ONLY)
        if self.format != "kafka" and self.value is not None:
            raise ValueError(KAFKA_ONLY)
        guarantee, timeout = self.delivery_guarantee, self.transaction_timeout_ms
        if problem := transaction_problem(self.format, guarantee, timeout, None):
            raise ValueError(problem)
        return self

    def _check_iceberg(self) -> None:
        if self.format != "iceberg":
            if self.table is not None or self.catalog is not None:
                raise ValueError(ICEBERG_ONLY)
            return
        if self.table is None or self.catalog is None:
            raise ValueError(ICEBERG_TABLE)
        if self.path is not None:
            raise ValueError(ICEBERG_NO_PATH)

    @property
    def value_format(self) -> str:
        """How the kafka sink writes the value column: raw (also for every other sink), avro
        or json."""
        return self.value.format if self.value is not None else "raw"

    @property
    def guarantee(self) -> str:
        """The guarantee the sink keeps for every reader (kafka: for read_committed ones)."""
        if self.format == "kafka":
            return self.delivery_guarantee or DEFAULT_GUARANTEE
        return "none" if self.format in ("console", "noop") else "exactly-once"
