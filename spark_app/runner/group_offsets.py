"""The runner's writer of the job's consumer-group offsets (semantics rules 3, 5 and 9).

Under the runner this is the only writer: the source's own committer is switched off, so
two processes never race with commits of different batches. Three moments commit, each
only a durable batch's end offsets (its commit-log entry exists):

- each batch the runner sees finish (asynchronous, newest wins: `OffsetCommitter`);
- a graceful stop, after the query stopped: the checkpoint's last durable batch,
  synchronously and bounded in time;
- before a fresh epoch resolves `committed` offsets: the previous epoch's last durable batch.

The last two commit only where the group is behind (`ahead_of_group`): offsets never move
backwards through them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from spark_app.api import offsets as off
from spark_app.api.manifest import RunnerManifest, epoch_sink_path
from spark_app.api.offsets import Epochs, Positions
from spark_app.api.options import SourceOptions
from spark_app.api.sink_spec import TABLE_SINKS
from spark_app.kafka.config import source_options
from spark_app.kafka.group_commits import group_committer
from spark_app.kafka.metadata import KafkaMetadata
from spark_app.kafka.retry import DEADLINE_S
from spark_app.runner import eos_progress
from spark_app.runner.checkpoint_log import (
    CheckpointFiles,
    CheckpointUnreadable,
    DurableBatch,
    ahead_of_group,
)
from spark_app.runner.error_text import first_line
from spark_app.sinks.delta_sink import app_id
from spark_app.sinks.tables import sink_table
from spark_app.source.committer import OffsetCommitter
from spark_app.source.partition_state import PartitionStateTable

log = logging.getLogger(__name__)


class GroupOffsets:
    def __init__(self, options: SourceOptions, timeout_s: float = DEADLINE_S):
        self.group = options.group_id
        self.table = PartitionStateTable()
        self.metadata = KafkaMetadata(options, timeout_s=timeout_s)
        self.committer = OffsetCommitter(
            self.table, group_committer(options, timeout_s), name="group-offsets"
        )

    def batch_durable(self, end: Positions, epochs: Epochs | None = None) -> None:
        """A batch's commit-log entry exists: hand its end offsets and their leader epochs
        over (returns at once)."""
        self.table.mark_checkpointed(end)
        self.committer.submit(end, epochs=epochs)

    def wait(self, timeout: float) -> bool:
        return self.committer.flush(timeout)

    def catch_up(self, batch: DurableBatch, timeout: float) -> dict[str, Any]:
        """Commits `batch`'s end offsets where the group is behind, within `timeout` seconds
        in all (one deadline for every request: timing.DriverStop); returns what happened,
        per partition, for the log and report."""
        result: dict[str, Any] = {"batch": batch.batch_id, "endOffsets": off.to_json(batch.end)}
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(deadline - time.monotonic(), 0.1)

        try:
            self.committer.flush(left())  # a batch commit in flight lands first
            before = self.metadata.committed(sorted(batch.end), left())
        except Exception as exc:
            return {**result, "outcome": "failed", "error": f"reading the group: {exc}"}
        ahead = ahead_of_group(batch.end, before)
        result["partitions"] = {
            f"{tp[0]}-{tp[1]}": {"before": before.get(tp), "after": ahead.get(tp, before.get(tp))}
            for tp in sorted(batch.end)
        }
        if not ahead:
            return {**result, "outcome": "nothing ahead"}
        failures = self.table.snapshot().commits_failed
        self.committer.submit(ahead, again=True, epochs=batch.epochs)
        if not self.committer.flush(left()):
            return {**result, "outcome": "timed out", "error": f"no answer within {timeout:g}s"}
        if self.table.snapshot().commits_failed > failures:
            return {**result, "outcome": "failed", "error": "the commit failed (see the log)"}
        return {**result, "outcome": "committed"}

    def report(self) -> dict[str, Any]:
        snap = self.table.snapshot()
        return {
            "enabled": True,
            "by": "runner",
            "succeeded": snap.commits_succeeded,
            "failed": snap.commits_failed,
            "skipped": snap.commits_skipped,
            "lastCommitted": off.to_json(snap.column("committed")),
        }

    def close(self, timeout: float) -> None:
        self.committer.close(timeout)
        self.metadata.close()


def describe(result: dict[str, Any]) -> str:
    """'committed batch 7: orders-0 120→180, orders-1 95→95' style summary for the log."""
    outcome = result.get("outcome")
    head = f"{outcome} (batch {result.get('batch')})"
    moves = [
        f"{tp} {d['before']}→{d['after']}" for tp, d in (result.get("partitions") or {}).items()
    ]
    tail = f": {', '.join(moves)}" if moves else ""
    error = f"; {result['error']}" if result.get("error") else ""
    return head + tail + error


def for_manifest(manifest: RunnerManifest) -> GroupOffsets | None:
    """The runner's writer of the group's offsets, when the job commits them."""
    from spark_app.api.options import SourceOptions

    source = manifest.spec.job.source
    if not source.commit_offsets_on_checkpoints:
        return None
    return GroupOffsets(SourceOptions.parse(source_options(source)))


def catch_up(
    spark,
    manifest: RunnerManifest,
    group: GroupOffsets | None,
    previous: Sequence[str],
    timeout: float,
) -> dict:
    """Before a fresh epoch resolves committed offsets: the earlier epochs' last durable
    batch (`newest_durable`) reaches the group where it is ahead, so nothing they made
    durable is read again, whether the old driver stopped or crashed. When that fails,
    `catch_up_failure` says why and the runner fails the start (nothing has been read yet)."""
    starting = manifest.spec.job.source.starting_offsets
    location = previous[0] if previous else ""
    if group is None:
        result = {"outcome": "skipped", "reason": "commitOffsetsOnCheckpoints is false"}
    elif starting != "committed":
        result = {"outcome": "skipped", "reason": f"startingOffsets is {starting}"}
    else:
        try:
            location, batch = newest_durable(
                previous,
                lambda at: CheckpointFiles(spark, at),
                lambda at: previous_sink_batch(spark, manifest, at),
            )
            # the exactly-once Kafka sink's ranges of the next batch committed (rule 9)
            batch = eos_progress.with_sink_progress(spark, manifest, location, batch)
        except CheckpointUnreadable as exc:
            log.warning("previous checkpoint unreadable, its offsets are not caught up: %s", exc)
            return {"location": location, "outcome": "unreadable", "error": str(exc)}
        result = {"outcome": "nothing durable"} if batch is None else group.catch_up(batch, timeout)
    line = describe(result) if "partitions" in result else result["outcome"]
    log.info("previous epoch's checkpoint %s: %s", location, line)
    return {"location": location, **result}


def newest_durable(
    previous: Sequence[str],
    checkpoint: Callable[[str], CheckpointFiles],
    in_sink: Callable[[str], int | None],
) -> tuple[str, DurableBatch | None]:
    """The checkpoint to catch up from among the earlier epochs' (newest first) and its last
    durable batch: the newest whose query started (its offset log exists). An epoch whose
    start failed before its query (a failed catch-up, a refusal, a driver that never ran)
    made nothing durable and caught nothing up: the one before it still has to be."""
    for location in previous:
        files = checkpoint(location)
        batch = files.durable_batch(in_sink(location))
        if batch is not None or files.newest("offsets") is not None:
            return location, batch
    return (previous[0] if previous else ""), None


CATCH_UP_FAILED = ("failed", "timed out", "unreadable")


def catch_up_failure(result: dict[str, Any], manifest: RunnerManifest) -> str | None:
    """The termination message of a catch-up that did not reach the group, else None."""
    if result.get("outcome") not in CATCH_UP_FAILED:
        return None
    batch = f" batch {result['batch']}" if "batch" in result else ""
    return (
        f"the previous epoch's checkpoint {result.get('location')}: its last durable"
        f"{batch} could not be committed to group {manifest.spec.job.source.group_id!r} "
        f"({result['outcome']}: {result.get('error', '?')}). Nothing was read: the start "
        "fails and is retried with restartPolicy.backoff, so that no record the previous "
        "epoch made durable is read twice. To start without the catch-up, suspend the job "
        "and set the group's offsets with spec.offsetsAction"
    )


def previous_sink_batch(spark, manifest: RunnerManifest, previous_checkpoint: str) -> int | None:
    """The newest batch of the previous epoch's query that its sink committed (`sink_batch`),
    read through the session."""
    sink = manifest.spec.job.sink
    try:
        return sink_batch(
            sink.format,
            sink.path,
            previous_checkpoint,
            table_batch=lambda app: sink_table(spark, sink).committed_batch(app),
            log_newest=lambda log_dir: CheckpointFiles(spark, log_dir).newest(""),
        )
    except Exception as exc:  # py4j, delta-rs, PyIceberg: an unreachable store or catalog
        first = first_line(exc)
        raise CheckpointUnreadable(f"the sink at {sink.path or sink.table}: {first}") from None


def sink_batch(
    sink_format: str,
    path: str | None,
    checkpoint: str,
    table_batch: Callable[[str], int | None],
    log_newest: Callable[[str], int | None],
) -> int | None:
    """The newest batch of `checkpoint`'s query that its sink committed: in the file sink's
    log (`manifest.epoch_sink_path`'s `_spark_metadata`) or in the Delta or Iceberg table's
    (`table_batch` of its app id)."""
    if sink_format in TABLE_SINKS:
        return table_batch(app_id(checkpoint))
    directory = epoch_sink_path(path, checkpoint) if path else None
    return log_newest(f"{directory}/_spark_metadata") if directory else None


def commit_durable(
    checkpoint: CheckpointFiles, group: GroupOffsets, timeout: float, moment: str
) -> dict:
    """The checkpoint's last durable batch's end offsets reach the group where it is behind,
    synchronously and within `timeout`; a failure is logged and returned, never raised. Two
    moments: the final commit after the query stopped (its last batch may have ended after
    the last poll), and a restore (the driver before may have died between a batch's
    commit-log entry and its group commit: an idle stream would leave the group behind)."""
    try:
        batch = checkpoint.durable_batch()
    except CheckpointUnreadable as exc:
        log.warning("%s: checkpoint unreadable: %s", moment, exc)
        return {"outcome": "unreadable", "error": str(exc)}
    if batch is None:
        return {"outcome": "nothing durable"}
    result = group.catch_up(batch, timeout)
    (log.info if result["outcome"] in ("committed", "nothing ahead") else log.warning)(
        "%s of the last durable batch: %s", moment, describe(result)
    )
    return result
