"""Prometheus metrics (served on settings.metrics_port): the operator's own, and per job
what users alert on (docs/operator/status.md "Metrics", the chart's alert rules and dashboard).

Per-job series carry bounded labels only: namespace and job, plus topic and partition for
offsets, reason for restarts (the fixed vocabulary below, every value exported from the
start so that increase() sees the first restart), phase and start path (fixed sets). A job's
series go when the job is deleted (`JobMetrics.forget`). Offsets are the operator's own
readings of the group (kafka.py); the rest comes from the job's status and the driver's
report, so nothing is scraped from drivers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.rules.observed import Report, parse_time
from streamingjob_operator.rules.status import KafkaView

# restarts.failure_of, phases._while_starting and restarts.move_off: why a driver was relaunched
RESTART_REASONS = (
    "DriverFailed",
    "DriverExited",
    "DriverDeleted",
    "OOMKilled",
    "NodeLost",
    "NodeDrained",
    "StartTimeout",
)
PHASES = (
    "Pending",
    "Launching",
    "Running",
    "Restarting",
    "Stopping",
    "Suspended",
    "Failed",
    "Completed",
    "Invalid",
)

JobKey = tuple[str, str]
# streamingjob_sink_transactions' result label: the report's key it counts
SINK_RESULTS = (
    ("committed", "transactions"),
    ("replay_skipped", "replaysSkipped"),
    ("batch_aborted", "batchesAborted"),
)


@dataclass
class _Job:
    phase: str = ""
    degraded: bool = False
    start_path: str = ""
    progress_at: datetime | None = None  # latest batch, else when the run started
    commit_failures: int | None = None
    skipped_offsets: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason, current run
    sink_transactions: dict[str, int] = field(default_factory=dict)  # current run
    committed: dict[tuple[str, str], int] = field(default_factory=dict)
    end: dict[tuple[str, str], int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESTART_REASONS, 0))
    recommended: int | None = None  # status.autoscaler (spec.autoscaler.enabled)
    utilization: float | None = None


class JobMetrics(Collector):
    """Per-job series from the latest reconcile of each job; `collect` runs at scrape time
    (seconds since progress are computed then)."""

    def __init__(self) -> None:
        self._jobs: dict[JobKey, _Job] = {}
        # deleted jobs: a reconcile still in flight (a thread the daemon's cancellation cannot
        # stop) must not bring their series back; `track` clears a name created again
        self._gone: set[JobKey] = set()
        self._lock = threading.Lock()

    def update(
        self,
        key: JobKey,
        status: StreamingJobStatus,
        kafka: KafkaView | None,
        report: Report | None = None,
    ) -> None:
        degraded = next(
            (c.status == "True" for c in status.conditions if c.type == "Degraded"), False
        )
        running = status.phase == "Running"
        progress = parse_time(status.last_progress_time) or parse_time(status.running_since)
        current = report is not None and (report.epoch, report.attempt) == (
            status.epoch,
            status.attempt,
        )
        with self._lock:
            if key in self._gone:
                return
            job = self._jobs.setdefault(key, _Job())
            job.phase = status.phase
            job.degraded = degraded
            job.start_path = status.start_path
            job.progress_at = progress if running else None
            job.commit_failures = report.commit_failures if current and report else None
            job.skipped_offsets = status.data_loss_skipped_offsets
            job.dead_letters = dict(status.dead_letter_records)
            job.sink_transactions = dict(status.sink_transactions)
            scaler = status.autoscaler
            job.recommended = scaler.recommendation or None if scaler is not None else None
            job.utilization = scaler.utilization if scaler is not None else None
            if status.suspended:  # nothing reads while suspended: no offsets series
                job.committed, job.end = {}, {}
            elif kafka is not None and kafka.committed is not None and kafka.end is not None:
                job.committed = _flat(kafka.committed)
                job.end = _flat(kafka.end)

    def restarted(self, key: JobKey, reason: str) -> None:
        with self._lock:
            if key in self._gone:
                return
            job = self._jobs.setdefault(key, _Job())
            job.restarts[reason] = job.restarts.get(reason, 0) + 1

    def track(self, key: JobKey) -> None:
        """A job of this name exists (again): its series may appear."""
        with self._lock:
            self._gone.discard(key)

    def forget(self, key: JobKey) -> None:
        """The job is deleted: its series go, and stay gone until `track`."""
        with self._lock:
            self._jobs.pop(key, None)
            self._gone.add(key)

    def describe(self) -> list[Metric]:
        return []  # series appear and go with jobs

    def collect(self) -> Iterator[Metric]:
        now = datetime.now(UTC)
        with self._lock:
            jobs = {key: _copy(job) for key, job in self._jobs.items()}
        listed = sorted(jobs.items())
        yield from _offset_series(listed)
        yield from _run_series(listed, now)
        yield from _report_series(listed)
        yield from _autoscaler_series(listed)


_JOB_LABELS = ("namespace", "job")
_PARTITION_LABELS = (*_JOB_LABELS, "topic", "partition")


def _offset_series(jobs: list[tuple[JobKey, _Job]]) -> list[Metric]:
    """The group's offsets as the operator last read them, per partition."""
    committed = GaugeMetricFamily(
        "streamingjob_consumer_committed_offset",
        "The consumer group's committed offset (next record to read), per partition.",
        labels=_PARTITION_LABELS,
    )
    end = GaugeMetricFamily(
        "streamingjob_consumer_log_end_offset",
        "Log end offset (the LSO under read_committed), per partition.",
        labels=_PARTITION_LABELS,
    )
    lag = GaugeMetricFamily(
        "streamingjob_consumer_lag",
        "Log end minus committed offset per partition (a partition without a commit counts whole).",
        labels=_PARTITION_LABELS,
    )
    for (namespace, name), job in jobs:
        for (topic, partition), log_end in sorted(job.end.items()):
            labels = [namespace, name, topic, partition]
            done = job.committed.get((topic, partition))
            if done is not None:
                committed.add_metric(labels, done)
            end.add_metric(labels, log_end)
            lag.add_metric(labels, max(log_end - (done or 0), 0))
    return [committed, end, lag]


def _run_series(jobs: list[tuple[JobKey, _Job]], now: datetime) -> list[Metric]:
    """From the job's status and the operator's restarts: progress, restarts, phase, Degraded."""
    since = GaugeMetricFamily(
        "streamingjob_seconds_since_progress",
        "Seconds since the latest batch the driver reported (since the run started if "
        "none yet); only while Running.",
        labels=_JOB_LABELS,
    )
    restarts = CounterMetricFamily(
        "streamingjob_job_restarts",
        "Automatic driver relaunches by reason (since the operator started).",
        labels=[*_JOB_LABELS, "reason"],
    )
    phase = GaugeMetricFamily(
        "streamingjob_job_phase", "1 for the job's current phase.", labels=[*_JOB_LABELS, "phase"]
    )
    degraded = GaugeMetricFamily(
        "streamingjob_job_degraded", "1 while condition Degraded is True.", labels=_JOB_LABELS
    )
    for (namespace, name), job in jobs:
        if job.progress_at is not None:
            since.add_metric([namespace, name], (now - job.progress_at).total_seconds())
        for reason, count in sorted(job.restarts.items()):
            restarts.add_metric([namespace, name, reason], count)
        if job.phase in PHASES:
            phase.add_metric([namespace, name, job.phase], 1)
        degraded.add_metric([namespace, name], 1 if job.degraded else 0)
    return [since, restarts, phase, degraded]


def _report_series(jobs: list[tuple[JobKey, _Job]]) -> list[Metric]:
    """What the current run's driver reported: how it started, failed commits, skipped data."""
    start = GaugeMetricFamily(
        "streamingjob_job_start_path",
        "1 for how the current run started (restored or fresh), as the driver reported.",
        labels=[*_JOB_LABELS, "path"],
    )
    failures = GaugeMetricFamily(
        "streamingjob_offset_commit_failures",
        "Offset commits that failed in the current run (driver report).",
        labels=_JOB_LABELS,
    )
    skipped = GaugeMetricFamily(
        "streamingjob_data_loss_skipped_offsets",
        "Offsets the current run skipped, deleted or truncated before it read them "
        "(failOnDataLoss=false; driver report).",
        labels=_JOB_LABELS,
    )
    dead = GaugeMetricFamily(
        "streamingjob_dead_letter_records",
        "Records of the current run that could not be decoded and went to the dead-letter "
        "topic, by reason (driver report).",
        labels=[*_JOB_LABELS, "reason"],
    )
    sink = GaugeMetricFamily(
        "streamingjob_sink_transactions",
        "The exactly-once Kafka sink's counts in the current run (driver report): result "
        "committed (transactions), replay_skipped (ranges written already), batch_aborted.",
        labels=[*_JOB_LABELS, "result"],
    )
    for (namespace, name), job in jobs:
        for result, key in SINK_RESULTS:
            if key in job.sink_transactions:
                sink.add_metric([namespace, name, result], job.sink_transactions[key])
        if job.start_path in ("restored", "fresh"):
            start.add_metric([namespace, name, job.start_path], 1)
        if job.commit_failures is not None:
            failures.add_metric([namespace, name], job.commit_failures)
        skipped.add_metric([namespace, name], job.skipped_offsets)
        for reason, count in job.dead_letters.items():
            dead.add_metric([namespace, name, reason], count)
    return [start, failures, skipped, dead, sink]


def _autoscaler_series(jobs: list[tuple[JobKey, _Job]]) -> list[Metric]:
    """status.autoscaler's recommendation and the load it is based on."""
    recommended = GaugeMetricFamily(
        "streamingjob_autoscaler_recommended_executors",
        "The executor count the autoscaler recommends (spec.autoscaler.enabled).",
        labels=_JOB_LABELS,
    )
    utilization = GaugeMetricFamily(
        "streamingjob_autoscaler_utilization",
        "The load over the executors' measured processing rate (autoscaler).",
        labels=_JOB_LABELS,
    )
    for (namespace, name), job in jobs:
        if job.recommended is not None:
            recommended.add_metric([namespace, name], job.recommended)
        if job.utilization is not None:
            utilization.add_metric([namespace, name], job.utilization)
    return [recommended, utilization]


def _flat(nested: dict[str, dict[str, int]]) -> dict[tuple[str, str], int]:
    return {(t, p): o for t, parts in nested.items() for p, o in parts.items()}


def _copy(job: _Job) -> _Job:
    return _Job(
        phase=job.phase,
        degraded=job.degraded,
        start_path=job.start_path,
        progress_at=job.progress_at,
        commit_failures=job.commit_failures,
        skipped_offsets=job.skipped_offsets,
        dead_letters=dict(job.dead_letters),
        sink_transactions=dict(job.sink_transactions),
        committed=dict(job.committed),
        end=dict(job.end),
        restarts=dict(job.restarts),
        recommended=job.recommended,
        utilization=job.utilization,
    )


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.jobs = JobMetrics()
        self.registry.register(self.jobs)
        self.reconciles = Counter(
            "streamingjob_reconciles",
            "Reconciles run, by result (ok, retry, error).",
            ["result"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "streamingjob_reconcile_seconds",
            "Duration of one reconcile.",
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.restarts = Counter(
            "streamingjob_restarts",
            "Automatic driver restarts scheduled, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.launches = Counter(
            "streamingjob_launches",
            "Driver pods created, by start kind (fresh: attempt 1, restore: later attempts).",
            ["kind"],
            registry=self.registry,
        )
        self.errors = Counter(
            "streamingjob_errors",
            "Reconcile errors, by error type.",
            ["type"],
            registry=self.registry,
        )
        self.autoscaler_decisions = Counter(
            "streamingjob_autoscaler_decisions",
            "Autoscaler acts, by kind (ScaledUp, ScaledDown, ScaleRefused: a foreign change "
            "of the executor count undone).",
            ["action"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "streamingjob_operator_leader",
            "1 while this replica holds the leader Lease (and acts), else 0.",
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        if port:
            start_http_server(port, registry=self.registry)
