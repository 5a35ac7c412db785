"""The autoscaler's step in a reconcile, pure: one reading per Kafka reading of a running job
into the job's window of readings, the model (autoscaler.py), and what it decided written to
status.autoscaler (docs/operator/scaling.md, "Autoscaler"); the foreign scale it sets back.

The window is kept in memory by the shell (scaling.py), per job and run (epoch, attempt):
the readings are the operator's own readings of Kafka and the runner's counters, which a
relaunch resets, and a window of them (every 30 s for minutes) would make a status write of
kilobytes per reading. `step` takes the window and returns the one to keep. What must survive
an operator restart or a leader change is in status: the executor count the autoscaler owns,
its last decision and the last foreign scale undone; the stabilization counts from
status.runningSince. A restarted operator refills the window before it decides again
(metricsWindowSeconds; scaleDownDelaySeconds for a scale-down), so it errs to no decision.

While enabled, the autoscaler owns spec.executor.instances: `foreign_scale` finds a count
that someone else set (kubectl scale, an HPA or KEDA on /scale, an edit), which the
reconcile sets back before anything is decided on it (no restart for it): `refusal` is what
status and the Event say of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from streamingjob_operator.api.job import JobMeta
from streamingjob_operator.api.models import (
    AutoscalerDecisionStatus,
    AutoscalerStatus,
    StreamingJobSpec,
    StreamingJobStatus,
)
from streamingjob_operator.rules import handover
from streamingjob_operator.rules.autoscaler import recommend
from streamingjob_operator.rules.autoscaler_values import Job, Policy, Recommendation, Sample
from streamingjob_operator.rules.history import Event, keep_warnings
from streamingjob_operator.rules.observed import TASK_MS_KEY, Report, iso, parse_time
from streamingjob_operator.rules.status import KafkaView, compute_lag, set_conditions

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


@dataclass(frozen=True)
class ScaleBack:
    """A foreign scale to set back: the status and Event to record first (none when it
    completes the autoscaler's own interrupted rescale), then spec.executor.instances."""

    owned: int
    status: StreamingJobStatus | None
    event: Event | None


@dataclass(frozen=True)
class Window:
    """A job's readings of its current run (in the shell's memory between reconciles)."""

    run: tuple[int, int]
    samples: tuple[Sample, ...] = ()
    last_read: datetime | None = None


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
    spec: StreamingJobSpec, status: StreamingJobStatus, managed_fields: Sequence[dict[str, Any]]
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


def scale_back(
    spec: StreamingJobSpec, status: StreamingJobStatus, meta: JobMeta, now: datetime
) -> ScaleBack | None:
    """A foreign scale, decided before anything else is (no restart for it): named in
    status.autoscaler.conflict (a condition) and a Warning Event kept in status, then set
    back."""
    foreign = foreign_scale(spec, status, meta.managed_fields)
    if foreign is None:
        return None
    if not foreign.message:
        return ScaleBack(foreign.owned, None, None)
    st = status.model_copy(deep=True)
    assert st.autoscaler is not None
    st.autoscaler.conflict, st.autoscaler.conflict_time = foreign.message, iso(now)
    set_conditions(st, meta.generation, now)
    refused = Event("Warning", "ScaleRefused", foreign.message)
    keep_warnings(st, meta.name, meta.uid, [refused], now)
    return ScaleBack(foreign.owned, st, refused)


def note_applied(spec: StreamingJobSpec, st: StreamingJobStatus) -> None:
    """A recorded rescale is applied once spec.executor.instances shows it."""
    a = st.autoscaler
    if a is not None and a.pending and spec.executor.instances == a.executors:
        st.autoscaler = a.model_copy(update={"pending": False})


def _instances_writer(managed_fields: Sequence[dict[str, Any]]) -> str:
    """`by <manager>` of the latest write of spec.executor.instances, if the server says."""
    writers = [
        (str(entry.get("time") or ""), str(entry.get("manager") or ""))
        for entry in managed_fields
        if "f:instances"
        in (((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:executor") or {})
    ]
    return f" by {max(writers)[1]}" if writers else ""


def step(
    spec: StreamingJobSpec,
    st: StreamingJobStatus,
    kafka: KafkaView | None,
    report: Report | None,
    window: Window | None,
    now: datetime,
) -> tuple[Rescale | None, Window | None]:
    """Samples into the window, evaluates and records in `st.autoscaler`; returns a rescale
    to apply and the window to keep (None: none, the autoscaler is off)."""
    if not spec.autoscaler.enabled:
        st.autoscaler = None
        return None, None
    a = st.autoscaler = (st.autoscaler or AutoscalerStatus()).model_copy()
    a.executors = a.executors or spec.executor.instances
    conflict_at = parse_time(a.conflict_time)
    if conflict_at is not None and now - conflict_at > CONFLICT_SHOWN:
        a.conflict = a.conflict_time = ""
    running_since = parse_time(st.running_since)
    if st.phase != "Running" or running_since is None:
        a.action, a.reason = "none", f"not running (phase {st.phase})"
        return None, window
    if (moving := handover.active(st)) is not None:
        # The running driver stops once the next one is ready: its readings measure the
        # executors it was launched with, not spec.executor.instances, which the next one
        # runs (a rescale decided on them was a second rescale for one step of the load).
        a.action = "none"
        a.reason = f"warm hand-over to {moving.pod} under way: readings wait for its run"
        return None, window
    window, new = sample(window, st, kafka, report)
    if not new and a.evaluated_at:
        return None, window  # evaluated on this reading already: no status write per reconcile
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
    rec = recommend(window.samples, job, policy_of(spec))
    _record(a, rec, len(window.samples), now)
    if rec.rates is not None and rec.rates.per_executor_rate > 0:
        a.rates = {**a.rates, str(job.executors): round(rec.rates.per_executor_rate, 1)}
    if rec.action not in ("up", "down"):
        return None, window
    rescale = Rescale(spec.executor.instances, rec.executors, rec.reason)
    a.executors, a.pending = rec.executors, True
    a.last_decision = AutoscalerDecisionStatus(
        time=iso(now),
        action=rescale.event_reason,
        from_executors=rescale.before,
        to_executors=rescale.to,
        reason=rec.reason,
    )
    return rescale, window


def sample(
    window: Window | None, st: StreamingJobStatus, kafka: KafkaView | None, report: Report | None
) -> tuple[Window, bool]:
    """The window of the current run with a reading per new Kafka reading, and whether one
    was added."""
    run = (st.epoch, st.attempt)
    if window is None or window.run != run:
        window = Window(run)
    if kafka is None or kafka.read_at in (None, window.last_read):
        return window, False
    reading = _reading(kafka, report if _of_run(report, run) else None)
    return Window(run, (*window.samples, reading)[-MAX_SAMPLES:], kafka.read_at), True


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
