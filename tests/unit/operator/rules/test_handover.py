"""The warm hand-over's pure decisions (handover.py through decide): start the next driver
waiting, stop the running one when it is ready, the go only once the running one is gone,
the fallbacks, and an operator restart in the middle (a decision reads status + pods +
ConfigMap signals only, so a fresh operator is just the next call)."""

from __future__ import annotations

import pytest

from streamingjob_operator.api.job import Job, JobMeta
from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.rules import handover
from streamingjob_operator.rules.decide import FIELD_CLASSES, IGNORE, REASONS
from streamingjob_operator.rules.observed import Signal, Termination, iso, parse_signal
from streamingjob_operator.rules.status import set_conditions, status_body
from tests.unit.operator.helpers_operator import (
    T0,
    driver,
    executor,
    later,
    launched,
    make_spec,
    run,
)

pytestmark = pytest.mark.unit

WARM = {"mode": "warm", "readyTimeoutSeconds": 30}
OLD, NEW = "orders-e1-a1-driver", "orders-e2-a1-driver"


def _spec(**changes):
    return make_spec(handover=WARM, **changes)


def _ready(pod=NEW, epoch=2, attempt=1, state="ready", error=""):
    return Signal(pod, epoch, attempt, state, error)


def _go(pod=NEW, epoch=2, attempt=1):
    return Signal(pod, epoch, attempt, "go")


def _warming(seconds: float = 10) -> StreamingJobStatus:
    """A redeploy (redeployNonce 1) of a running job under mode warm, its next driver
    created and warming."""
    st = launched(_spec())
    d = run(_spec(redeployNonce=1), st, [driver(OLD)], later(seconds))
    assert d.status.handover is not None and d.status.handover.pod == NEW
    d = run(_spec(redeployNonce=1), d.status, [driver(OLD)], later(seconds))
    assert d.action == "launch-waiting"
    d = run(_spec(redeployNonce=1), d.status, [driver(OLD), driver(NEW)], later(seconds))
    assert d.status.handover is not None and d.status.handover.launch_state == "Created"
    return d.status


def test_a_warm_redeploy_starts_the_next_driver_first_and_keeps_following_the_running_one():
    st = launched(_spec())
    d = run(_spec(redeployNonce=1), st, [driver(OLD)], later(10))
    handover = d.status.handover
    assert handover is not None
    assert (handover.pod, handover.epoch, handover.attempt, handover.phase) == (
        NEW,
        2,
        1,
        "Warming",
    )
    assert handover.checkpoint_location.endswith("/epoch-2")
    assert handover.previous_checkpoint_location == st.checkpoint_location
    # the running driver is still the job's driver; the redeploy is marked deployed
    assert (d.status.epoch, d.status.attempt, d.status.driver_pod) == (1, 1, OLD)
    assert d.status.launch_state == "Created" and d.status.deployed_redeploy_nonce == 1
    assert d.action == "none" and [e.reason for e in d.events] == ["Redeploying"]
    d = run(_spec(redeployNonce=1), d.status, [driver(OLD)], later(10))
    assert d.action == "launch-waiting"  # nothing of the running driver is touched


def test_cold_mode_and_a_driver_that_is_not_running_take_todays_path():
    st = launched(make_spec())
    d = run(make_spec(redeployNonce=1), st, [driver(OLD)], later(10))
    assert d.status.handover is None and d.status.driver_pod == NEW
    st = launched(_spec())
    d = run(_spec(redeployNonce=1), st, [driver(OLD, "Pending")], later(10))
    assert d.status.handover is None and d.status.driver_pod == NEW


def test_a_restart_nonce_hands_over_to_the_next_attempt():
    st = launched(_spec())
    d = run(_spec(restartNonce=1), st, [driver(OLD)], later(10))
    handover = d.status.handover
    assert handover is not None and (handover.epoch, handover.attempt) == (1, 2)
    assert handover.checkpoint_location == st.checkpoint_location  # restore
    assert d.status.restarts == 1 and d.status.attempt == 1


def test_ready_stops_the_running_driver_between_batches():
    st = _warming()
    pods = [driver(OLD), executor(f"{OLD}-exec-1", OLD), driver(NEW)]
    d = run(_spec(redeployNonce=1), st, pods, later(12))
    assert d.action == "none"  # not ready yet: the running driver keeps running
    d = run(_spec(redeployNonce=1), st, pods, later(12), handover=_ready())
    assert d.status.handover is not None and d.status.handover.phase == "Stopping"
    assert d.action == "delete" and d.delete == (OLD,)  # graceful, as today
    assert NEW not in d.delete + d.force_delete
    assert "HandoverReady" in [e.reason for e in d.events]


def test_another_pods_readiness_is_ignored():
    st = _warming()
    d = run(
        _spec(redeployNonce=1),
        st,
        [driver(OLD), driver(NEW)],
        later(12),
        handover=_ready(NEW, 2, 9),
    )
    assert d.action == "none" and d.status.handover.phase == "Warming"  # type: ignore[union-attr]


def _stopping() -> StreamingJobStatus:
    d = run(
        _spec(redeployNonce=1), _warming(), [driver(OLD), driver(NEW)], later(12), handover=_ready()
    )
    assert d.status.handover is not None and d.status.handover.phase == "Stopping"
    return d.status


def test_never_a_go_while_a_pod_of_the_running_driver_exists():
    st = _stopping()
    deleting = driver(OLD, deleting_since=later(12))
    for pods in (
        [deleting, driver(NEW)],  # stopping between batches
        [driver(OLD, "Failed", termination=Termination(0)), driver(NEW)],  # ended, not gone
        [executor(f"{OLD}-exec-1", OLD), driver(NEW)],  # its executor
    ):
        d = run(_spec(redeployNonce=1), st, pods, later(14), handover=_ready())
        assert d.action == "delete", pods
        assert d.status.handover is not None and d.status.handover.phase == "Stopping"


def test_the_go_once_the_running_driver_is_gone_then_the_next_is_the_jobs_driver():
    st = _stopping()
    d = run(_spec(redeployNonce=1), st, [driver(NEW)], later(15), handover=_ready())
    assert d.action == "go"
    assert d.status.driver_pod == OLD  # nothing switched before the go is seen written
    d = run(_spec(redeployNonce=1), st, [driver(NEW)], later(15), handover=_ready(), go=_go())
    assert (d.status.epoch, d.status.attempt, d.status.driver_pod) == (2, 1, NEW)
    assert d.status.launch_state == "Created" and d.status.checkpoint_location.endswith("epoch-2")
    assert d.status.handover is not None and d.status.handover.phase == "Started"
    assert "HandedOver" in [e.reason for e in d.events]
    # from here on, today's following of the driver: running, its report
    d = run(_spec(redeployNonce=1), d.status, [driver(NEW)], later(16))
    assert d.action == "none" and d.status.phase == "Running"


def test_a_go_naming_another_pod_does_not_switch():
    st = _stopping()
    d = run(_spec(redeployNonce=1), st, [driver(NEW)], later(15), go=_go("other-driver"))
    assert d.action == "go" and d.status.driver_pod == OLD


def test_the_lost_running_driver_is_fenced_by_todays_rule():
    """The running driver's node silent: no go before the grace (60 s) has passed."""
    st = _stopping()
    silent = driver(OLD, node_heard_at=later(12), deleting_since=later(12))
    d = run(_spec(redeployNonce=1), st, [silent, driver(NEW)], later(30), handover=_ready())
    assert d.action == "delete" and not d.force_delete
    d = run(_spec(redeployNonce=1), st, [silent, driver(NEW)], later(80), handover=_ready())
    assert d.action == "delete" and d.force_delete == (OLD,)


def _assert_fell_back(d, reason: str) -> None:
    handover = d.status.handover
    assert handover is not None and (handover.phase, handover.reason) == ("FellBack", reason)
    assert d.action == "delete" and d.force_delete == (NEW,)  # the waiting pod, at once
    # the cold path: the next attempt after the waiting one (its name is never reused)
    assert (d.status.epoch, d.status.attempt, d.status.launch_state) == (2, 2, "Pending")
    assert d.status.checkpoint_location == handover.checkpoint_location
    assert [e.reason for e in d.events] == ["WarmHandoverFailed"]
    assert d.events[0].type == "Warning" and NEW in d.events[0].message
    set_conditions(d.status, 1, T0)
    condition = next(c for c in d.status.conditions if c.type == "HandoverFallback")
    assert (condition.status, condition.reason) == ("True", reason)


def test_not_ready_within_the_deadline_falls_back_to_cold():
    st = _warming(seconds=10)
    pods = [driver(OLD), driver(NEW)]
    d = run(_spec(redeployNonce=1), st, pods, later(39))
    assert d.action == "none" and d.requeue_after is not None and d.requeue_after <= 1
    d = run(_spec(redeployNonce=1), st, pods, later(40))
    _assert_fell_back(d, "NotReadyInTime")
    assert "readyTimeoutSeconds=30" in d.status.handover.message  # type: ignore[union-attr]
    # then today's cold path: stop the running driver, launch once everything is gone
    d = run(_spec(redeployNonce=1), d.status, [driver(OLD)], later(41))
    assert d.action == "delete" and d.delete == (OLD,)
    d = run(_spec(redeployNonce=1), d.status, [], later(42))
    assert d.action == "launch" and d.status.driver_pod == "orders-e2-a2-driver"


@pytest.mark.parametrize(
    ("waiting", "signal", "why"),
    [
        (driver(NEW, "Failed", termination=Termination(1)), None, "exit code 1"),
        (driver(NEW, deleting_since=T0), None, "being deleted"),
        (None, None, "is gone"),
        (driver(NEW), _ready(state="failed", error="no executors registered"), "no executors"),
    ],
)
def test_a_failed_waiting_driver_falls_back_to_cold(waiting, signal, why):
    st = _warming()
    pods = [driver(OLD), *([waiting] if waiting else [])]
    d = run(_spec(redeployNonce=1), st, pods, later(12), handover=signal)
    handover = d.status.handover
    assert handover is not None and handover.phase == "FellBack"
    assert handover.reason == "WaitingDriverFailed" and why in handover.message
    if waiting is not None:
        _assert_fell_back(d, "WaitingDriverFailed")


def test_a_waiting_driver_failing_while_the_running_one_stops_falls_back_too():
    st = _stopping()
    failed = driver(NEW, "Failed", termination=Termination(1))
    d = run(_spec(redeployNonce=1), st, [driver(OLD, deleting_since=later(12)), failed], later(13))
    _assert_fell_back(d, "WaitingDriverFailed")


def test_an_operator_restart_mid_way_continues_from_status_pods_and_configmap():
    """Each decision reads only status, pods and the ConfigMap's signals: status as
    written (a round trip through its JSON body), fresh observations, the same step."""
    st = StreamingJobStatus.model_validate(status_body(_stopping()))
    d = run(
        _spec(redeployNonce=1), st, [driver(OLD, deleting_since=later(12)), driver(NEW)], later(20)
    )
    assert d.action == "delete"  # still stopping: no go
    d = run(_spec(redeployNonce=1), st, [driver(NEW)], later(21))
    assert d.action == "go"
    # a crash after the go was written: the next operator sees it and switches
    d = run(_spec(redeployNonce=1), st, [driver(NEW)], later(22), go=_go())
    assert d.status.driver_pod == NEW
    # a crash after the waiting pod's create, before Created was recorded: adopted
    warming = StreamingJobStatus.model_validate(status_body(_warming()))
    warming.handover.launch_state = "Pending"  # type: ignore[union-attr]
    d = run(_spec(redeployNonce=1), warming, [driver(OLD), driver(NEW)], later(12))
    assert d.action == "none" and d.status.handover.launch_state == "Created"  # type: ignore[union-attr]


def test_a_manual_act_during_a_hand_over_waits_for_its_end():
    st = _warming()
    d = run(_spec(redeployNonce=2), st, [driver(OLD), driver(NEW)], later(12))
    assert d.action == "none" and d.status.handover.pod == NEW  # type: ignore[union-attr]
    assert d.status.deployed_redeploy_nonce == 1


@pytest.mark.parametrize(
    "act",
    [
        {"restartNonce": 1},
        {"redeployNonce": 2},
        {"job__source__failOnDataLoss": False},
        {"imagePullPolicy": "Always"},
    ],
)
def test_a_change_before_the_next_driver_is_created_is_one_act_with_the_one_before(act):
    """Simulation seeds 212 and 624: a change between a redeploy and the creation of its
    waiting driver used to wait for the hand-over's end, then restart the driver built from
    it. The hand-over is undone and the act decided anew: one redeploy for both."""
    st = launched(_spec())
    d = run(_spec(redeployNonce=1), st, [driver(OLD)], later(10))  # the next: e2, Pending
    changed = make_spec(handover=WARM, **{"redeployNonce": 1, **act})
    d = run(changed, d.status, [driver(OLD)], later(11))
    handover = d.status.handover
    assert handover is not None and handover.phase == "Warming"
    # a new epoch (the redeploy still to do), under a name never handed out
    assert (handover.epoch, handover.attempt) == (3, 1) and handover.pod != NEW
    assert d.status.driver_pod == OLD
    assert [e.reason for e in d.events] == ["HandoverReplaced", "Redeploying"]
    assert d.status.deployed_redeploy_nonce == changed.redeploy_nonce
    d = run(changed, d.status, [driver(OLD)], later(11))
    assert d.action == "launch-waiting"
    # once the next driver is created, a change waits for the hand-over's end again
    created = run(changed, d.status, [driver(OLD), driver(handover.pod)], later(12))
    again = run(_spec(redeployNonce=9), created.status, [driver(OLD), driver(handover.pod)])
    assert again.status.handover is not None and again.status.handover.pod == handover.pod


def test_a_change_undone_before_the_next_driver_is_created_cancels_the_hand_over():
    """Simulation seed 704: a change (stateless: a new epoch) and its reversal before the
    next driver existed; the running driver runs the spec as it is again."""
    stateless = {"upgradeMode": "stateless"}
    st = launched(_spec(**stateless))
    changed = _spec(**stateless, job__source__failOnDataLoss=False)
    d = run(changed, st, [driver(OLD)], later(10))
    assert d.status.handover is not None and d.status.handover.epoch == 2
    d = run(_spec(**stateless), d.status, [driver(OLD)], later(11))
    assert d.status.handover.phase == "Cancelled"  # type: ignore[union-attr]
    assert d.status.handover.reason == "Replaced"  # type: ignore[union-attr]
    assert [e.reason for e in d.events] == ["HandoverReplaced"]
    assert (d.status.epoch, d.status.attempt, d.status.driver_pod) == (1, 1, OLD)
    assert d.status.deployed_job_hash == st.deployed_job_hash
    d = run(_spec(**stateless), d.status, [driver(OLD)], later(12))
    assert d.action == "none" and not d.events


def test_a_restart_before_the_next_attempt_is_created_stays_a_restore():
    st = launched(_spec())
    d = run(_spec(restartNonce=1), st, [driver(OLD)], later(10))  # the next: e1-a2
    d = run(_spec(restartNonce=2), d.status, [driver(OLD)], later(11))
    handover = d.status.handover
    assert handover is not None and (handover.epoch, handover.attempt) == (1, 3)
    assert handover.checkpoint_location == st.checkpoint_location  # restore


def test_suspend_ends_the_hand_over_and_deletes_both_drivers():
    st = _warming()
    d = run(_spec(redeployNonce=1, suspend=True), st, [driver(OLD), driver(NEW)], later(12))
    assert d.status.handover is not None and d.status.handover.phase == "Cancelled"
    assert d.action == "delete" and set(d.delete) == {OLD, NEW}


def test_stale_pods_are_deleted_first_and_the_waiting_ones_kept():
    st = _warming()
    stale = driver("orders-e0-a9-driver")
    d = run(_spec(redeployNonce=1), st, [driver(OLD), driver(NEW), stale], later(12))
    assert d.action == "delete" and d.delete == (stale.name,)


def test_signals_are_read_from_the_report_configmap_and_garbage_is_ignored():
    cm = {
        "data": {
            "handover.json": '{"pod": "p", "epoch": 2, "attempt": 1, "state": "ready"}',
            "go.json": '{"pod": "p", "epoch": "x"}',
        }
    }
    assert parse_signal(cm, "handover.json") == Signal("p", 2, 1, "ready")
    assert parse_signal(cm, "go.json") is None
    assert parse_signal(None, "go.json") is None


class _Api:
    """The calls the go makes: the job's pods, the applies, the go's ConfigMap key."""

    def __init__(self, pods: list[str]) -> None:
        self.pods = [{"metadata": {"name": p, "labels": {}}} for p in pods]
        self.applied: list[tuple[str, str]] = []
        self.keys: dict[tuple[str, str], str] = {}

    def list_job_pods(self, namespace, name):
        return self.pods

    def apply(self, obj):
        self.applied.append((obj["kind"], obj["metadata"]["name"]))

    def set_configmap_key(self, namespace, name, key, value):
        self.keys[(name, key)] = value

    def get_configmap(self, namespace, name):
        data = {k: v for (cm, k), v in self.keys.items() if cm == name}
        return {"data": data} if data else None


def test_the_go_is_written_where_no_driver_may_write_and_read_back_from_there():
    """The go fences the running driver: the operator writes it to the job's go ConfigMap
    (readable, never writable by drivers: builders.build_role), not to the report ConfigMap
    the drivers patch; the next step reads it back from there."""
    from streamingjob_operator.reconcile import Reconciler
    from streamingjob_operator.rules.decide import Decision
    from streamingjob_operator.settings import OperatorSettings

    st = _warming()
    st.handover.phase = "Stopping"  # type: ignore[union-attr]
    api = _Api([NEW])
    reconciler = Reconciler(api, OperatorSettings())  # type: ignore[arg-type]
    body = {"metadata": {"name": "orders", "namespace": "ns", "uid": "u"}}
    job = Job(JobMeta.of(body["metadata"]), _spec(redeployNonce=1), st, body)
    reconciler.actor.go(job, Decision(action="go", status=st))
    assert set(api.keys) == {("orders-go", "go.json")}
    assert ("ConfigMap", "orders-go") in api.applied
    assert ("PodDisruptionBudget", "orders-executors") in api.applied  # moved to the next
    go = parse_signal(reconciler.observer._go_configmap(job), "go.json")
    assert go is not None and go.names(NEW, 2, 1)
    # outside a hand-over the go decides nothing: not read
    idle = Job(job.meta, job.spec, StreamingJobStatus(), body)
    assert reconciler.observer._go_configmap(idle) is None


def test_the_go_waits_for_every_pod_but_the_next_driver_and_its_executors():
    """The go's own fencing (handover.no_go), from the direct list right before its write:
    the running driver or one of its executors still listed means no go yet."""
    waiting = _warming().handover
    assert waiting is not None
    mine = [(NEW, ""), ("orders-exec-1", NEW)]
    assert handover.no_go(waiting, mine) is None
    why = handover.no_go(waiting, [*mine, ("orders-exec-0", OLD), (OLD, "")])
    assert why == f"no go for {NEW}: pods still present: orders-exec-0, {OLD}"
    go = handover.go_signal(waiting, T0)
    assert go == {"pod": NEW, "epoch": waiting.epoch, "attempt": waiting.attempt, "time": iso(T0)}


def test_the_hand_over_reasons_are_in_the_vocabulary():
    assert {"HandoverReady", "HandedOver", "WarmHandoverFailed"} <= set(REASONS)


def test_changing_spec_handover_restarts_nothing():
    assert FIELD_CLASSES["handover"] == IGNORE
    st = launched(make_spec())
    d = run(_spec(), st, [driver(OLD)], later(10))
    assert d.action == "none" and d.status.handover is None
    assert (d.status.epoch, d.status.attempt) == (1, 1)
