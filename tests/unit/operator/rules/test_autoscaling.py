"""The autoscaler's step (rules/autoscaling.py): readings per Kafka reading of the current
run, what status.autoscaler shows, the rescale it returns, foreign scales and what is
recorded of them, the spec's rules, the condition, the status body and the metrics. The
whole loop on a real API server and broker: tests/integration/operator/test_op_autoscaler.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from streamingjob_operator.api.job import JobMeta
from streamingjob_operator.api.models import (
    AutoscalerDecisionStatus,
    AutoscalerStatus,
    InvalidSpecError,
    StreamingJobStatus,
)
from streamingjob_operator.api.status_models import HandoverStatus
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.rules import autoscaling
from streamingjob_operator.rules.autoscaling import Window, foreign_scale, note_applied, scale_back
from streamingjob_operator.rules.observed import Report, iso, parse_report
from streamingjob_operator.rules.status import KafkaView, set_conditions, status_body
from tests.unit.operator.helpers_operator import T0, make_spec
from tests.unit.operator.io.test_metrics import samples

pytestmark = pytest.mark.unit
KEY = ("team", "orders")
ENABLED = {
    "autoscaler__enabled": True,
    "autoscaler__maxExecutors": 4,
    "autoscaler__stabilizationSeconds": 0,
    "autoscaler__metricsWindowSeconds": 10,
}

# a foreign scale's job: no field writer named, generation 4
META = JobMeta(name="orders", namespace="team", uid="u-1", generation=4)


class Autoscaling:
    """The shell's memory of one job's window of readings (scaling.py) around the pure step."""

    def __init__(self) -> None:
        self.window: Window | None = None

    def step(self, key, spec, st, kafka, report, now):
        rescale, self.window = autoscaling.step(spec, st, kafka, report, self.window, now)
        return rescale


def _running(**kw) -> StreamingJobStatus:
    fields = {"phase": "Running", "epoch": 1, "attempt": 1, "running_since": iso(T0)}
    return StreamingJobStatus(**{**fields, **kw})


def _view(second: int, end: int, committed: int) -> KafkaView:
    """Four partitions (up to four executors of one core read), the load on the first."""
    idle = {"1": 0, "2": 0, "3": 0}
    return KafkaView(
        committed={"orders": {"0": committed, **idle}},
        end={"orders": {"0": end, **idle}},
        read_at=T0 + timedelta(seconds=second),
    )


def _report(second: int, attempt: int = 1) -> Report:
    """A job that processes 100 records per second of execution on one executor."""
    rows = 150 * second
    totals = {"batches": second, "rows": rows, "busyMs": rows * 10, "executionMs": rows * 10}
    return Report(epoch=1, attempt=attempt, throughput=totals)


def test_a_sustained_overload_is_a_scale_up_recorded_in_status():
    spec = make_spec(**ENABLED)
    scaler, rescale = Autoscaling(), None
    for second in range(0, 13):
        st = _running(autoscaler=None if second == 0 else st.autoscaler)  # noqa: F821
        view = _view(second, 150 * second, 150 * second - 50)
        now = T0 + timedelta(seconds=second)
        rescale = scaler.step(KEY, spec, st, view, _report(second), now) or rescale
        evaluated = st.autoscaler.evaluated_at  # type: ignore[union-attr]
        later = now + timedelta(seconds=5)  # another reconcile, the same reading: unchanged
        assert scaler.step(KEY, spec, st, view, _report(second), later) is None
        assert st.autoscaler.evaluated_at == evaluated  # type: ignore[union-attr]
    assert rescale is not None
    assert (rescale.before, rescale.to, rescale.event_reason) == (1, 3, "ScaledUp")
    a = st.autoscaler
    assert a is not None and a.pending and a.executors == 3
    assert a.last_decision is not None and a.last_decision.to_executors == 3
    assert (a.input_rate, a.processing_rate, a.utilization) == (150.0, 100.0, 1.5)
    assert a.samples == 13  # one per Kafka reading of the run (the window is the last 10 s)
    assert (a.rates, a.rates_epoch) == ({"1": 100.0}, 1)  # what one executor did, this epoch
    st = _running(epoch=2, autoscaler=a)
    scaler.step(KEY, spec, st, _view(14, 2100, 2050), _report(14), T0 + timedelta(seconds=14))
    assert st.autoscaler is not None and st.autoscaler.rates == {}  # new code, new rates


def test_no_decision_on_the_readings_of_a_driver_a_warm_hand_over_replaces():
    """Stop 49's e2e: a ScaledDown's warm hand-over under way, the stopping driver's readings
    (of the executors it was launched with) made a second rescale before the step's own
    run began. The same overload as above decides nothing while a hand-over is active."""
    spec = make_spec(**ENABLED)
    scaler = Autoscaling()
    waiting = HandoverStatus(pod="orders-e1-a2-driver", epoch=1, attempt=2, phase="Warming")
    st = _running(handover=waiting)
    for second in range(0, 13):
        view = _view(second, 150 * second, 150 * second - 50)
        now = T0 + timedelta(seconds=second)
        assert scaler.step(KEY, spec, st, view, _report(second), now) is None
    assert st.autoscaler is not None and st.autoscaler.action == "none"
    assert st.autoscaler.reason.startswith("warm hand-over to orders-e1-a2-driver under way")
    waiting.phase = "Started"  # the go: the hand-over's run is the job's
    st = _running(attempt=2, handover=waiting, autoscaler=st.autoscaler)
    view = _view(13, 150 * 13, 150 * 13 - 50)
    scaler.step(KEY, spec, st, view, _report(13, 2), T0 + timedelta(seconds=13))
    assert st.autoscaler.samples == 1  # the new run's window, from its first reading


def _report_configmap(second: int, task_ms_per_row: int) -> dict:
    """The runner's report ConfigMap as it writes it (spark_app/runner/report.py Throughput): the
    batches' totals, and the executors' task time (taskMs)."""
    rows = 150 * second
    throughput = {
        "batches": second,
        "rows": rows,
        "busyMs": rows * 5,
        "executionMs": rows * 10,
        "taskMs": rows * task_ms_per_row,
    }
    report = {"epoch": 1, "attempt": 1, "throughput": throughput}
    return {"data": {"report.json": json.dumps(report)}}


@pytest.mark.parametrize(
    ("task_ms_per_row", "action", "executors"),
    [(20, "up", 4), (1, "hold", 2)],  # busy: 50 rows/s per executor; idle: 1000
)
def test_the_task_time_of_the_report_reaches_the_autoscalers_decision(
    task_ms_per_row, action, executors
):
    """From the report ConfigMap's JSON to the decision: the same batches (addBatch alone
    says 50 rows/s per executor, too slow for an input of 150/s) decide differently when
    the executors' task time says they are busy or idle (docs/operator/scaling.md, "Autoscaler")."""
    spec = make_spec(**ENABLED, executor__instances=2)
    scaler, rescale, st = Autoscaling(), None, _running()
    for second in range(0, 13):
        view = _view(second, 150 * second, 150 * second - 50)
        report = parse_report(_report_configmap(second, task_ms_per_row))
        now = T0 + timedelta(seconds=second)
        rescale = scaler.step(KEY, spec, st, view, report, now) or rescale
    a = st.autoscaler
    assert a is not None and (a.action, a.executors) == (action, executors)
    assert (rescale is not None) == (action == "up")


def test_no_decision_before_running_and_a_new_run_starts_a_new_window():
    spec = make_spec(**ENABLED)
    scaler = Autoscaling()
    st = _running(phase="Restarting")
    assert scaler.step(KEY, spec, st, _view(1, 150, 100), _report(1), T0) is None
    assert st.autoscaler is not None
    assert (st.autoscaler.action, st.autoscaler.reason) == (
        "none",
        "not running (phase Restarting)",
    )
    st = _running()
    scaler.step(KEY, spec, st, _view(1, 150, 100), _report(1), T0 + timedelta(seconds=1))
    st = _running(attempt=2)  # the rescale's restore: the runner's counters start again
    scaler.step(KEY, spec, st, _view(2, 300, 200), _report(2, 2), T0 + timedelta(seconds=2))
    assert st.autoscaler is not None and st.autoscaler.samples == 1
    # a report of another run makes the reading incomplete (no counters), not wrong
    st = _running(attempt=3)
    scaler.step(KEY, spec, st, _view(3, 450, 300), _report(3, 2), T0 + timedelta(seconds=3))
    assert st.autoscaler is not None and st.autoscaler.reason.startswith("missing metrics")


def test_disabling_clears_the_autoscaler_status():
    st = _running(autoscaler=AutoscalerStatus(executors=3))
    Autoscaling().step(KEY, make_spec(), st, None, None, T0)
    assert st.autoscaler is None and "autoscaler" not in status_body(st)


def test_a_foreign_scale_is_named_and_an_interrupted_own_rescale_completed():
    spec = make_spec(**ENABLED, executor__instances=1)
    decided = AutoscalerDecisionStatus(
        time="t", action="ScaledUp", from_executors=1, to_executors=3
    )
    own = _running(autoscaler=AutoscalerStatus(executors=3, pending=True, last_decision=decided))
    assert foreign_scale(spec, own, []).message == ""  # type: ignore[union-attr]
    done = own.model_copy(
        update={"autoscaler": own.autoscaler.model_copy(update={"pending": False})}
    )  # type: ignore[union-attr]
    managed = [
        {"manager": "kube-controller-manager", "time": "2026-01-01T11:00:00Z",
         "fieldsV1": {"f:spec": {"f:executor": {"f:instances": {}}}}},
        {"manager": "kubectl", "time": "2026-01-01T12:00:00Z",
         "fieldsV1": {"f:spec": {"f:executor": {"f:instances": {}}}}},
        {"manager": "other", "time": "2026-01-01T13:00:00Z", "fieldsV1": {"f:spec": {}}},
    ]  # fmt: skip
    foreign = foreign_scale(spec, done, managed)
    assert foreign is not None and foreign.owned == 3
    assert foreign.message.startswith("spec.executor.instances was set to 1 by kubectl while")
    assert foreign_scale(make_spec(executor__instances=1), done, managed) is None  # disabled
    note_applied(make_spec(**ENABLED, executor__instances=3), own)
    assert own.autoscaler is not None and not own.autoscaler.pending


def test_the_conflict_is_a_condition_while_recent():
    st = _running(
        autoscaler=AutoscalerStatus(executors=3, conflict="set to 1", conflict_time=iso(T0))
    )
    set_conditions(st, 4, T0)
    cond = next(c for c in st.conditions if c.type == "AutoscalerConflict")
    assert (cond.status, cond.reason, cond.message) == ("True", "ForeignScale", "set to 1")
    Autoscaling().step(KEY, make_spec(**ENABLED), st, None, None, T0 + timedelta(minutes=11))
    set_conditions(st, 4, T0 + timedelta(minutes=11))
    cond = next(c for c in st.conditions if c.type == "AutoscalerConflict")
    assert (cond.status, cond.reason) == ("False", "AsExpected")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"autoscaler__minExecutors": 5, "autoscaler__maxExecutors": 2},
            "spec.autoscaler: Value error, minExecutors (5) must be <= maxExecutors (2)",
        ),
        (
            {"autoscaler__targetUtilization": 0.1},
            "spec.autoscaler.targetUtilization: Input should be greater than or equal to 0.25",
        ),
        (
            {"autoscaler__metricsWindowSeconds": 5},
            "spec.autoscaler.metricsWindowSeconds: Input should be greater than or equal to 10",
        ),
    ],
)
def test_the_spec_names_the_field_and_the_rule(changes, message):
    with pytest.raises(InvalidSpecError) as refused:
        make_spec(**changes)
    assert str(refused.value) == message


def test_recommendation_and_utilization_are_metrics():
    metrics = Metrics()
    st = _running(autoscaler=AutoscalerStatus(executors=3, recommendation=3, utilization=0.62))
    metrics.jobs.update(KEY, st, None)
    got = samples(metrics)
    base = (("job", "orders"), ("namespace", "team"))
    assert got[("streamingjob_autoscaler_recommended_executors", base)] == 3
    assert got[("streamingjob_autoscaler_utilization", base)] == 0.62


def test_a_foreign_scale_is_recorded_before_it_is_set_back():
    """scale_back: the conflict in status (a condition) and a ScaleRefused Event, recorded
    before spec.executor.instances is set back; nothing to record when it completes the
    autoscaler's own interrupted rescale."""
    spec = make_spec(**ENABLED, executor__instances=1)
    decided = AutoscalerDecisionStatus(
        time="t", action="ScaledUp", from_executors=1, to_executors=3
    )
    own = _running(autoscaler=AutoscalerStatus(executors=3, pending=True, last_decision=decided))
    assert scale_back(spec, own, META, T0) == autoscaling.ScaleBack(3, None, None)
    done = _running(autoscaler=AutoscalerStatus(executors=3, last_decision=decided))
    back = scale_back(spec, done, META, T0)
    assert back is not None and back.owned == 3 and back.status is not None
    assert back.event is not None and (back.event.type, back.event.reason) == (
        "Warning",
        "ScaleRefused",
    )
    a = back.status.autoscaler
    assert a is not None and (a.conflict, a.conflict_time) == (back.event.message, iso(T0))
    cond = next(c for c in back.status.conditions if c.type == "AutoscalerConflict")
    assert (cond.status, cond.reason, cond.observed_generation) == ("True", "ForeignScale", 4)
    assert done.autoscaler is not None and not done.autoscaler.conflict  # a copy was changed
    assert scale_back(make_spec(**ENABLED, executor__instances=3), done, META, T0) is None


def test_a_run_without_a_new_reading_keeps_its_window_and_a_disabled_one_drops_it():
    spec, st = make_spec(**ENABLED), _running()
    rescale, window = autoscaling.step(spec, st, _view(1, 150, 100), _report(1), None, T0)
    assert rescale is None and window is not None and len(window.samples) == 1
    again = autoscaling.step(spec, st, _view(1, 150, 100), _report(1), window, T0)
    assert again == (None, window)  # the same reading: nothing added, nothing evaluated
    assert autoscaling.step(make_spec(), st, None, None, window, T0) == (None, None)
