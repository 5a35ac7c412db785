"""The standby's pure decisions (standby.py through decide): one warm driver of the next
attempt kept beside the running one; when the running one is lost, a restartNonce or a drain,
it takes over through the warm hand-over's fencing (the go only once every pod of the running
driver is gone); a failed standby is replaced after a backoff, and names are never reused."""

from __future__ import annotations

import pytest

from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.rules.decide import FIELD_CLASSES, IGNORE, REASONS
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.observed import Signal, Termination
from streamingjob_operator.rules.status import set_conditions, status_body
from tests.unit.operator.helpers_operator import (
    T0,
    driver,
    executor,
    exited,
    later,
    launched,
    make_spec,
    run,
)

pytestmark = pytest.mark.unit

OLD, SPARE = "orders-e1-a1-driver", "orders-e1-a2-driver"


def _spec(**changes):
    return make_spec(standby={"enabled": True}, handover={"readyTimeoutSeconds": 30}, **changes)


def _ready(pod=SPARE, attempt=2, state="ready", error=""):
    return Signal(pod, 1, attempt, state, error)


def _go(pod=SPARE, attempt=2):
    return Signal(pod, 1, attempt, "go")


def _warming(seconds: float = 10) -> StreamingJobStatus:
    """A running job with spec.standby on: its standby recorded and created."""
    st = launched(make_spec(handover={"readyTimeoutSeconds": 30}))
    d = run(_spec(), st, [driver(OLD)], later(seconds))  # spec.standby switched on
    assert d.action == "launch-standby"
    standby = d.status.standby
    assert standby is not None
    assert (standby.pod, standby.epoch, standby.attempt) == (SPARE, 1, 2)
    assert (standby.state, standby.launch_state) == ("Warming", "Pending")
    assert standby.checkpoint_location == d.status.checkpoint_location  # it restores
    d = run(_spec(), d.status, [driver(OLD), driver(SPARE)], later(seconds))
    assert d.status.standby is not None and d.status.standby.launch_state == "Created"
    return d.status


def _ready_status(seconds: float = 12) -> StreamingJobStatus:
    d = run(_spec(), _warming(), [driver(OLD), driver(SPARE)], later(seconds), handover=_ready())
    assert d.status.standby is not None and d.status.standby.state == "Ready"
    assert [e.reason for e in d.events] == ["StandbyReady"]
    assert _condition(d.status) == ("True", "Ready")  # kubectl wait --for=condition=StandbyReady
    return d.status


def test_a_running_job_keeps_a_standby_of_the_next_attempt_and_nothing_else_changes():
    st = _ready_status()
    assert (st.epoch, st.attempt, st.driver_pod, st.phase) == (1, 1, OLD, "Running")
    pods = [driver(OLD), driver(SPARE), executor(f"{SPARE}-exec-1", SPARE)]
    d = run(_spec(), st, pods, later(20), handover=_ready())
    assert d.action == "none" and not d.events  # its pods are not stale


def test_a_killed_driver_hands_over_to_the_standby_at_once_and_only_once_it_is_gone():
    st = _ready_status()
    killed = [exited(OLD, 137), executor(f"{OLD}-exec-1", OLD), driver(SPARE)]
    d = run(_spec(), st, killed, later(20), handover=_ready())
    handover = d.status.handover
    assert handover is not None and (handover.pod, handover.phase) == (SPARE, "Stopping")
    assert d.status.standby is None and d.status.restarts == 1
    assert d.status.next_retry_time == "" and d.status.phase == "Restarting"
    assert [e.reason for e in d.events] == ["DriverFailed", "StandbyTakeover"]
    # the ended driver and its executor are removed at once; the standby is kept
    d = run(_spec(), d.status, killed, later(20), handover=_ready())
    assert d.action == "delete" and set(d.force_delete) == {OLD, f"{OLD}-exec-1"}
    assert SPARE not in d.delete + d.force_delete
    d = run(_spec(), d.status, [executor(f"{OLD}-exec-1", OLD), driver(SPARE)], later(21))
    assert d.action == "delete"  # never a go while a pod of the lost driver exists
    d = run(_spec(), d.status, [driver(SPARE)], later(21), handover=_ready())
    assert d.action == "go"
    d = run(_spec(), d.status, [driver(SPARE)], later(21), handover=_ready(), go=_go())
    assert (d.status.epoch, d.status.attempt, d.status.driver_pod) == (1, 2, SPARE)
    assert d.status.checkpoint_location == st.checkpoint_location  # restore, same epoch
    # running again: a new standby behind it, the next attempt
    d = run(_spec(), d.status, [driver(SPARE)], later(22))
    d = run(_spec(), d.status, [driver(SPARE)], later(22))
    assert d.action == "launch-standby"
    assert d.status.standby is not None and d.status.standby.pod == "orders-e1-a3-driver"


def test_a_failure_the_standby_takes_over_from_is_told_and_counted_once():
    """Found by the simulation (issue 41, seeds 6, 9, 18, 21, 41 and 53 of `0-63` once it
    counted Warnings per driver pod): the failed driver stays the target while the standby
    takes over, and the hand-over's next step told and counted its failure a second time."""
    st = _ready_status()
    killed = [exited(OLD, 1), executor(f"{OLD}-exec-1", OLD), driver(SPARE)]
    d = run(_spec(), st, killed, later(20), handover=_ready())
    assert [e.reason for e in d.events] == ["DriverFailed", "StandbyTakeover"]
    assert d.status.consecutive_failures == 1
    d = run(_spec(), d.status, killed, later(20), handover=_ready())
    assert d.action == "delete"  # the hand-over's step: the ended driver removed
    assert not [e for e in d.events if e.type == "Warning"]
    assert d.status.consecutive_failures == 1 and len(d.status.recent_failures) == 1
    told = [h for h in d.status.history if h.reason == "DriverFailed"]
    assert len(told) == 1 and OLD in told[0].message


def test_a_lost_node_hands_over_only_after_the_grace():
    st = _ready_status()
    silent = driver(OLD, node_heard_at=later(12))
    d = run(_spec(), st, [silent, driver(SPARE)], later(40), handover=_ready())
    assert d.status.handover is None and d.status.standby is not None  # within the grace
    d = run(_spec(), st, [silent, driver(SPARE)], later(80), handover=_ready())
    assert d.status.handover is not None and d.status.last_restart_reason == "NodeLost"
    d = run(_spec(), d.status, [silent, driver(SPARE)], later(80), handover=_ready())
    assert d.action == "delete" and d.force_delete == (OLD,)


def test_a_standby_still_warming_takes_over_when_ready_within_its_deadline():
    st = _warming(seconds=10)
    d = run(_spec(), st, [exited(OLD, 1), driver(SPARE)], later(15))
    assert d.status.handover is not None and d.status.handover.phase == "Warming"
    d = run(_spec(), d.status, [exited(OLD, 1), driver(SPARE)], later(16))
    assert d.action == "none"  # waits for its readiness
    d = run(_spec(), d.status, [exited(OLD, 1), driver(SPARE)], later(40))
    assert d.status.handover.phase == "FellBack"  # type: ignore[union-attr]
    assert d.status.attempt == 3  # the cold path: neither name is reused


def test_a_restart_nonce_hands_over_to_a_ready_standby_between_batches():
    st = _ready_status()
    d = run(_spec(restartNonce=1), st, [driver(OLD), driver(SPARE)], later(20))
    assert d.status.handover is not None and d.status.handover.pod == SPARE
    assert d.status.deployed_restart_nonce == 1 and d.status.restarts == 1
    d = run(_spec(restartNonce=1), d.status, [driver(OLD), driver(SPARE)], later(20))
    assert d.action == "delete" and d.delete == (OLD,) and not d.force_delete  # graceful


def test_a_restart_class_change_drops_the_standby_and_skips_its_attempt():
    st = _ready_status()
    d = run(_spec(executor__instances=3), st, [driver(OLD), driver(SPARE)], later(20))
    assert d.status.handover is None and d.status.standby.state == "Removed"  # type: ignore[union-attr]
    assert d.status.attempt == 3 and d.status.driver_pod == "orders-e1-a3-driver"
    d = run(_spec(executor__instances=3), d.status, [driver(OLD), driver(SPARE)], later(20))
    assert d.action == "delete" and set(d.delete) == {OLD, SPARE}


def test_a_redeploy_drops_the_standby():
    st = _ready_status()
    d = run(_spec(redeployNonce=1), st, [driver(OLD), driver(SPARE)], later(20))
    assert (d.status.epoch, d.status.attempt) == (2, 1)
    assert d.status.standby.state == "Removed"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("pod", "signal", "why"),
    [
        (driver(SPARE, "Failed", termination=Termination(1)), None, "exit code 1"),
        (None, None, "is gone"),
        (driver(SPARE), _ready(state="failed", error="no executors"), "no executors"),
    ],
)
def test_a_failed_standby_is_replaced_after_a_backoff_under_a_new_name(pod, signal, why):
    st = _ready_status()
    pods = [driver(OLD), *([pod] if pod else [])]
    d = run(_spec(), st, pods, later(20), handover=signal)
    standby = d.status.standby
    assert standby is not None and standby.state == "Failed" and why in standby.message
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "StandbyFailed")]
    if pod is not None:
        d = run(_spec(), d.status, pods, later(20))
        assert d.action == "delete" and SPARE in d.delete + d.force_delete
    d = run(_spec(), d.status, [driver(OLD)], later(25))
    assert d.action == "none" and d.requeue_after == pytest.approx(5)  # backoff base 10 s
    d = run(_spec(), d.status, [driver(OLD)], later(30))
    assert d.action == "launch-standby" and d.status.standby.pod == "orders-e1-a3-driver"  # type: ignore[union-attr]


def test_a_standby_is_kept_off_the_nodes_counted_lost_when_it_starts():
    """Seen on kind: a node back from a freeze is Ready to the scheduler seconds before the
    operator hears its kubelet again. A standby placed there counted as lost at once, and its
    successor (backoff 0) too: 32 standbys in 5 s. Each one now avoids the nodes counted lost
    when it was recorded; the running attempt's avoidance (after its own loss) is not its."""
    st = launched(make_spec(handover={"readyTimeoutSeconds": 30}))
    d = run(_spec(), st, [driver(OLD)], later(10), lost_nodes=frozenset({"w2", "w1"}))
    assert d.action == "launch-standby" and d.status.standby is not None
    assert d.status.standby.avoid_nodes == ["w1", "w2"]
    launch = Launch.standby(d.status, entrypoint="run", spark_submit="submit")
    assert launch.avoid_nodes == ("w1", "w2") and launch.away_from_drivers
    d.status.avoid_nodes = ["w3"]  # the running attempt's, after a loss of its own
    assert Launch.standby(d.status, entrypoint="run", spark_submit="submit").avoid_nodes == (
        "w1",
        "w2",
    )
    d = run(_spec(), d.status, [driver(OLD)], later(11), lost_nodes=frozenset({"w4"}))
    assert d.action == "launch-standby"  # its creation again: off the nodes lost by then
    assert d.status.standby is not None and d.status.standby.avoid_nodes == ["w1", "w2", "w4"]
    quiet = run(_spec(), st, [driver(OLD)], later(10))
    assert quiet.status.standby is not None and quiet.status.standby.avoid_nodes == []


def test_a_standby_not_ready_in_time_fails():
    st = _warming(seconds=10)
    d = run(_spec(), st, [driver(OLD), driver(SPARE)], later(39))
    assert d.status.standby.state == "Warming" and d.requeue_after <= 1  # type: ignore[union-attr,operator]
    d = run(_spec(), st, [driver(OLD), driver(SPARE)], later(40))
    assert d.status.standby.state == "Failed"  # type: ignore[union-attr]
    assert "readyTimeoutSeconds=30" in d.status.standby.message  # type: ignore[union-attr]
    assert _condition(d.status) == ("False", "Failed")


def _condition(st: StreamingJobStatus) -> tuple[str, str]:
    set_conditions(st, 1, T0)
    condition = next(c for c in st.conditions if c.type == "StandbyReady")
    return condition.status, condition.reason


def test_switching_it_off_removes_the_standby_and_restarts_nothing():
    assert FIELD_CLASSES["standby"] == IGNORE
    st = _ready_status()
    d = run(make_spec(handover={"readyTimeoutSeconds": 30}), st, [driver(OLD), driver(SPARE)])
    assert d.status.standby.state == "Removed" and d.status.driver_pod == OLD  # type: ignore[union-attr]
    d = run(make_spec(), d.status, [driver(OLD), driver(SPARE)])
    assert d.action == "delete" and d.delete == (SPARE,)


def test_suspend_removes_the_standby_with_the_driver():
    st = _ready_status()
    d = run(_spec(suspend=True), st, [driver(OLD), driver(SPARE)], later(20))
    assert d.status.standby.state == "Removed"  # type: ignore[union-attr]
    assert d.action == "delete" and set(d.delete) == {OLD, SPARE}


def test_a_drain_hands_over_to_a_standby_on_another_node_without_a_failure():
    st = _ready_status()
    draining = driver(OLD, node="w1", node_cordoned=True)
    d = run(_spec(), st, [draining, driver(SPARE, node="w2")], later(20), handover=_ready())
    assert d.status.handover is not None and d.status.last_restart_reason == "NodeDrained"
    assert d.status.consecutive_failures == 0
    # a standby on a cordoned node too: the cold move, which drops it
    both = [draining, driver(SPARE, node="w1", node_cordoned=True)]
    d = run(_spec(), st, both, later(20), handover=_ready())
    assert d.status.handover is None and d.status.standby.state == "Removed"  # type: ignore[union-attr]
    assert d.status.attempt == 3


def test_a_crash_loop_still_backs_off_with_a_standby():
    st = _ready_status()
    st.consecutive_failures = 1  # the previous attempt failed moments ago
    d = run(_spec(), st, [exited(OLD, 1), driver(SPARE)], later(20), handover=_ready())
    assert d.status.next_retry_time  # base 10 s: the second failure's first step
    d = run(_spec(), d.status, [driver(SPARE)], later(21), handover=_ready())
    assert d.action == "wait" and d.requeue_after == pytest.approx(9)
    d = run(_spec(), d.status, [driver(SPARE)], later(30), handover=_ready())
    assert d.action == "go"


def test_an_operator_restart_mid_takeover_continues_from_status():
    st = _ready_status()
    d = run(_spec(), st, [exited(OLD, 1), driver(SPARE)], later(20), handover=_ready())
    st = StreamingJobStatus.model_validate(status_body(d.status))
    d = run(_spec(), st, [driver(SPARE)], later(21), handover=_ready())
    assert d.action == "go"


def test_past_max_restarts_the_standby_goes_too():
    st = _ready_status()
    st.recent_failures = [st.launched_at] * 3
    d = run(_spec(), st, [exited(OLD, 1), driver(SPARE)], later(20))
    assert d.status.phase == "Failed"
    d = run(_spec(), d.status, [exited(OLD, 1), driver(SPARE)], later(21))
    assert d.status.standby.state == "Removed"  # type: ignore[union-attr]
    assert d.action == "delete" and SPARE in d.delete + d.force_delete


def test_the_standby_reasons_are_in_the_vocabulary():
    assert {"StandbyReady", "StandbyFailed", "StandbyTakeover"} <= set(REASONS)
