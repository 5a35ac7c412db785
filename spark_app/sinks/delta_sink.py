"""The Delta Lake table sink: each micro-batch is one Delta commit that records its batch.

No Delta Lake release runs on Spark 4.3 (docs/source.md, "Table sinks"), so the job writes
through delta-rs (the `deltalake` package) from `foreachBatch`, with the protocol Delta's own
Spark sink uses: a commit carries an application transaction (`txn`: app id, version) naming
the query and the batch, in the same atomic commit as the batch's files. Here the app id is
the epoch's checkpoint location (a restore keeps it, a redeploy changes it) and the version
the batch id. So:
- a restore's replay of a batch the table already committed writes nothing
  (`BatchWriter`, which reads the log once per query and then keeps the version itself);
- a redeploy's catch-up counts the previous epoch's last batch in the table as durable
  (`committed_batch`, used by `spark_app.runner.group_offsets`), like a file sink's
  `_spark_metadata`.
Every Delta reader sees each batch once; no reader needs our logs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_app.sinks.table_writer import TableWriter

log = logging.getLogger("spark_app.sinks.delta_sink")


def app_id(checkpoint: str) -> str:
    """The application id of an epoch's query in the table: its checkpoint location."""
    return checkpoint.rstrip("/")


def table_uri(path: str) -> str:
    """delta-rs names the S3 scheme s3://; the spec shares s3a:// with the checkpoints."""
    return "s3://" + path.removeprefix("s3a://") if path.startswith("s3a://") else path


def storage_options(hadoop: Mapping[str, str], path: str) -> dict[str, str]:
    """delta-rs's object-store settings from the session's S3A ones (spec.s3 sets them), so
    the table and the checkpoints share one store. The key pair is not among them: delta-rs
    reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from the environment, as S3A does."""
    if not path.startswith(("s3a://", "s3://")):
        return {}
    # Conditional puts (If-None-Match) make concurrent commits safe without a lock service;
    # S3, MinIO and most S3-compatible stores support them.
    options = {"aws_conditional_put": "etag"}
    endpoint = hadoop.get("fs.s3a.endpoint")
    if endpoint:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
    options["AWS_REGION"] = hadoop.get("fs.s3a.endpoint.region") or "us-east-1"
    if hadoop.get("fs.s3a.path.style.access", "false").lower() == "true":
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    return options


def hadoop_settings(spark) -> dict[str, str]:
    """The session's fs.s3a.* settings that `storage_options` maps."""
    conf = spark._jsc.hadoopConfiguration()
    keys = ("fs.s3a.endpoint", "fs.s3a.endpoint.region", "fs.s3a.path.style.access")
    return {key: value for key in keys if (value := conf.get(key)) is not None}


@dataclass(frozen=True)
class DeltaTable:
    """One Delta table at `path` (file:// or s3a://), written by one job."""

    path: str
    options: dict[str, str] = field(default_factory=dict)
    partition_by: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def for_session(cls, spark, path: str, partition_by=(), properties=None) -> DeltaTable:
        options = storage_options(hadoop_settings(spark), path)
        return cls(path, options, tuple(partition_by), dict(properties or {}))

    def open(self) -> Any:
        """The table as it is now (a deltalake.DeltaTable: its log read); None: no table yet."""
        from deltalake import DeltaTable as Table
        from deltalake.exceptions import TableNotFoundError

        try:
            return Table(table_uri(self.path), storage_options=self.options)
        except TableNotFoundError:
            return None

    def committed_batch(self, app_id: str) -> int | None:
        """The newest batch the table committed for `app_id`; None: none (or no table)."""
        table = self.open()
        return None if table is None else table.transaction_version(app_id)

    def check(self, schema: Any) -> None:
        """The query's columns (Spark's `schema`) against the table's, before the query
        starts: SchemaIncompatible naming each column the table cannot take (no table yet:
        nothing to check)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        opened = self.open()
        if opened is None:
            return
        change = schema_change(table_schema(opened), to_arrow_schema(schema, timezone="UTC"))
        if change.problems:
            raise incompatible(self.path, change.problems)
        for warning in change.warnings:
            log.warning("Delta table %s: %s", self.path, warning)
        if change.merge:
            log.info("Delta table %s: the query's columns merge into the table's", self.path)

    def append(
        self, opened: Any, rows: Any, app_id: str, batch_id: int, merge: bool = False
    ) -> None:
        """Appends `rows` (Arrow) as batch `batch_id` of `app_id` in one commit: through
        `opened` (the table from `open`; the commit moves its snapshot on) or, with None,
        at the path (a new table, with the spec's partitioning and properties). `merge`:
        the table takes the rows' new columns (a compatible change, `schema_change`)."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        write_deltalake(
            opened if opened is not None else table_uri(self.path),
            rows,
            mode="append",
            schema_mode="merge" if merge else None,
            partition_by=list(self.partition_by) or None,
            configuration=dict(self.properties) or None,
            storage_options=self.options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=batch_id)]
            ),
        )


class BatchWriter(TableWriter):
    """One query's foreachBatch function: each batch's rows reach the driver as Arrow and
    become one Delta commit (delta-rs writes the Parquet files and the log entry).

    The table's log is read once, at the query's first batch: the newest batch it holds for
    the app id, so that a restore's replay of a batch the table has writes nothing. From then
    on that version is kept here and every commit goes through the one table opened then,
    whose snapshot each commit moves on: no log read per batch. The query is the only writer
    of its app id (its checkpoint's); should another commit that app id all the same,
    delta-rs refuses our commit (its conflict check covers application transactions) instead
    of writing a batch twice. Other writers' commits (compaction, vacuum) are rebased over."""

    table: DeltaTable

    def newest_in(self, opened: Any) -> int | None:
        return opened.transaction_version(self.app_id)

    def write(self, rows: Any, batch_id: int) -> bool:
        """Appends `rows` as batch `batch_id` unless the table has it (a replay after a
        restore). True: written.

        A commit that fails for another reason than a conflict is tried once more from a
        freshly read log: log cleanup may have deleted the entries after our snapshot
        (a checkpoint made them unneeded for readers), and delta-rs needs them to rebase
        a commit from that snapshot ("Invalid table version")."""
        from deltalake.exceptions import CommitFailedError, DeltaError

        try:
            return self._write_once(rows, batch_id)
        except CommitFailedError:
            raise  # another writer of our app id: never hidden (see the class's docstring)
        except DeltaError as exc:
            log.warning("batch %d: Delta commit failed (%s); reading the log again", batch_id, exc)
            return self._write_once(rows, batch_id)

    def _write_once(self, rows: Any, batch_id: int) -> bool:
        if self.has(batch_id):
            log.info(
                "batch %d is in the Delta table already (its version %d): skipped",
                batch_id,
                self._done,
            )
            return False
        merge = False
        if self._opened is not None:
            change = schema_change(table_schema(self._opened), rows.schema)
            if change.problems:
                raise incompatible(self.table.path, change.problems)
            merge = change.merge
        try:
            self.table.append(self._opened, rows, self.app_id, batch_id, merge)
        except BaseException:
            self._read = False  # the commit may have landed all the same: read it again
            raise
        if self._opened is None:  # this commit made the table
            self._opened = self.table.open()
        self._done = batch_id
        return True


# -- the table's schema against the query's columns ------------------------------------------
# Types a column may arrive in while the table keeps its own (a lossless cast up: the table's
# type holds every value): data type -> the table types that take it.
_CASTS_UP = {
    "int8": {"int16", "int32", "int64"},
    "int16": {"int32", "int64"},
    "int32": {"int64"},
    "float": {"double"},
}
_SAME = {  # Arrow's spellings of one Delta type
    "large_string": "string",
    "string_view": "string",
    "large_binary": "binary",
    "binary_view": "binary",
    "large_list": "list",
    "list_view": "list",
    "large_list_view": "list",
    "halffloat": "float",
}
FIX = (
    "a Delta table takes a new nullable column (merged) and a narrower type it can cast up; "
    "for any other change write to a new table (spec.job.sink.path) or keep the column as "
    "it was (pin spec.job.source.value.version, or cast it in spec.job.sql)"
)


class SchemaIncompatible(ValueError):
    """The query's columns do not fit the table's; the message names each column and what
    to do."""


@dataclass(frozen=True)
class SchemaChange:
    """The query's columns against the table's: `merge` when the table takes new columns
    (delta-rs's schema_mode="merge"), `problems` naming what it cannot take."""

    merge: bool = False
    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _kind(data_type: Any) -> str:
    import pyarrow as pa

    if pa.types.is_struct(data_type):
        return "struct"
    if pa.types.is_decimal(data_type):
        return f"decimal({data_type.precision},{data_type.scale})"
    if pa.types.is_timestamp(data_type):
        return f"timestamp[{'tz' if data_type.tz else 'ntz'}]"  # the unit: delta-rs casts
    name = str(data_type).split("<")[0].split("[")[0]
    return _SAME.get(name, name)


def schema_change(table: Any, data: Any) -> SchemaChange:
    """`data` (the query's Arrow schema) against `table` (the table's), column by column,
    structs and lists inside them too."""
    merge, problems, warnings = _compare(list(table), list(data), "")
    return SchemaChange(merge, tuple(problems), tuple(warnings))


def _compare(table: list, data: list, prefix: str) -> tuple[bool, list[str], list[str]]:
    import pyarrow as pa

    merge, problems, warnings = False, [], []
    has = {column.name: column for column in table}
    given = {column.name for column in data}
    for column in data:
        name = f"{prefix}{column.name}"
        old = has.get(column.name)
        if old is None:
            merge = True  # a new column: nullable in the table (the rows before have none)
            continue
        if old.nullable is False and column.nullable:
            warnings.append(
                f"column {name} may now be null and the table's is not null: a null fails "
                "that batch"
            )
        a, b = old.type, column.type
        if pa.types.is_struct(a) and pa.types.is_struct(b):
            more = _compare(list(a), list(b), f"{name}.")
        elif _kind(a) == _kind(b) in ("list", "map"):
            inner = ("key_field", "item_field") if _kind(a) == "map" else ("value_field",)
            more = _compare(
                [getattr(a, part).with_name(part[:-6]) for part in inner],
                [getattr(b, part).with_name(part[:-6]) for part in inner],
                f"{name}.",
            )
        else:
            ka, kb = _kind(a), _kind(b)
            if ka != kb and ka not in _CASTS_UP.get(kb, ()):
                widened = kb in _CASTS_UP.get(ka, ())
                problems.append(
                    f"column {name} is {kb} in the query and {ka} in the table"
                    + (
                        " (a widened type: delta-rs cannot widen a Delta column's type)"
                        if widened
                        else ""
                    )
                )
            continue
        merge, problems, warnings = merge or more[0], problems + more[1], warnings + more[2]
    for column in table:
        if column.name not in given:
            if column.nullable:
                merge = True  # left out: null in the new rows
            else:
                problems.append(
                    f"column {prefix}{column.name} is required (not null) in the table and "
                    "the query no longer gives it"
                )
    return merge, problems, warnings


def table_schema(opened: Any) -> Any:
    """A table's (deltalake.DeltaTable's) schema as a pyarrow schema."""
    import pyarrow as pa

    return pa.schema(opened.schema().to_arrow())


def incompatible(path: str, problems: tuple[str, ...]) -> SchemaIncompatible:
    return SchemaIncompatible(
        f"the Delta table {path} cannot take the query's columns: {'; '.join(problems)}. {FIX}"
    )


def batch_writer(table: DeltaTable, app_id: str) -> BatchWriter:
    """The foreachBatch function of the query writing `app_id`'s batches to `table`."""
    return BatchWriter(table, app_id)
