"""The Delta Lake table sink: each micro-batch is one Delta commit that records its batch.

No Delta Lake release runs on Spark 4.3 (docs/source.md, "Table sinks"), so the job writes
through delta-rs (the `deltalake` package) from `foreachBatch`, with the protocol Delta's own
Spark sink uses: a commit carries an application transaction (`txn`: app id, version) naming
the query and the batch, in the same atomic commit as the batch's files. Here the app id is
the epoch's checkpoint location (a restore keeps it, a redeploy changes it) and the version
the batch id. So:
- a restore's replay of a batch the table already committed writes nothing (`write`);
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

    def committed_batch(self, app_id: str) -> int | None:
        """The newest batch the table committed for `app_id`; None: none (or no table)."""
        from deltalake import DeltaTable as Table

        uri = table_uri(self.path)
        if not Table.is_deltatable(uri, storage_options=self.options):
            return None
        return Table(uri, storage_options=self.options).transaction_version(app_id)

    def write(self, rows: Any, app_id: str, batch_id: int) -> bool:
        """Appends `rows` (Arrow) as batch `batch_id` of `app_id` in one commit, unless the
        table has it already (a replay after a restore). True: written."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        done = self.committed_batch(app_id)
        if done is not None and done >= batch_id:
            log.info(
                "batch %d is in the Delta table already (its version %d): skipped", batch_id, done
            )
            return False
        write_deltalake(
            table_uri(self.path),
            rows,
            mode="append",
            partition_by=list(self.partition_by) or None,
            configuration=dict(self.properties) or None,
            storage_options=self.options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=batch_id)]
            ),
        )
        return True


def batch_writer(table: DeltaTable, app_id: str):
    """The foreachBatch function: the batch's rows reach the driver as Arrow and become one
    Delta commit (delta-rs writes the Parquet files and the log entry)."""

    crash_after = os.environ.get(CRASH_AFTER_COMMIT_ENV)

    def write_batch(frame, batch_id: int) -> None:
        table.write(frame.toArrow(), app_id, batch_id)
        if crash_after == str(batch_id):  # a test's crash between the table and commits/N
            os.killpg(os.getpgid(0), signal.SIGKILL)

    return write_batch
