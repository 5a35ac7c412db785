"""The source's view of its run for the runner (a different process): how it started, the
offsets it knows, its commits, skipped offsets and dead letters, as a JSON file replaced
atomically (the runner merges it into its report: spark_app/runner/report.py)."""

from __future__ import annotations

import json
import os
from typing import Any

from spark_app.api import offsets as off
from spark_app.api.offsets import StartDecision, TopicPartition
from spark_app.source.partition_state import Snapshot


def report_of(
    snap: Snapshot,
    started_fresh: bool,
    fresh_start: dict[TopicPartition, StartDecision] | None,
    dead: dict[str, int],
    commits_enabled: bool,
) -> dict[str, Any]:
    return {
        "startPath": "fresh" if started_fresh else "restored",
        "startOffsets": _decisions_json(fresh_start or {}),
        "latestOffsets": off.to_json(snap.column("latest")),
        "checkpointedOffsets": off.to_json(snap.column("checkpointed")),
        "commits": {
            "enabled": commits_enabled,
            "succeeded": snap.commits_succeeded,
            "failed": snap.commits_failed,
            "skipped": snap.commits_skipped,
            "lastCommitted": off.to_json(snap.column("committed")),
        },
        "dataLossSkippedOffsets": snap.data_loss_skipped_offsets,
        "deadLetterRecords": dead,  # this run's copies on the dead-letter topic, by reason
    }


def write(path: str, report: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        json.dump(report, out)
    os.replace(tmp, path)


def _decisions_json(decisions: dict[TopicPartition, StartDecision]) -> dict:
    nested: dict[str, dict[str, dict]] = {}
    for (topic, partition), d in sorted(decisions.items()):
        nested.setdefault(topic, {})[str(partition)] = {"offset": d.offset, "from": d.origin}
    return nested
