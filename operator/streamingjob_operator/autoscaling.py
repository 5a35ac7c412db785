"""The autoscaler in the operator: one reading per Kafka reading of a running job, the window
of readings in memory, the model (autoscaler.py), and what it decided written to
status.autoscaler (docs/operator/scaling.md, "Autoscaler").

Readings are kept in memory, per job and run (epoch, attempt): they are the operator's own
readings of Kafka and the runner's counters, which a relaunch resets, and a window of them
(every 30 s for minutes) would make a status write of kilobytes per reading. What must
survive an operator restart or a leader change is in status: the executor count the
autoscaler owns, its last decision and the last foreign scale undone; the stabilization
counts from status.runningSince. A restarted operator refills the window before it decides
again (metricsWindowSeconds; scaleDownDelaySeconds for a scale-down), so it errs to no
decision.

While enabled, the autoscaler owns spec.executor.instances: `foreign_scale` finds a count
that someone else set (kubectl scale, an HPA or KEDA on /scale, an edit), which the
reconcile sets back before anything is decided on it (no restart for it).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from streamingjob_operator.api.models import (
    AutoscalerDecisionStatus,
    AutoscalerStatus,
    StreamingJobSpec,
    StreamingJobStatus,
)
from streamingjob_operator.rules.autoscaler import recommend
from streamingjob_operator.rules.autoscaler_values import Job, Policy, Recommendation, Sample
from streamingjob_operator.rules.observed import TASK_MS_KEY, Report, iso, parse_time
from streamingjob_operator.rules.status import KafkaView, compute_lag

JobKey = tuple[str, str]
MAX_SAMPLES = 4000  # a day of readings every 30 s, whatever the window asks
CONFLICT_SHOWN = timedelta(minutes=10)  # a foreign scale undone stays in status this long


@dataclass(frozen=True)
class Rescale:
    """A decided rescale: status says it, spec.executor.instances is set to `to` next."""

    before: int
    to: int
    reason: str

    @property
    def event_reason(self) -> str:
        return "ScaledUp" if self.to > self.before else "ScaledDown"


@dataclass(frozen=True)
class ForeignScale:
    owned: int  # the count to set spec.executor.instances back to
    message: str  # empty: the autoscaler's own rescale, interrupted; completing it


def policy_of(spec: StreamingJobSpec) -> Policy:
    a = spec.autoscaler
    return Policy(
        min_executors=a.min_executors,
        max_executors=a.max_executors,
        target_utilization=a.target_utilization,
        catch_up_seconds=float(a.catch_up_seconds),
        stabilization_seconds=float(a.stabilization_seconds),
        scale_down_delay_seconds=float(a.scale_down_delay_seconds),
        metrics_window_seconds=float(a.metrics_window_seconds),
    )


def foreign_scale(
    spec: StreamingJobSpec, status: StreamingJobStatus, managed_fields: list[dict[str, Any]]
) -> ForeignScale | None:
    """spec.executor.instances differs from the count the autoscaler owns."""
    owned = status.autoscaler.executors if status.autoscaler is not None else 0
    instances = spec.executor.instances
    if not spec.autoscaler.enabled or owned <= 0 or instances == owned:
        return None
    assert status.autoscaler is not None
    last = status.autoscaler.last_decision
    if status.autoscaler.pending and last is not None and last.from_executors == instances:
        return ForeignScale(owned, "")
    who = _instances_writer(managed_fields)
    return ForeignScale(
        owned,
        f"spec.executor.instances was set to {instances}{who} while spec.autoscaler.enabled: "
        f"set back to {owned}. The autoscaler owns the executor count: change "
        "spec.autoscaler.minExecutors/maxExecutors, or disable it to scale by hand, by a "
        "HorizontalPodAutoscaler or by KEDA",
    )


def note_applied(spec: StreamingJobSpec, st: StreamingJobStatus) -> None:
    """A recorded rescale is applied once spec.executor.instances shows it."""
    a = st.autoscaler
    if a is not None and a.pending and spec.executor.instances == a.executors:
        st.autoscaler = a.model_copy(update={"pending": False})


def _instances_writer(managed_fields: list[dict[str, Any]]) -> str:
    """`by <manager>` of the latest write of spec.executor.instances, if the server says."""
    writers = [
        (str(entry.get("time") or ""), str(entry.get("manager") or ""))
        for entry in managed_fields
        if "f:instances"
        in (((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:executor") or {})
    ]
    return f" by {max(writers)[1]}" if writers else ""


@dataclass
class _Window:
    run: tuple[int, int]
    samples: deque[Sample]
    last_read: datetime | None = None


class Autoscaling:
    """The windows of every job (thread-safe: reconciles of different jobs run in parallel)."""

    def __init__(self) -> None:
        self._windows: dict[JobKey, _Window] = {}
        self._lock = threading.Lock()

    def forget(self, key: JobKey) -> None:
        with self._lock:
            self._windows.pop(key, None)

    def step(
        self,
        key: JobKey,
        spec: StreamingJobSpec,
        st: StreamingJobStatus,
        kafka: KafkaView | None,
        report: Report | None,
        now: datetime,
    ) -> Rescale | None:
        """Samples, evaluates and records in `st.autoscaler`; returns a rescale to apply."""
        if not spec.autoscaler.enabled:
            st.autoscaler = None
            self.forget(key)
            return None
        a = st.autoscaler = (st.autoscaler or AutoscalerStatus()).model_copy()
        a.executors = a.executors or spec.executor.instances
        conflict_at = parse_time(a.conflict_time)
        if conflict_at is not None and now - conflict_at > CONFLICT_SHOWN:
            a.conflict = a.conflict_time = ""
        running_since = parse_time(st.running_since)
        if st.phase != "Running" or running_since is None:
            a.action, a.reason = "none", f"not running (phase {st.phase})"
            return None
        samples, new = self._sample(key, st, kafka, report)
        if not new and a.evaluated_at:
            return None  # evaluated on this reading already: no status write per reconcile
        if a.rates_epoch != st.epoch:  # new code, new rates
            a.rates, a.rates_epoch = {}, st.epoch
        job = Job(
            executors=spec.executor.instances,
            run_started=running_since.timestamp(),
            now=now.timestamp(),
            partitions=sum(len(p) for p in (kafka.end or {}).values()) if kafka else 0,
            cores=spec.executor.cores,
            rates={int(count): rate for count, rate in a.rates.items()},
        )
        rec = recommend(samples, job, policy_of(spec))
        _record(a, rec, len(samples), now)
        if rec.rates is not None and rec.rates.per_executor_rate > 0:
            a.rates = {**a.rates, str(job.executors): round(rec.rates.per_executor_rate, 1)}
        if rec.action not in ("up", "down"):
            return None
        rescale = Rescale(spec.executor.instances, rec.executors, rec.reason)
        a.executors, a.pending = rec.executors, True
        a.last_decision = AutoscalerDecisionStatus(
            time=iso(now),
            action=rescale.event_reason,
            from_executors=rescale.before,
            to_executors=rescale.to,
            reason=rec.reason,
        )
        return rescale

    def _sample(
        self,
        key: JobKey,
        st: StreamingJobStatus,
        kafka: KafkaView | None,
        report: Report | None,
    ) -> tuple[list[Sample], bool]:
        """Adds a reading per new Kafka reading of the current run; returns the readings and
        whether one was added."""
        run = (st.epoch, st.attempt)
        with self._lock:
            window = self._windows.get(key)
            if window is None or window.run != run:
                window = self._windows[key] = _Window(run, deque(maxlen=MAX_SAMPLES))
            new = kafka is not None and kafka.read_at not in (None, window.last_read)
            if new and kafka is not None:
                window.last_read = kafka.read_at
                window.samples.append(_reading(kafka, report if _of_run(report, run) else None))
            return list(window.samples), new


def _of_run(report: Report | None, run: tuple[int, int]) -> bool:
    return report is not None and (report.epoch, report.attempt) == run


def _reading(kafka: KafkaView, report: Report | None) -> Sample:
    assert kafka.read_at is not None
    end = kafka.end if kafka.problem is None else None
    lag = compute_lag(kafka.committed, end) if end is not None and kafka.committed else None
    totals = report.throughput if report is not None else {}
    return Sample(
        time=kafka.read_at.timestamp(),
        log_end=sum(sum(p.values()) for p in end.values()) if end is not None else None,
        lag=lag,
        batches=totals.get("batches"),
        rows=totals.get("rows"),
        busy_seconds=totals["busyMs"] / 1000 if totals else None,
        execution_seconds=totals["executionMs"] / 1000 if totals else None,
        task_seconds=totals[TASK_MS_KEY] / 1000 if TASK_MS_KEY in totals else None,
    )


def _record(a: AutoscalerStatus, rec: Recommendation, samples: int, now: datetime) -> None:
    a.action, a.reason, a.recommendation = rec.action, rec.reason, rec.executors
    a.evaluated_at, a.samples = iso(now), samples
    r = rec.rates
    if r is not None:
        a.input_rate = round(r.input_rate, 1)
        a.processing_rate = round(r.per_executor_rate, 1)
        a.busy_fraction = round(r.busy_fraction, 3)
        a.utilization = round(r.utilization, 3) if r.utilization != float("inf") else None
