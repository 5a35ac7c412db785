"""A reconcile step's whole decision (rules/plan.py), pure: what the reconciler used to decide
beside decide() (the offsets gate and its refusal, the Kafka reading's Warning, the
autoscaler's step only when nothing else is done, whether to step again, an unreadable spec),
and the fencing read's verdict before a launch (fencing.not_launching)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamingjob_operator.api.job import Job, JobMeta
from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus
from streamingjob_operator.rules.autoscaling import Window
from streamingjob_operator.rules.decide import Decision
from streamingjob_operator.rules.fencing import not_launching
from streamingjob_operator.rules.observed import Observed, PodInfo
from streamingjob_operator.rules.plan import next_step, plan, unparsable
from streamingjob_operator.rules.status import KafkaView
from tests.unit.operator.helpers_operator import CFG, NAME, NS, T0, driver, launched, make_spec
from tests.unit.operator.helpers_operator import run as decide_run

pytestmark = pytest.mark.unit

RESET = {"nonce": 1, "action": "reset", "to": "earliest"}
MANAGED = {
    "manager": "kubectl-patch",
    "time": "2026-01-01T00:00:02Z",
    "fieldsV1": {"f:spec": {"f:offsetsAction": {}}},
}


def _job(spec: StreamingJobSpec, status: StreamingJobStatus) -> Job:
    meta = {"name": NAME, "namespace": NS, "uid": "u", "generation": 3}
    meta["managedFields"] = [MANAGED]  # type: ignore[assignment]
    return Job(JobMeta.of(meta), spec, status, {"metadata": meta})


def _plan(job: Job, pods: list[PodInfo], seconds: float = 5, kafka=None, window=None):
    observed = Observed(now=T0 + timedelta(seconds=seconds), pods=tuple(pods))
    return plan(job, observed, kafka, window, CFG)


def test_an_offsets_action_on_a_running_job_is_refused_and_named_after_its_requester():
    st = launched(make_spec())
    step = _plan(_job(make_spec(offsetsAction=RESET), st), [driver(st.driver_pod)])
    assert step.decision.action == "none" and not step.run_offsets
    assert [e.reason for e in step.decision.events] == ["OffsetsRefused"]
    action = step.decision.status.offsets_action
    assert action is not None and (action.result, action.requested_by) == (
        "Refused",
        "kubectl-patch",
    )


def test_an_offsets_action_runs_once_the_job_is_suspended_with_no_pod_left():
    spec = make_spec(suspend=True, offsetsAction=RESET)
    st = launched(make_spec())
    stopping = _plan(_job(spec, st), [driver(st.driver_pod)])
    assert stopping.decision.action == "delete" and not stopping.run_offsets
    suspended = decide_run(spec, stopping.decision.status, [], T0 + timedelta(seconds=10))
    assert suspended.status.phase == "Suspended"
    step = _plan(_job(spec, suspended.status), [], seconds=11)
    assert step.run_offsets and step.decision.action == "none"
    assert not _plan(_job(spec, suspended.status), [driver("x")], seconds=11).run_offsets


def test_a_new_kafka_problem_is_a_warning_once():
    st = launched(make_spec())
    down = KafkaView(problem="brokers unreachable")
    step = _plan(_job(make_spec(), st), [driver(st.driver_pod)], kafka=down)
    assert [e.reason for e in step.decision.events] == ["KafkaUnavailable"]
    degraded = next(c for c in step.decision.status.conditions if c.type == "Degraded")
    assert degraded.status == "True" and degraded.observed_generation == 3
    again = _plan(_job(make_spec(), step.decision.status), [driver(st.driver_pod)], kafka=down)
    assert again.decision.events == []


def test_the_autoscaler_steps_only_when_nothing_else_is_done():
    enabled = make_spec(autoscaler__enabled=True)
    st = launched(enabled)
    kept = Window((st.epoch, st.attempt))
    suspend = make_spec(autoscaler__enabled=True, suspend=True)
    stopping = _plan(_job(suspend, st), [driver(st.driver_pod)], window=kept)
    assert stopping.decision.action == "delete" and stopping.window is kept
    assert stopping.decision.status.autoscaler is None and stopping.rescale is None
    running = _plan(_job(enabled, st), [driver(st.driver_pod)], window=kept)
    assert running.decision.action == "none" and running.decision.status.autoscaler is not None
    assert _plan(_job(make_spec(), st), [driver(st.driver_pod)], window=kept).window is None


def test_a_launch_waits_for_every_other_pod_of_the_job():
    assert not_launching("orders-e1-a2-driver", ["orders-e1-a2-driver"]) is None
    assert not_launching("orders-e1-a2-driver", []) is None
    why = not_launching("orders-e1-a2-driver", ["orders-e1-a1-exec-1", "orders-e1-a2-driver"])
    assert why == "not launching orders-e1-a2-driver: pods still present: orders-e1-a1-exec-1"


def test_a_launch_steps_again_at_once_a_deletion_under_way_waits_and_the_go_reads_again():
    """next_step: what the reconcile does after acting (reconcile.py reuses what it knows)."""
    st = launched(make_spec())
    launch = Decision(action="launch", status=st, requeue_after=30)
    assert next_step(launch, True, True) == (True, 0.0, "all")
    delete = Decision(action="delete", status=st, requeue_after=1)
    assert next_step(delete, True, True) == (True, 1, "all")  # gone at once: go on
    assert next_step(delete, True, False) == (False, 1, "all")  # under way: give it time
    assert next_step(Decision(action="go", status=st), False, True) == (True, 0.0, "job")
    moved = Decision(action="none", status=st, requeue_after=0)
    assert next_step(moved, True, True) == (True, 0.0, "all")
    assert next_step(moved, False, True) == (False, 0, "all")  # nothing recorded: look later
    resync = Decision(action="none", status=st, requeue_after=30)
    assert next_step(resync, True, True) == (False, 30, "all")


def test_an_unreadable_spec_is_invalid_once_with_its_condition():
    st = launched(make_spec())
    d = unparsable(st, "spec.image: is null", 3, T0, CFG)
    assert (d.action, d.status.phase, [e.reason for e in d.events]) == (
        "none",
        "Invalid",
        ["InvalidSpec"],
    )
    ready = next(c for c in d.status.conditions if c.type == "Ready")
    assert ready.status == "False" and ready.observed_generation == 3
    assert unparsable(d.status, "spec.image: is null", 3, T0, CFG).events == []
