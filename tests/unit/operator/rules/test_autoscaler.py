"""The autoscaler's model on metric traces (autoscaler_traces.py): a step up, a step down, a
dip and a spike shorter than the delay, oscillating load, a stalled job, missing samples; and
the same load steps under the Flink operator's autoscaler with its documented defaults."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamingjob_operator.rules.autoscaler import recommend
from streamingjob_operator.rules.autoscaler_values import Job, Policy, Sample
from tests.unit.operator.autoscaler_traces import (
    DIP_SHORTER_THAN_DELAY,
    FLINK_DEFAULTS,
    MISSING,
    OSCILLATING,
    PARTITIONS,
    SPIKE_UP,
    STALLED,
    STEP_DOWN,
    STEP_UP,
    TRIGGER,
    R,
    Run,
    flink_recommend,
    readings,
    simulate,
)

pytestmark = pytest.mark.unit

DEFAULTS = Policy(max_executors=PARTITIONS)
STEADY_LAG_3R = int(3 * R * TRIGGER * 2)  # at most two trigger intervals of input behind


def _lag_steady_after(run: Run, since: float, steady: int) -> float | None:
    """Seconds from `since` to the first reading with the lag back at `steady` or below."""
    return next((t - since for t, lag in run.lags if t > since and lag <= steady), None)


def test_step_up_scales_once_to_the_right_count_within_three_minutes():
    run = simulate(STEP_UP, executors=1, duration=3600, policy=DEFAULTS)
    assert [(d.action, d.before, d.after) for d in run.decisions] == [("up", 1, 3)]
    assert run.decisions[0].time - 900 <= 180
    assert _lag_steady_after(run, 900, STEADY_LAG_3R) <= 300  # the goal: 5 minutes
    assert "input 1800/s" in run.decisions[0].reason


def test_step_down_waits_for_the_delay_then_scales_once():
    run = simulate(STEP_DOWN, executors=3, duration=3600, policy=DEFAULTS)
    assert [(d.action, d.before, d.after) for d in run.decisions] == [("down", 3, 1)]
    waited = run.decisions[0].time - 1200
    assert DEFAULTS.scale_down_delay_seconds <= waited <= DEFAULTS.scale_down_delay_seconds + 60


def test_a_dip_shorter_than_the_delay_scales_nothing():
    run = simulate(DIP_SHORTER_THAN_DELAY, executors=3, duration=3600, policy=DEFAULTS)
    assert run.decisions == []


def test_a_spike_up_whose_backlog_drains_in_time_scales_nothing():
    run = simulate(SPIKE_UP, executors=1, duration=3600, policy=DEFAULTS)
    assert run.decisions == []


def test_oscillating_load_scales_up_once_and_never_down():
    run = simulate(OSCILLATING, executors=1, duration=7200, policy=DEFAULTS)
    assert [(d.action, d.before) for d in run.decisions] == [("up", 1)]
    assert run.decisions[0].after == 3  # the peak's need: 1800/s at 1000/s per executor


def test_a_stalled_job_makes_no_decision():
    samples = readings(STALLED)
    rec = recommend(samples, Job(1, run_started=-600, now=240), DEFAULTS)
    assert rec.action == "none"
    assert rec.reason.startswith("stalled: no batch completed")


@pytest.mark.parametrize("now", [60, 90, 150])
def test_missing_samples_make_no_decision(now):
    samples = [s for s in readings(MISSING) if s.time <= now]
    rec = recommend(samples, Job(1, run_started=-600, now=now), Policy(metrics_window_seconds=120))
    assert rec.action == "none"
    assert "missing" in rec.reason


def test_a_gap_between_readings_makes_no_decision():
    steady = [
        Sample(t, 600 * t, 600, t // 5, 600 * t - 600, t * 0.7, t * 0.6) for t in range(0, 250, 30)
    ]
    samples = [s for s in steady if not 60 < s.time < 210]  # the operator was down
    rec = recommend(samples, Job(1, -600, 240), Policy(metrics_window_seconds=240))
    assert (rec.action, rec.reason) == ("none", "missing samples: 150s without a reading")
    assert recommend(steady, Job(1, -600, 240), Policy(metrics_window_seconds=240)).action == "hold"


def test_no_decision_while_stabilizing_or_before_the_window_is_full():
    samples = readings(MISSING[:2])
    assert recommend(samples, Job(1, 0, 100), DEFAULTS).reason.startswith("stabilizing")
    rec = recommend(samples, Job(1, -600, 30), DEFAULTS)
    assert rec.reason == "window not full: 30s of metricsWindowSeconds=120"


def test_counters_that_go_back_are_noise():
    samples = [
        Sample(0, 100, 0, 0, 0, 0.0, 0.0),
        Sample(60, 50, 0, 10, 100, 5.0, 4.0),  # a recreated topic: the log end went back
        Sample(120, 90, 0, 20, 200, 10.0, 8.0),
    ]
    rec = recommend(samples, Job(1, -600, 120), DEFAULTS)
    assert (rec.action, rec.reason) == ("none", "noisy metrics: log_end went back at t=60")


def test_too_few_batches_make_no_decision():
    samples = [Sample(t, 600 * t, 0, 1 if t else 0, 600 * t, 1.0, 1.0) for t in (0, 60, 120)]
    rec = recommend(samples, Job(1, -600, 120), DEFAULTS)
    assert rec.reason.startswith("too few batches: 1 in 120s")


def test_an_idle_job_goes_to_the_minimum_after_the_delay():
    samples = [Sample(t, 500, 0, 4, 500, 2.0, 1.0) for t in range(0, 660, 30)]
    policy = Policy(min_executors=1, max_executors=4)
    rec = recommend(samples, Job(3, -600, 630), policy)
    assert (rec.action, rec.executors) == ("down", 1)
    assert recommend(samples[:5], Job(3, -600, 120), policy).action == "hold"


@pytest.mark.parametrize(
    ("policy", "partitions", "expected"),
    [
        (Policy(max_executors=2), PARTITIONS, 2),  # maxExecutors
        (Policy(max_executors=10), 2, 2),  # two partitions keep two executors busy at most
    ],
)
def test_the_recommendation_is_clamped(policy, partitions, expected):
    run = simulate(STEP_UP, executors=1, duration=1200, policy=policy, closed_loop=False)
    samples = [s for s in run.samples if s.time <= 1050]
    rec = recommend(samples, Job(1, 0, 1050, partitions, 1), policy)
    assert (rec.action, rec.executors) == ("up", expected)


def test_flink_defaults_beside_this_model():
    """The comparison docs/operator/scaling.md quotes, on the 3x step after 15 min of steady load:
    seconds from the step to each decision (and its count), and to the lag back at steady."""
    runs = {
        "this model, its defaults": (DEFAULTS, recommend),
        "this model, Flink's numbers": (FLINK_DEFAULTS, recommend),
        "Flink's algorithm and defaults": (FLINK_DEFAULTS, flink_recommend),
    }
    seen = {}
    for name, (policy, model) in runs.items():
        run = simulate(STEP_UP, executors=1, duration=5400, policy=policy, model=model)
        decisions = [(d.time - 900, d.after) for d in run.decisions]
        seen[name] = (decisions, _lag_steady_after(run, 900, STEADY_LAG_3R))
    assert seen == {
        "this model, its defaults": ([(120, 3)], 270),
        "this model, Flink's numbers": ([(900, 3)], 1620),
        "Flink's algorithm and defaults": ([(270, 2)], None),  # 2 executors at utilization 0.9
    }
    down = simulate(STEP_DOWN, executors=3, duration=3600, policy=FLINK_DEFAULTS)
    flink_down = simulate(
        STEP_DOWN, executors=3, duration=3600, policy=FLINK_DEFAULTS, model=flink_recommend
    )
    assert [(d.time - 1200, d.after) for d in down.decisions] == [(930, 1)]
    assert [(d.time - 1200, d.after) for d in flink_down.decisions] == [(750, 2)]


@pytest.mark.parametrize(
    ("executors", "expected"),
    [
        (1, ("up", 2, "1 -> 2 executors: minExecutors")),
        (9, ("down", 4, "9 -> 4 executors: maxExecutors")),
    ],
)
def test_a_count_outside_the_bounds_moves_to_the_bound_after_stabilizing(executors, expected):
    policy = Policy(min_executors=2, max_executors=4)
    rec = recommend([], Job(executors, -600, 0), policy)
    assert (rec.action, rec.executors, rec.reason) == expected
    assert recommend([], Job(executors, -10, 0), policy).action == "none"


def test_a_load_beyond_the_bounds_holds_and_says_so():
    samples = [Sample(t, 300 * t, 0, t, 300 * t, 1.5 * t, 1.5 * t) for t in range(0, 130, 30)]
    rec = recommend(samples, Job(2, -600, 120, partitions=2), DEFAULTS)
    assert (rec.action, rec.executors, rec.wanted) == ("hold", 2, 2)
    assert rec.reason == (
        "utilization 1.50 outside [0.50, 0.90], but 2 executors is the bound (minExecutors, "
        "maxExecutors, partitions / executor cores)"
    )


def _keeping_up(rates: list[float], executors: int, backlog: int = 0) -> list[Sample]:
    """Readings every 30 s of a job at 100 records per execution second per executor, busy
    whenever there is a backlog, with batches every 5 s; `rates[i]` is the input of interval i."""
    samples = [Sample(0, backlog, backlog, 0, 0, 0.0, 0.0)]
    end, rows, t = backlog, 0, 0
    for rate in rates:
        t, end = t + 30, end + int(rate * 30)
        rows = min(end, rows + 100 * executors * 30)
        busy = rows / (100 * executors)
        samples.append(Sample(t, end, end - rows, t // 5, rows, busy, busy))
    return samples


def test_a_scale_down_never_goes_below_what_the_peak_needed():
    # 10 executors (1000/s); intervals alternate 100/s and 450/s: both below the band's
    # bottom (500/s), the average wants 4 executors (275 / 70), the peak 5 (450 / 90)
    samples = _keeping_up([100, 450] * 11, executors=10)
    rec = recommend(samples, Job(10, -600, samples[-1].time), Policy(max_executors=10))
    assert (rec.action, rec.executors, rec.wanted) == ("down", 5, 4)


def test_a_backlog_drained_within_the_catch_up_time_makes_no_decision():
    # after a restore: 95/s on one executor of 100/s, the lag falls 5/s from 3000
    samples = _keeping_up([95] * 4, executors=1, backlog=3000)
    rec = recommend(samples, Job(1, -600, 120), Policy(catch_up_seconds=600))
    assert rec.action == "none"
    assert rec.reason == (
        "catching up: lag 3000 -> 2400 in 120s, drained in about 480s <= catchUpSeconds=600"
    )


def _paced(
    executors: int, input_rate: float, with_task_time: bool, per_executor: float = 50
) -> list[Sample]:
    """Readings every 5 s of a job whose records each take 1 / per_executor s of an
    executor's task time (20 ms) and whose batches (one per 10 s trigger) spend 1 s of
    addBatch on fixed work: planning the tasks, committing the sink's files."""
    samples, rows, tasks, execution = [], 0, 0.0, 0.0
    for t in range(0, 125, 5):
        if t and t % 10 == 0:
            batch = int(input_rate * 10)
            rows, tasks = rows + batch, tasks + batch / per_executor
            execution += 1 + batch / (per_executor * executors)
        end = int(input_rate * t)
        sample = Sample(t, end, end - rows, t // 10, rows, execution + t // 10, execution)
        samples.append(replace(sample, task_seconds=tasks) if with_task_time else sample)
    return samples


def test_the_rate_per_second_of_task_time_does_not_fall_as_executors_are_added():
    # 22/s on 3 executors of 50/s: one executor is enough (22 / (0.7 x 50) = 0.63). Per
    # second of addBatch the 1 s of fixed work per batch makes an executor look like 30/s,
    # and the same load like a need of 2 (22 / (0.7 x 30) = 1.06).
    policy = Policy(max_executors=3, scale_down_delay_seconds=60, metrics_window_seconds=60)
    job = Job(3, -600, 120, partitions=3)
    by_tasks = recommend(_paced(3, 22, with_task_time=True), job, policy)
    by_batches = recommend(_paced(3, 22, with_task_time=False), job, policy)
    assert (by_tasks.action, by_tasks.executors) == ("down", 1)
    assert by_tasks.rates is not None and by_tasks.rates.per_executor_rate == pytest.approx(50)
    assert (by_batches.action, by_batches.executors) == ("down", 2)


def test_a_window_of_a_few_readings_fills_though_the_newest_is_a_reading_old():
    # readings every 5 s, the model run 5.5 s after the newest (the operator samples a reading
    # at the reconcile after it completed): the readings after the window's start span 30 s
    # of 40, with the one before it 35 s; full at 0.8 x 40 = 32 s
    samples = _paced(1, 40, with_task_time=True)
    last = samples[-1].time
    policy = Policy(
        max_executors=3,
        stabilization_seconds=0,
        metrics_window_seconds=40,
        scale_down_delay_seconds=40,
    )
    rec = recommend(samples, Job(1, 0, last + 5.5, partitions=3), policy)
    assert "window not full" not in rec.reason
    assert rec.rates is not None and rec.rates.input_rate == pytest.approx(40)


def test_a_scale_down_plans_with_the_rate_measured_at_the_count_it_goes_to():
    # on kind: 25/s ran at 44/s per executor on one executor, at 30/s on three (each task's
    # fixed work, executors sharing two cores). With only the current rate the load wants 2
    # (25 / (0.7 x 30) = 1.2); with the rate one executor had, 1 (25 / (0.7 x 44) = 0.8).
    samples = _paced(3, 25, with_task_time=True, per_executor=30)
    policy = Policy(max_executors=3, scale_down_delay_seconds=60, metrics_window_seconds=60)
    now = samples[-1].time
    rec = recommend(samples, Job(3, -600, now, partitions=3), policy)
    assert (rec.action, rec.executors) == ("down", 2)
    known = Job(3, -600, now, partitions=3, rates={1: 44.0, 3: 20.0})  # 3: the live rate wins
    rec = recommend(samples, known, policy)
    assert (rec.action, rec.executors) == ("down", 1)
    assert rec.rates is not None and rec.rates.per_executor_rate == pytest.approx(30)
