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
  (`committed_batch`, used by `spark_app.group_offsets`), like a file sink's
  `_spark_metadata`.
Every Delta reader sees each batch once; no reader needs our logs.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("spark_app.delta_sink")
# A fault point for tests: the driver (its whole process group, the JVM too) is SIGKILLed
# right after the table committed this batch id, before Spark writes commits/<id>.
CRASH_AFTER_COMMIT_ENV = "STREAMJOB_TEST_CRASH_AFTER_TABLE_COMMIT"


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

    def append(self, opened: Any, rows: Any, app_id: str, batch_id: int) -> None:
        """Appends `rows` (Arrow) as batch `batch_id` of `app_id` in one commit: through
        `opened` (the table from `open`; the commit moves its snapshot on) or, with None,
        at the path (a new table, with the spec's partitioning and properties)."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        write_deltalake(
            opened if opened is not None else table_uri(self.path),
            rows,
            mode="append",
            partition_by=list(self.partition_by) or None,
            configuration=dict(self.properties) or None,
            storage_options=self.options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=batch_id)]
            ),
        )


class BatchWriter:
    """One query's foreachBatch function: each batch's rows reach the driver as Arrow and
    become one Delta commit (delta-rs writes the Parquet files and the log entry).

    The table's log is read once, at the query's first batch: the newest batch it holds for
    the app id, so that a restore's replay of a batch the table has writes nothing. From then
    on that version is kept here and every commit goes through the one table opened then,
    whose snapshot each commit moves on: no log read per batch. The query is the only writer
    of its app id (its checkpoint's); should another commit that app id all the same,
    delta-rs refuses our commit (its conflict check covers application transactions) instead
    of writing a batch twice. Other writers' commits (compaction, vacuum) are rebased over."""

    def __init__(self, table: DeltaTable, app_id: str):
        self.table, self.app_id = table, app_id
        self.crash_after = os.environ.get(CRASH_AFTER_COMMIT_ENV)
        self._read = False  # the table's state below was read (and not lost to a failure)
        self._opened: Any = None  # the open table; None while there is none
        self._done: int | None = None  # the newest batch of app_id in the table

    def __call__(self, frame, batch_id: int) -> None:
        self.write(frame.toArrow(), batch_id)
        if self.crash_after == str(batch_id):  # a test's crash between the table and commits/N
            os.killpg(os.getpgid(0), signal.SIGKILL)

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
        if not self._read:
            self._opened = self.table.open()
            opened = self._opened
            self._done = None if opened is None else opened.transaction_version(self.app_id)
            self._read = True
        if self._done is not None and self._done >= batch_id:
            log.info(
                "batch %d is in the Delta table already (its version %d): skipped",
                batch_id,
                self._done,
            )
            return False
        try:
            self.table.append(self._opened, rows, self.app_id, batch_id)
        except BaseException:
            self._read = False  # the commit may have landed all the same: read it again
            raise
        if self._opened is None:  # this commit made the table
            self._opened = self.table.open()
        self._done = batch_id
        return True


def batch_writer(table: DeltaTable, app_id: str) -> BatchWriter:
    """The foreachBatch function of the query writing `app_id`'s batches to `table`."""
    return BatchWriter(table, app_id)
