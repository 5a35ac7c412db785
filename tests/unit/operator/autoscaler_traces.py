"""Metric traces for the autoscaler's model, and the Flink operator's algorithm beside it.

Load profiles are data: (from second, records/s) steps. `simulate` turns one into the
readings the operator takes (every SAMPLE_EVERY s: the log ends and lag a lag reader sees,
the batch counters a runner reports) of a job that runs micro-batches: every TRIGGER s a
batch takes what is there (at most MAX_BATCH_ROWS rows) and needs BATCH_OVERHEAD s plus
rows / (executors x PER_EXECUTOR) s (the executors' task time: rows / PER_EXECUTOR s in all,
whatever the count); an overrun batch is followed at once. Closed loop: a
recommended rescale stops the run for RESTART_DOWNTIME s (the restore) and starts a new
one with the new count and fresh counters, as the operator does. Two traces are literal
readings (a stalled job, missing samples).

`flink_recommend` is the Flink Kubernetes operator's autoscaler as its documentation states
it (docs/content/docs/custom-resource/autoscaler.md and the autoscaler configuration table
of flink-kubernetes-operator 1.7-1.9): metrics are collected only after the stabilization
interval, a decision needs a full metrics window, the input rate and true processing rate
are window averages, the target capacity is input / target utilization + lag / catch-up
duration (+ the input that accumulates during restart.time, caught up in the same
duration), and the job is rescaled when the true processing rate leaves [capacity needed at
target + boundary, capacity needed at target - boundary]; a scale-down is at most
scale-down.max-factor 0.6 of the current parallelism. Defaults (FLINK_DEFAULTS): metrics.window
15 min, stabilization.interval 5 min, target.utilization 0.7, target.utilization.boundary
0.3, catch-up.duration 30 min, restart.time 5 min.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from streamingjob_operator.rules.autoscaler import recommend
from streamingjob_operator.rules.autoscaler_values import Job, Policy, Recommendation, Sample

SAMPLE_EVERY = 30.0  # the operator's default KAFKA_POLL_SECONDS
TRIGGER = 5.0
BATCH_OVERHEAD = 0.5
PER_EXECUTOR = 1000.0  # records/s one executor processes
RESTART_DOWNTIME = 25.0  # a graceful stop and restore (docs/benchmarks.md: scale ~24 s on kind)
PARTITIONS = 12
MAX_BATCH_ROWS = 100_000  # the job's maxOffsetsPerTrigger

R = 600.0  # one executor keeps up at 60 % (utilization 0.6)

# --- load profiles (from second, records/s) ---------------------------------------------
STEP_UP = [(0, R), (900, 3 * R)]
STEP_DOWN = [(0, 3 * R), (1200, R)]
DIP_SHORTER_THAN_DELAY = [(0, 3 * R), (1200, R), (1440, 3 * R)]  # 4 min low, delay 10 min
SPIKE_UP = [(0, R), (900, 5 * R), (960, R)]  # one minute at 5R
OSCILLATING = [(t, R if (t // 120) % 2 == 0 else 3 * R) for t in range(0, 7200, 120)]

# --- literal readings: (time, log end, lag, batches, rows, busy seconds) ------------------
STALLED = [
    (0, 0, 0, 0, 0, 0.0),
    (30, 18000, 500, 6, 17500, 18.0),
    (60, 36000, 700, 12, 35300, 36.5),
    (90, 54000, 1000, 18, 53000, 54.0),
    (120, 72000, 18800, 19, 53200, 54.4),  # the last batch at ~95 s, then nothing
    (150, 90000, 36800, 19, 53200, 54.4),
    (180, 108000, 54800, 19, 53200, 54.4),
    (210, 126000, 72800, 19, 53200, 54.4),
    (240, 144000, 90800, 19, 53200, 54.4),
]
MISSING = [
    (0, 0, 0, 0, 0, 0.0),
    (30, 18000, 600, 6, 17400, 18.0),
    (60, 36000, None, 12, 35400, 36.0),  # the lag reader timed out
    (90, 54000, None, 18, 53400, 54.0),
    (120, 72000, 600, 24, 71400, 72.0),
    (150, None, None, None, None, None),
    (180, 108000, 600, 36, 107400, 108.0),
]


Reading = tuple[float, int | None, int | None, int | None, int | None, float | None]


def readings(rows: Sequence[Reading]) -> list[Sample]:
    """Literal readings; the executors' part of each batch is its duration less 0.5 s."""
    return [
        Sample(t, end, lag, b, n, busy, None if busy is None or b is None else busy - 0.5 * b)
        for t, end, lag, b, n, busy in rows
    ]


def rate_at(profile: Sequence[tuple[float, float]], t: float) -> float:
    rate = 0.0
    for start, value in profile:
        if t >= start:
            rate = value
    return rate


@dataclass
class Decision:
    time: float
    action: str
    before: int
    after: int
    reason: str


@dataclass
class Run:
    """The job as the operator sees it: the current run's readings and rescales."""

    executors: int
    started: float
    samples: list[Sample] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    lags: list[tuple[float, int]] = field(default_factory=list)


Recommender = Callable[[Sequence[Sample], Job, Policy], Recommendation]


def simulate(
    profile: Sequence[tuple[float, float]],
    *,
    executors: int,
    duration: float,
    policy: Policy,
    model: Recommender = recommend,
    closed_loop: bool = True,
) -> Run:
    """Runs the job second by second and the model at every reading (see the top)."""
    run = Run(executors, 0.0)
    log_end = committed = 0.0
    batches = rows = 0
    busy = execution = tasks = 0.0
    batch_end: float | None = None
    batch_rows = 0
    batch_took = 0.0
    paused_until = next_trigger = 0.0
    for second in range(int(duration) + 1):
        t = float(second)
        if second:
            log_end += rate_at(profile, t - 1)
        if batch_end is not None and t >= batch_end:
            committed += batch_rows
            batches, rows = batches + 1, rows + batch_rows
            busy += batch_took  # Spark reports a batch's durations when it ends
            execution += batch_took - BATCH_OVERHEAD
            tasks += batch_rows / PER_EXECUTOR
            batch_end = None
        if batch_end is None and t >= max(paused_until, next_trigger):
            next_trigger = t + TRIGGER  # a batch that overruns its interval is followed at once
            batch_rows = min(int(log_end - committed), MAX_BATCH_ROWS)
            if batch_rows > 0:
                batch_took = BATCH_OVERHEAD + batch_rows / (run.executors * PER_EXECUTOR)
                batch_end = t + batch_took
        if second % int(SAMPLE_EVERY) or t < paused_until:
            continue
        run.samples.append(
            Sample(t, int(log_end), int(log_end - committed), batches, rows, busy, execution, tasks)
        )
        run.lags.append((t, int(log_end - committed)))
        job = Job(run.executors, run.started, t, PARTITIONS, 1)
        rec = model(run.samples, job, policy)
        if rec.action in ("up", "down"):
            run.decisions.append(Decision(t, rec.action, run.executors, rec.executors, rec.reason))
            if closed_loop:  # the restore: a new run with the new count and fresh counters
                run.executors, run.started = rec.executors, t + RESTART_DOWNTIME
                run.samples = []
                paused_until = t + RESTART_DOWNTIME
                batches = rows = 0
                busy = execution = tasks = 0.0
    return run


# --- the Flink operator's autoscaler, its documented defaults ------------------------------

FLINK_DEFAULTS = Policy(
    min_executors=1,
    max_executors=PARTITIONS,
    target_utilization=0.7,
    catch_up_seconds=1800.0,
    stabilization_seconds=300.0,
    scale_down_delay_seconds=0.0,
    metrics_window_seconds=900.0,
    dead_band=0.3,
)
FLINK_RESTART_SECONDS = 300.0
FLINK_MAX_SCALE_DOWN = 0.6


def flink_recommend(samples: Sequence[Sample], job: Job, policy: Policy) -> Recommendation:
    current = job.executors
    collecting_from = job.run_started + policy.stabilization_seconds
    window = [
        s
        for s in samples
        if s.complete() and s.time >= max(collecting_from, job.now - policy.metrics_window_seconds)
    ]
    if job.now < collecting_from or not window:
        return Recommendation("none", current, "stabilizing")
    if window[-1].time - window[0].time < policy.metrics_window_seconds - SAMPLE_EVERY:
        return Recommendation("none", current, "collecting a full metrics window")
    first, last = window[0], window[-1]
    assert first.log_end is not None and last.log_end is not None and last.lag is not None
    assert first.rows is not None and last.rows is not None
    assert first.busy_seconds is not None and last.busy_seconds is not None
    input_rate = (last.log_end - first.log_end) / (last.time - first.time)
    busy = last.busy_seconds - first.busy_seconds  # Flink: busy time of the tasks
    if busy <= 0:
        return Recommendation("none", current, "no busy time")
    true_rate = (last.rows - first.rows) / busy

    def capacity(utilization: float, with_restart: bool) -> float:
        catch_up = last.lag / policy.catch_up_seconds
        restart = input_rate * FLINK_RESTART_SECONDS / policy.catch_up_seconds
        return input_rate / utilization + catch_up + (restart if with_restart else 0.0)

    u, b = policy.target_utilization, policy.dead_band
    if capacity(u + b, False) <= true_rate <= capacity(u - b, True):
        return Recommendation("hold", current, "within the utilization boundary")
    wanted = math.ceil(current * capacity(u, True) / true_rate)
    wanted = max(wanted, math.ceil(current * (1 - FLINK_MAX_SCALE_DOWN)))
    wanted = max(policy.min_executors, min(policy.max_executors, wanted))
    if wanted == current:
        return Recommendation("hold", current, "same parallelism")
    action = "up" if wanted > current else "down"
    return Recommendation(action, wanted, f"flink: {current} -> {wanted}")
