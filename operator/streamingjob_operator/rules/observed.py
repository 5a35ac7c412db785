"""What the operator observed about one job, as plain values (input of the pure decision).

`pod_info` and `parse_report` turn raw API objects into these values; they make no API calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spark_app.api.sink_rules import SINK_TALLY_KEYS
from streamingjob_operator.api.naming import LABEL_ATTEMPT, LABEL_DRIVER, LABEL_EPOCH, LABEL_ROLE


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Termination:
    exit_code: int
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class PodInfo:
    """One pod of the job: a driver (ours) or an executor (created by a driver)."""

    name: str
    role: str  # "driver" | "executor"
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    epoch: int | None = None
    attempt: int | None = None
    driver_pod: str = ""  # executors: the driver that owns them
    termination: Termination | None = None
    reason: str = ""  # pod.status.reason, e.g. Evicted
    deleting_since: datetime | None = None
    ready_unknown_since: datetime | None = None  # the API server's view: Ready=Unknown since
    node: str = ""  # spec.nodeName ("" while unscheduled)
    # The operator's own view of the node (nodes.NodeTracker): when its kubelet last renewed
    # the node's lease, as this operator saw it (None: unknown, e.g. leases not readable), and
    # whether the node is cordoned (a drain is coming).
    node_heard_at: datetime | None = None
    node_cordoned: bool = False
    # ... and, without a word of the node's kubelet, since when that view could have seen it
    # confirm a deletion: the view's start or last return, now while it is out (None: no view)
    deletion_confirmable_since: datetime | None = None
    termination_grace_seconds: float = 30.0
    # why a pod that is not running yet cannot start: "<reason>: <message>" of the scheduler
    # (Unschedulable) or of the main container's waiting state (ImagePullBackOff, ...)
    not_starting: str = ""

    @property
    def owner(self) -> str:
        """The driver this pod belongs to: itself, or an executor's driver."""
        return self.name if self.role == "driver" else self.driver_pod


def of_driver(driver: str, pods: Iterable[PodInfo]) -> tuple[list[PodInfo], list[PodInfo]]:
    """A driver's pods (itself and its executors), and the others ("" owns none)."""
    mine: list[PodInfo] = []
    others: list[PodInfo] = []
    for p in pods:
        (mine if driver and p.owner == driver else others).append(p)
    return mine, others


@dataclass(frozen=True)
class Report:
    """The runner's report (`<job>-report` ConfigMap, key report.json)."""

    epoch: int
    attempt: int
    start_path: str = ""
    restored_batch: int | None = None
    group_id: str = ""  # the group the run reads as ("": a runner that does not say)
    start_detail: str = ""
    latest_batch: dict[str, Any] = field(default_factory=dict)
    last_progress_time: str = ""
    commit_failures: int | None = None  # offset commits that failed in this run
    commit_successes: int | None = None  # ... and that succeeded
    data_loss_skipped_offsets: int = 0  # offsets this run skipped (failOnDataLoss=false)
    dead_letter_records: dict[str, int] = field(default_factory=dict)  # this run's, by reason
    # the exactly-once Kafka sink's counts in this run (spark_app/sinks/sink_tally.py)
    sink_transactions: dict[str, int] = field(default_factory=dict)
    # the run's batch totals (batches, rows, busyMs, executionMs) and, from a runner that
    # measures it, the executors' task time (taskMs): the autoscaler's samples
    throughput: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Signal:
    """A warm hand-over's signal in the report ConfigMap: `handover.json` (the waiting
    runner's readiness: state warming | ready | failed) or `go.json` (the operator's go,
    state "go")."""

    pod: str
    epoch: int
    attempt: int
    state: str = ""
    error: str = ""

    def names(self, pod: str, epoch: int, attempt: int) -> bool:
        return (self.pod, self.epoch, self.attempt) == (pod, epoch, attempt)


@dataclass(frozen=True)
class Observed:
    now: datetime
    pods: tuple[PodInfo, ...] = ()
    report: Report | None = None
    invalid: object | None = None  # the validation problems (their str is the message)
    handover: Signal | None = None  # handover.json
    go: Signal | None = None  # go.json
    # nodes the operator counts lost (not heard from for the grace): a standby is kept off them
    lost_nodes: frozenset[str] = frozenset()
    # driver pods gone with their deletion after a failure of their own, as their last watch
    # event showed them (seen.Seen.ended_drivers), whose end the history does not tell yet
    gone: tuple[PodInfo, ...] = ()


def pod_info(pod: dict[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}

    def _int(value: Any) -> int | None:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    termination = None
    not_starting = ""
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") not in ("driver", "spark-kubernetes-driver", "executor"):
            continue
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in NORMAL_WAITING_REASONS:
            not_starting = _reason_message(waiting)
        term = (cs.get("state") or {}).get("terminated")
        if term:
            termination = Termination(
                exit_code=int(term.get("exitCode", 0)),
                reason=term.get("reason") or "",
                message=(term.get("message") or "")[:600],
            )
    ready_unknown = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "Unknown":
            ready_unknown = parse_time(cond.get("lastTransitionTime"))
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            not_starting = not_starting or _reason_message(cond)
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return PodInfo(
        name=meta.get("name", ""),
        role=labels.get(LABEL_ROLE, "driver"),
        phase=status.get("phase") or "Pending",
        epoch=_int(labels.get(LABEL_EPOCH)),
        attempt=_int(labels.get(LABEL_ATTEMPT)),
        driver_pod=labels.get(LABEL_DRIVER, ""),
        termination=termination,
        reason=status.get("reason") or "",
        deleting_since=parse_time(meta.get("deletionTimestamp")),
        ready_unknown_since=ready_unknown,
        node=(pod.get("spec") or {}).get("nodeName") or "",
        termination_grace_seconds=float(grace) if isinstance(grace, int | float) else 30.0,
        not_starting=not_starting,
    )


# A container waits for these on every start; any other waiting reason is a problem.
NORMAL_WAITING_REASONS = ("ContainerCreating", "PodInitializing")


def _reason_message(state: dict[str, Any]) -> str:
    reason, message = state.get("reason") or "", (state.get("message") or "")[:300]
    return f"{reason}: {message}" if message else reason


def _describe_start(data: dict[str, Any]) -> str:
    if data.get("startPath") == "restored":
        batch = data.get("restoredBatch")
        return f"restored from checkpoint batch {batch}" if batch is not None else "restored"
    origins: dict[str, list[str]] = {}
    for topic, partitions in sorted((data.get("startOffsets") or {}).items()):
        for partition, entry in sorted(partitions.items(), key=lambda kv: str(kv[0])):
            origin = entry.get("from", "?") if isinstance(entry, dict) else "?"
            origins.setdefault(origin, []).append(f"{topic}-{partition}")
    if not origins:
        return "fresh"
    parts = []
    for origin, tps in sorted(origins.items()):
        shown = ", ".join(tps[:8]) + (f" (+{len(tps) - 8})" if len(tps) > 8 else "")
        parts.append(f"{origin} for {shown}")
    return "fresh: " + "; ".join(parts)


def parse_report(configmap: dict[str, Any] | None) -> Report | None:
    """The report, or None when absent or malformed (a driver may write garbage)."""
    if not configmap:
        return None
    raw = (configmap.get("data") or {}).get("report.json")
    if not raw:
        return None
    try:
        data = json.loads(raw)
        epoch, attempt = int(data["epoch"]), int(data["attempt"])
    except (ValueError, KeyError, TypeError):
        return None
    latest = data.get("latestBatch") or {}
    latest_view = {k: latest[k] for k in ("batchId", "numInputRows", "timestamp") if k in latest}
    restored = data.get("restoredBatch")
    commits = data.get("commits") if isinstance(data.get("commits"), dict) else {}
    return Report(
        epoch=epoch,
        attempt=attempt,
        start_path=str(data.get("startPath") or ""),
        restored_batch=restored if isinstance(restored, int) else None,
        group_id=str(data.get("groupId") or ""),
        start_detail=_describe_start(data),
        latest_batch=latest_view,
        last_progress_time=str(latest.get("timestamp") or ""),
        commit_failures=_int_or_none(commits.get("failed")),
        commit_successes=_int_or_none(commits.get("succeeded")),
        data_loss_skipped_offsets=max(_int_or_none(data.get("dataLossSkippedOffsets")) or 0, 0),
        dead_letter_records=_dead_letter_records(data.get("deadLetterRecords")),
        sink_transactions=_counts(data.get("sinkTransactions"), SINK_TALLY_KEYS),
        throughput=_throughput(data.get("throughput")),
    )


THROUGHPUT_KEYS = ("batches", "rows", "busyMs", "executionMs")
# The executors' time in tasks (spark_app/runner/runner.py executor_task_ms): the autoscaler's
# processing rate per executor. Optional: a runner that cannot read it (or an older one)
# leaves it out, and the autoscaler falls back to addBatch time.
TASK_MS_KEY = "taskMs"
# a reason of the source's decoder (spark_app/formats/decoding.py); a few at most: metric labels
_REASON = re.compile(r"^[a-z][a-z-]{0,39}$")
_MAX_REASONS = 8


def _dead_letter_records(raw: Any) -> dict[str, int]:
    """Counts by reason, non-negative, only reasons that look like one (a driver may write
    garbage, and each reason is a metric label)."""
    if not isinstance(raw, dict):
        return {}
    counts = {str(k): n for k, v in raw.items() if _REASON.match(str(k)) and (n := _int_or_none(v))}
    return dict(sorted((k, n) for k, n in counts.items() if n > 0)[:_MAX_REASONS])


def _counts(raw: Any, keys: tuple[str, ...]) -> dict[str, int]:
    """Each of `keys` as a non-negative integer (0 when missing or garbage), or nothing when
    the driver reported none."""
    if not isinstance(raw, dict):
        return {}
    return {k: max(_int_or_none(raw.get(k)) or 0, 0) for k in keys}


def _throughput(raw: Any) -> dict[str, int]:
    """All four totals as non-negative integers, or nothing (a driver may write garbage);
    taskMs beside them when it is one too."""
    if not isinstance(raw, dict):
        return {}
    values = {k: _int_or_none(raw.get(k)) for k in THROUGHPUT_KEYS}
    if any(v is None or v < 0 for v in values.values()):
        return {}
    totals = {k: v for k, v in values.items() if v is not None}
    task_ms = _int_or_none(raw.get(TASK_MS_KEY))
    if task_ms is not None and task_ms >= 0:
        totals[TASK_MS_KEY] = task_ms
    return totals


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


HANDOVER_KEY = "handover.json"
GO_KEY = "go.json"


def parse_signal(configmap: dict[str, Any] | None, key: str) -> Signal | None:
    """`handover.json` or `go.json` of the report ConfigMap, or None when absent or
    malformed (a driver may write garbage)."""
    raw = ((configmap or {}).get("data") or {}).get(key)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        pod, epoch, attempt = str(data["pod"]), int(data["epoch"]), int(data["attempt"])
    except (ValueError, KeyError, TypeError):
        return None
    state = "go" if key == GO_KEY else str(data.get("state") or "")
    return Signal(pod, epoch, attempt, state, str(data.get("error") or "")[:600])
