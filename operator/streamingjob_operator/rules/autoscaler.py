"""The autoscaler's model: a pure function (a window of samples, the current executor count,
the policy) -> a recommendation and its reason (docs/operator/scaling.md, "Autoscaler").

    input rate      = growth of the log ends of the job's partitions per second
    processing rate = input rows per second of the executors' task time, times the task
                      slots of an executor (executor.cores): per executor. A runner that does
                      not report task time: rows per second of Spark's addBatch (the part of
                      each batch the executors run) over the current executors
    load            = max(input rate, u x (input rate + lag / catchUpSeconds))
    utilization     = load / (executors x processing rate per executor)
    wanted          = the fewest executors n with n x rate(n) x u >= load,   u = targetUtilization
                      within [minExecutors, maxExecutors] and ceil(partitions / cores); rate(n)
                      is the rate last measured with n executors this epoch (Job.rates), else
                      the current one: ceil(load / (u x processing rate per executor))

The headroom kept for the target utilization also works off the backlog: executors are added
for the lag only when the input plus lag / catchUpSeconds needs more than that headroom
(Flink adds lag / catch-up on top of input / u, which over-provisions after every step and
then takes a second rescale down).

A change is recommended only outside the dead band [target - DEAD_BAND, target + DEAD_BAND]:
up when every interval of the metrics window needed more than the executors have even at
the band's top (a sustained load, not a spike), down when every interval of the last
scaleDownDelaySeconds needed less even at the band's bottom, and never below what the peak
interval of that span needs at the band's top. No decision while the run stabilizes
(stabilizationSeconds after its launch: also after each rescale, which is a launch), on
missing or inconsistent samples, on a window not yet full, on too few batches, on a stalled
job, and while a backlog drains within catchUpSeconds.

Samples belong to one run (epoch, attempt): counters are the runner's, reset by a relaunch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from streamingjob_operator.rules.autoscaler_values import (
    Action,
    Job,
    Policy,
    Rates,
    Recommendation,
    Sample,
)

# A processing rate measured on fewer batches than this is not trusted.
MIN_BATCHES = 3
# The window must be this full (the first sample comes one reading after the launch).
MIN_COVERAGE = 0.8
# More samples than this share without a reading: the metrics are missing.
MAX_MISSING_SHARE = 0.25
# A gap between readings longer than this share of the window: samples are missing.
MAX_GAP_SHARE = 0.5
# A backlog below this many seconds of input is the steady lag of a running job, not a catch-up.
MIN_BACKLOG_SECONDS = 10.0


@dataclass(frozen=True)
class _Window:
    samples: tuple[Sample, ...]  # complete, in time order

    @property
    def span(self) -> float:
        return self.samples[-1].time - self.samples[0].time

    def delta(self, name: str) -> float:
        first, last = self.samples[0], self.samples[-1]
        return float(getattr(last, name)) - float(getattr(first, name))

    def interval_loads(self, policy: Policy) -> list[float]:
        """Per interval between readings: its load (its input rate, the lag at its end)."""
        loads = []
        for a, b in pairwise(self.samples):
            assert a.log_end is not None and b.log_end is not None and b.lag is not None
            rate = (b.log_end - a.log_end) / (b.time - a.time)
            loads.append(_load(rate, b.lag, policy))
        return loads


def _load(input_rate: float, lag: float, policy: Policy) -> float:
    catch_up = input_rate + lag / policy.catch_up_seconds
    return max(input_rate, policy.target_utilization * catch_up)


def recommend(samples: Sequence[Sample], job: Job, policy: Policy) -> Recommendation:
    """The one decision of the autoscaler (see the module's text)."""
    current = job.executors
    since = job.now - job.run_started
    if since < policy.stabilization_seconds:
        return _none(
            current,
            f"stabilizing: the run started {since:.0f}s ago, "
            f"stabilizationSeconds={policy.stabilization_seconds:g}",
        )
    if bounded := _out_of_bounds(current, policy):
        return bounded
    horizon = max(policy.metrics_window_seconds, policy.scale_down_delay_seconds)
    of_run = sorted((s for s in samples if s.time >= job.run_started), key=lambda s: s.time)
    recent = _from(of_run, job.now - horizon)
    window, problem = _window(recent, job.now, policy.metrics_window_seconds)
    if window is None:
        return _none(current, problem)
    if problem := _inconsistent(window):
        return _none(current, f"noisy metrics: {problem}")
    batches = window.delta("batches")
    if batches < MIN_BATCHES:
        return _few_batches(window, recent, job, policy, int(batches))
    rates = _rates(window, job, policy)
    return _decide(window, recent, job, policy, rates)


def _out_of_bounds(current: int, policy: Policy) -> Recommendation | None:
    """A count outside [min, max] (the bounds changed, or the autoscaler was just enabled)
    moves to the nearest bound without waiting for metrics."""
    if current < policy.min_executors:
        target, bound = policy.min_executors, "minExecutors"
    elif current > policy.max_executors:
        target, bound = policy.max_executors, "maxExecutors"
    else:
        return None
    action: Action = "up" if target > current else "down"
    return Recommendation(action, target, f"{current} -> {target} executors: {bound}", target)


def _none(current: int, reason: str, rates: Rates | None = None) -> Recommendation:
    return Recommendation("none", current, reason, rates=rates)


def _window(recent: list[Sample], now: float, length: float) -> tuple[_Window | None, str]:
    """The complete samples of the last `length` seconds, or why there are not enough."""
    if not recent:
        return None, "no samples yet"
    if not recent[-1].complete():
        return None, f"missing metrics: the latest reading lacks {_missing(recent[-1])}"
    inside = _from(recent, now - length)
    missing = sum(1 for s in inside if not s.complete())
    if missing > MAX_MISSING_SHARE * len(inside):
        return None, f"missing metrics: {missing} of {len(inside)} readings incomplete"
    complete = tuple(s for s in inside if s.complete())
    gaps = [b.time - a.time for a, b in pairwise(complete)]
    if gaps and max(gaps) > MAX_GAP_SHARE * length:
        return None, f"missing samples: {max(gaps):.0f}s without a reading"
    window = _Window(complete)
    if len(complete) < 2 or window.span < MIN_COVERAGE * length:
        covered = window.span if len(complete) >= 2 else 0.0
        return None, f"window not full: {covered:.0f}s of metricsWindowSeconds={length:g}"
    return window, ""


def _from(recent: list[Sample], start: float) -> list[Sample]:
    """The readings from `start` on, and the last one before it: the newest reading is up to
    a reading interval old when the model runs, so the readings after `start` alone would
    span a window less up to two intervals (a window of a few readings never full)."""
    before = [s for s in recent if s.time <= start]
    return recent[len(before) - 1 :] if before else recent


def _missing(sample: Sample) -> str:
    names = ("log_end", "lag", "batches", "rows", "busy_seconds")
    return ", ".join(n for n in names if getattr(sample, n) is None)


def _inconsistent(window: _Window) -> str:
    for a, b in pairwise(window.samples):
        for name in ("log_end", "batches", "rows", "busy_seconds", "task_seconds"):
            if (getattr(b, name) or 0) < (getattr(a, name) or 0):
                return f"{name} went back at t={b.time:g}"
    busy = window.delta("busy_seconds")
    if busy > 1.5 * window.span + 60:  # batches run one at a time: busy <= wall (one in flight)
        return f"{busy:.0f} busy seconds in a {window.span:.0f}s window"
    return ""


def _few_batches(
    window: _Window, recent: list[Sample], job: Job, policy: Policy, batches: int
) -> Recommendation:
    """Without a processing rate: an idle job may go down to the minimum, a stalled one is
    left to the restart policy, anything else waits for batches."""
    current, last = job.executors, window.samples[-1]
    if window.delta("log_end") == 0 and last.lag == 0:
        span = [s for s in recent if s.time >= job.now - policy.scale_down_delay_seconds]
        idle = all(s.lag == 0 and s.log_end == last.log_end for s in span if s.complete())
        covered = span[-1].time - span[0].time if span else 0.0
        if (
            current > policy.min_executors
            and idle
            and covered >= MIN_COVERAGE * (policy.scale_down_delay_seconds)
        ):
            return Recommendation(
                "down",
                policy.min_executors,
                f"idle for {covered:.0f}s (no input, no lag): down to minExecutors",
                wanted=policy.min_executors,
            )
        return Recommendation("hold", current, "idle: no input and no lag")
    if batches == 0:
        return _none(
            current,
            f"stalled: no batch completed in {window.span:.0f}s with lag {last.lag}; "
            "more executors would not help (the restart policy and alerts handle it)",
        )
    return _none(
        current, f"too few batches: {batches} in {window.span:.0f}s (at least {MIN_BATCHES})"
    )


def _per_executor_rate(window: _Window, job: Job) -> float:
    """Rows per second of task time times an executor's task slots: what one executor
    processes, whatever the count (a batch's planning and commit do not shrink with more
    executors, so a rate per second of addBatch falls as executors are added)."""
    rows = window.delta("rows")
    if all(s.task_seconds is not None for s in window.samples):
        tasks = window.delta("task_seconds")
        return rows / tasks * max(job.cores, 1) if tasks > 0 else 0.0
    execution = window.delta("execution_seconds")
    return rows / execution / job.executors if execution > 0 else 0.0


def _rates(window: _Window, job: Job, policy: Policy) -> Rates:
    span, last = window.span, window.samples[-1]
    per_executor = _per_executor_rate(window, job)
    processing = per_executor * job.executors
    input_rate = window.delta("log_end") / span
    lag = int(last.lag or 0)
    load = _load(input_rate, lag, policy)
    return Rates(
        input_rate=input_rate,
        processing_rate=processing,
        per_executor_rate=per_executor,
        busy_fraction=window.delta("busy_seconds") / span,
        lag=lag,
        load=load,
        utilization=load / processing if processing > 0 else math.inf,
    )


def _top(job: Job, policy: Policy) -> int:
    top = policy.max_executors
    if job.partitions > 0:  # more task slots than partitions read nothing more
        top = min(top, max(math.ceil(job.partitions / max(job.cores, 1)), policy.min_executors))
    return top


def _needed(load: float, utilization: float, r: Rates, job: Job, policy: Policy) -> int:
    """The fewest executors (within the bounds) whose rate at that utilization carries the
    load: at a count this epoch ran with, its measured rate; else the current one."""
    top = _top(job, policy)
    for count in range(policy.min_executors, top):
        rate = r.per_executor_rate if count == job.executors else job.rates.get(count)
        if count * (rate or r.per_executor_rate) * utilization >= load - 1e-9:
            return count
    return max(policy.min_executors, top)


def _decide(
    window: _Window, recent: list[Sample], job: Job, policy: Policy, r: Rates
) -> Recommendation:
    current = job.executors
    if r.per_executor_rate <= 0:
        return _none(current, "no processing rate: the batches read no rows", r)
    u = policy.target_utilization
    wanted = _needed(r.load, u, r, job, policy)
    if drain := _catching_up(window, r, policy):
        return Recommendation("none", current, drain, wanted, r)
    top, bottom = u + policy.dead_band, u - policy.dead_band
    if r.utilization > top and wanted > current:
        lowest = min(window.interval_loads(policy)) / r.processing_rate
        if lowest <= top:
            return Recommendation(
                "hold",
                current,
                f"utilization {r.utilization:.2f} above {top:.2f} but not for the whole window "
                f"(an interval at {lowest:.2f}): waiting for a sustained load",
                wanted,
                r,
            )
        return Recommendation("up", wanted, _because(r, current, wanted, policy), wanted, r)
    if r.utilization < bottom and wanted < current:
        return _down(recent, job, policy, r, wanted)
    if bottom <= r.utilization <= top:
        why = f"utilization {r.utilization:.2f} within [{bottom:.2f}, {top:.2f}]"
    else:
        why = (
            f"utilization {r.utilization:.2f} outside [{bottom:.2f}, {top:.2f}], but {wanted} "
            "executors is the bound (minExecutors, maxExecutors, partitions / executor cores)"
        )
    return Recommendation("hold", current, why, wanted, r)


def _catching_up(window: _Window, r: Rates, policy: Policy) -> str:
    """A backlog the current executors work off within catchUpSeconds (e.g. after a restore)."""
    first, last = window.samples[0].lag, window.samples[-1].lag
    assert first is not None and last is not None
    falling = first - last
    if falling <= 0.1 * first or first <= r.input_rate * MIN_BACKLOG_SECONDS:
        return ""
    drained_in = last / (falling / window.span)
    if drained_in > policy.catch_up_seconds:
        return ""
    return (
        f"catching up: lag {first} -> {last} in {window.span:.0f}s, drained in about "
        f"{drained_in:.0f}s <= catchUpSeconds={policy.catch_up_seconds:g}"
    )


def _down(recent: list[Sample], job: Job, policy: Policy, r: Rates, wanted: int) -> Recommendation:
    """Down only after scaleDownDelaySeconds of low load, never below the peak's need."""
    current = job.executors
    delay = policy.scale_down_delay_seconds
    since = job.now - max(delay, policy.metrics_window_seconds)
    span = _Window(tuple(s for s in _from(recent, since) if s.complete()))
    covered = span.span if len(span.samples) >= 2 else 0.0
    if covered < MIN_COVERAGE * delay:
        return Recommendation(
            "hold",
            current,
            f"low load (utilization {r.utilization:.2f}) measured over {covered:.0f}s, "
            f"scaleDownDelaySeconds={delay:g}",
            wanted,
            r,
        )
    loads = span.interval_loads(policy)
    bottom = policy.target_utilization - policy.dead_band
    highest = max(loads) / r.processing_rate
    if highest >= bottom:
        return Recommendation(
            "hold",
            current,
            f"load not low for scaleDownDelaySeconds={delay:g}: an interval at utilization "
            f"{highest:.2f} >= {bottom:.2f}",
            wanted,
            r,
        )
    top = policy.target_utilization + policy.dead_band
    floor = _needed(max(loads), top, r, job, policy)
    target = max(wanted, floor)
    if target >= current:
        return Recommendation(
            "hold", current, f"the last {delay:g}s's peak needs {floor} executors", wanted, r
        )
    return Recommendation("down", target, _because(r, current, target, policy), wanted, r)


def _because(r: Rates, current: int, target: int, policy: Policy) -> str:
    return (
        f"{current} -> {target} executors: input {r.input_rate:.0f}/s, lag {r.lag} "
        f"(load {r.load:.0f}/s), {r.per_executor_rate:.0f}/s per executor, utilization "
        f"{r.utilization:.2f} (target {policy.target_utilization:g}, busy "
        f"{r.busy_fraction:.0%})"
    )
