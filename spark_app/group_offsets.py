"""The runner's writer of the job's consumer-group offsets (semantics rules 3 and 5).

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
from typing import Any

from spark_app import offsets as off
from spark_app.checkpoint_log import DurableBatch, ahead_of_group
from spark_app.committer import OffsetCommitter
from spark_app.kafka_metadata import KafkaMetadata, group_committer
from spark_app.offsets import Positions
from spark_app.options import SourceOptions
from spark_app.partition_state import PartitionStateTable

log = logging.getLogger(__name__)


class GroupOffsets:
    def __init__(self, options: SourceOptions, timeout_s: float = 10.0):
        self.group = options.group_id
        self.table = PartitionStateTable()
        self.metadata = KafkaMetadata(options, timeout_s=timeout_s)
        self.committer = OffsetCommitter(
            self.table, group_committer(options, timeout_s), name="group-offsets"
        )

    def batch_durable(self, end: Positions) -> None:
        """A batch's commit-log entry exists: hand its end offsets over (returns at once)."""
        self.table.mark_checkpointed(end)
        self.committer.submit(end)

    def wait(self, timeout: float) -> bool:
        return self.committer.flush(timeout)

    def catch_up(self, batch: DurableBatch, timeout: float) -> dict[str, Any]:
        """Commits `batch`'s end offsets where the group is behind, waiting at most
        `timeout` seconds; returns what happened, per partition, for the log and report."""
        result: dict[str, Any] = {"batch": batch.batch_id, "endOffsets": off.to_json(batch.end)}
        try:
            self.committer.flush(timeout)  # a batch commit in flight lands first
            before = self.metadata.committed(sorted(batch.end))
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
        self.committer.submit(ahead, again=True)
        if not self.committer.flush(timeout):
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
