"""Findings 1-4 of issue 41, each found by the simulation (simulation/, docs/semantics.md "The
simulation") before it was fixed, pinned here as an example test of the rule it broke."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.observed import Signal, Termination
from streamingjob_operator.rules.status import set_conditions
from tests.unit.operator.helpers_operator import (
    driver,
    exited,
    later,
    launched,
    make_spec,
    run,
)

pytestmark = pytest.mark.unit

UID_A = "0f1e2d3c-0000-4000-8000-00000000000a"
UID_B = "0f1e2d3c-0000-4000-8000-00000000000b"
WARM = {"mode": "warm", "readyTimeoutSeconds": 30}


# --- 1. a job deleted and created again under the same name ----------------------------------


def test_a_job_created_again_under_the_same_name_starts_in_checkpoints_of_its_own():
    """Rule 5 (a first launch starts fresh) and rule 1 (the checkpoint is the job's state):
    the old job's `epoch-1` is neither restored nor its Delta app id (the location) reused."""
    spec = make_spec()
    a = run(spec, StreamingJobStatus(), uid=UID_A)
    b = run(spec, StreamingJobStatus(), uid=UID_B)
    assert a.status.checkpoint_location == f"s3a://ckpt/base/team/orders/{UID_A}/epoch-1"
    assert b.status.checkpoint_location == f"s3a://ckpt/base/team/orders/{UID_B}/epoch-1"


def test_a_restart_keeps_the_location_its_epoch_was_given():
    """An epoch launched under the layout without uid (an earlier operator) restores its own
    checkpoint after an upgrade: the next attempt never moves to a new, empty location."""
    spec = make_spec()
    st = launched(spec)
    st.checkpoint_location = "s3a://ckpt/base/team/orders/epoch-1"
    d = run(spec, st, [driver(st.driver_pod, "Failed", termination=Termination(1))], uid=UID_A)
    assert d.status.attempt == 2
    assert d.status.checkpoint_location == "s3a://ckpt/base/team/orders/epoch-1"


# --- 2. the catch-up reaches back past epochs that never started ----------------------------


def test_a_redeploy_after_an_epoch_that_never_started_catches_up_from_the_one_before():
    """Rule 9: epoch 2's start failed before its query (a failed catch-up, exit 5); a second
    redeploy must still commit epoch 1's last durable batch, not count epoch 2's empty
    checkpoint as 'nothing durable' and read the group's stale offsets again."""
    spec = make_spec()
    st = launched(spec)  # epoch 1 running
    d = run(make_spec(redeployNonce=1), st, [driver(st.driver_pod)], later(10), uid=UID_A)
    d = run(make_spec(redeployNonce=1), d.status, [], later(11), uid=UID_A)
    epoch1 = st.checkpoint_location
    assert d.status.epoch == 2 and d.status.previous_checkpoint_location == epoch1
    epoch2 = d.status.checkpoint_location
    d = run(make_spec(redeployNonce=2), d.status, [], later(20), uid=UID_A)
    assert d.status.epoch == 3
    launch = Launch.of(d.status, entrypoint="run.py", spark_submit="spark-submit")
    assert launch.previous_checkpoints == (epoch2, epoch1)


# --- 3. a suspend racing a warm hand-over's go ------------------------------------------------


OLD, NEW = "orders-e1-a1-driver", "orders-e2-a1-driver"


def _handing_over(go: bool):
    """A warm redeploy of a running job up to the go: written (`go`) or not yet."""
    spec = make_spec(handover=WARM)
    redeploy = make_spec(handover=WARM, redeployNonce=1)
    st = launched(spec)
    d = run(redeploy, st, [driver(OLD)], later(10))
    d = run(redeploy, d.status, [driver(OLD)], later(10))
    d = run(redeploy, d.status, [driver(OLD), driver(NEW)], later(10))
    ready = Signal(NEW, 2, 1, "ready")
    d = run(redeploy, d.status, [driver(OLD), driver(NEW)], later(12), handover=ready)
    d = run(redeploy, d.status, [driver(NEW)], later(14), handover=ready)
    assert d.action == "go"
    return d.status, (Signal(NEW, 2, 1, "go") if go else None)


def test_a_suspend_after_the_go_keeps_the_epoch_the_next_driver_wrote():
    """Rule 4: once go.json names the next driver it may have read and committed; a suspend
    that comes before the operator saw the go must not drop its epoch, or a last-state
    resume restores the older checkpoint and reads again what the newer one wrote."""
    st, go = _handing_over(go=True)
    suspend = make_spec(handover=WARM, redeployNonce=1, suspend=True, upgradeMode="last-state")
    d = run(suspend, st, [driver(NEW)], later(15), go=go)
    assert (d.status.epoch, d.status.driver_pod) == (2, NEW)
    assert d.status.checkpoint_location.endswith("epoch-2")
    resume = make_spec(handover=WARM, redeployNonce=1, upgradeMode="last-state")
    d = run(resume, d.status, [], later(20))
    d = run(resume, d.status, [], later(20))
    assert d.status.epoch == 2 and d.status.checkpoint_location.endswith("epoch-2")


def test_a_suspend_before_the_go_never_hands_the_waiting_drivers_name_out_again():
    """Names are never reused: the cancelled next driver's pod (epoch 2 attempt 1) may still
    be terminating when the job is redeployed after the resume."""
    st, _ = _handing_over(go=False)
    suspend = make_spec(handover=WARM, redeployNonce=1, suspend=True)
    d = run(suspend, st, [driver(NEW)], later(15))
    assert d.status.epoch == 1 and d.action == "delete"
    d = run(suspend, d.status, [], later(16))
    resume = make_spec(handover=WARM, redeployNonce=1)
    d = run(resume, d.status, [], later(20))
    assert d.status.epoch == 3 and d.status.driver_pod != NEW


def test_a_group_changed_in_a_restart_catches_up_nothing_of_the_old_groups():
    """Found by the simulation (issue 41): under last-state a new groupId restarts in the
    epoch; when that epoch never started its query it still held the old group's catch-up
    chain, and its next attempt committed the old group's position to the new group."""
    spec = make_spec(upgradeMode="last-state")
    st = launched(spec)
    d = run(make_spec(upgradeMode="last-state", redeployNonce=1), st, [], later(10), uid=UID_A)
    assert d.status.epoch == 2 and d.status.previous_checkpoint_location
    other = make_spec(upgradeMode="last-state", redeployNonce=1, job__source__groupId="other")
    d = run(other, d.status, [], later(20), uid=UID_A)
    assert (d.status.epoch, d.status.attempt) == (2, 2)
    assert d.status.previous_checkpoint_location == "" and d.status.older_checkpoint_locations == []


def test_a_group_changed_during_a_warm_hand_over_is_not_the_next_drivers_group():
    """Found by the simulation (issue 41): the change waits for the hand-over's end; the
    driver given the go reads as the group it was launched with, and the restart the change
    then makes catches up nothing of that group into the new one."""
    st, go = _handing_over(go=True)
    changed = {"handover": WARM, "redeployNonce": 1, "upgradeMode": "last-state"}
    spec = make_spec(**changed, job__source__groupId="other")
    d = run(spec, st, [driver(NEW)], later(15), go=go)
    assert d.status.driver_pod == NEW and d.status.checkpoint_group_id == "orders-group"
    d = run(spec, d.status, [driver(NEW)], later(16))
    d = run(spec, d.status, [], later(17))
    target = d.status.handover or d.status
    assert target.attempt == 2 and target.previous_checkpoint_location == ""


# --- 5. a failure the job is stopped or replaced over -----------------------------------------


@pytest.mark.parametrize(
    "by_hand",
    [{"suspend": True}, {"redeployNonce": 1}],
    ids=["suspend", "redeploy"],
)
def test_a_failure_seen_together_with_a_suspend_or_redeploy_still_reaches_status_and_an_event(
    by_hand,
):
    """Found by the simulation (issue 41, seed 9): the leader crashed, the driver failed
    (exit 1) and the user suspended before the next leader took over. It saw both at once,
    stopped the failed pod as a suspended job's, and the failure was told nowhere. It is
    told as when a step followed it first: an Event and the history; suspended, Degraded
    names it (a redeploy starts the failure count afresh, as it does after a told one)."""
    spec = make_spec()
    st = launched(spec)
    failed = exited(st.driver_pod, 1)
    d = run(make_spec(**by_hand), st, [failed], later(10))
    told = [e for e in d.events if e.reason == "DriverFailed"]
    assert told and st.driver_pod in told[0].message
    assert any(st.driver_pod in h.message for h in d.status.history if h.reason == "DriverFailed")
    set_conditions(d.status, 2, later(10))  # as the reconcile records the step
    degraded = next(c for c in d.status.conditions if c.type == "Degraded")
    if "suspend" in by_hand:
        assert (degraded.status, degraded.reason) == ("True", "DriverFailed")
    again = run(make_spec(**by_hand), d.status, [failed], later(11))
    assert not [e for e in again.events if e.reason == "DriverFailed"]  # told once
    assert again.status.consecutive_failures == d.status.consecutive_failures


def test_a_failure_of_a_driver_whose_creation_was_not_noted_is_told_on_a_suspend():
    """The same, the operator that created the driver having crashed before it noted the
    creation (launch state Pending, the driver's pod there and failed)."""
    spec = make_spec()
    d = run(spec, StreamingJobStatus())
    d = run(spec, d.status)
    assert d.action == "launch" and d.status.launch_state == "Pending"
    pod = d.status.driver_pod
    d = run(make_spec(suspend=True), d.status, [exited(pod, 1)], later(10))
    assert [e for e in d.events if e.reason == "DriverFailed" and pod in e.message]


def test_a_failure_of_the_running_driver_during_a_warm_hand_over_is_told():
    """Found by the simulation (issue 41, seed 20): a job change started a warm hand-over;
    the running driver then exited 3 (Kafka refused the credentials) before its stop. The
    hand-over went on to the next driver and the cause was told nowhere."""
    spec = make_spec(handover=WARM)
    changed = make_spec(handover=WARM, redeployNonce=1)
    st = launched(spec)
    d = run(changed, st, [driver(OLD)], later(10))
    assert d.status.handover is not None
    d = run(changed, d.status, [exited(OLD, 3), driver(NEW)], later(12))
    told = [e for e in d.events if e.type == "Warning" and OLD in e.message]
    assert told and "KafkaAuthFailed" in told[0].message
    assert d.status.last_restart_reason == "KafkaAuthFailed"


def test_a_driver_forced_out_of_a_lost_node_while_suspending_is_told():
    """Found by the simulation (issue 41, seed 29): the driver's node was lost, the user
    suspended right after; the suspend waited out the node-lost grace, forced the pod out and
    said only Suspended. The loss is told: a Warning and the history name the pod."""
    spec = make_spec()
    st = launched(spec)
    gone = driver(st.driver_pod, node="node-2", node_heard_at=later(0))
    suspend = make_spec(suspend=True)
    d = run(suspend, st, [gone], later(1))
    assert not [e for e in d.events if e.type == "Warning"]  # not lost yet: a graceful stop
    d = run(suspend, d.status, [gone], later(120))
    assert st.driver_pod in d.force_delete
    told = [e for e in d.events if e.type == "Warning" and st.driver_pod in e.message]
    assert told and "NodeLost" in told[0].message
    d = run(suspend, d.status, [gone], later(122))
    assert not [e for e in d.events if e.type == "Warning"]  # told once


def test_a_driver_told_failed_then_forced_out_of_a_lost_node_is_told_once():
    """Found by the simulation (seed 152 of 0-255, once a node could freeze): after an
    outage the scheduler placed a driver on a dead node, not tainted yet; it timed out
    (StartTimeout, told) and was then forced out as lost: told a second time. Its end is told
    once, whichever comes first."""
    spec = make_spec(restartPolicy={"startTimeoutSeconds": 60})
    st = launched(spec)
    pending = driver(st.driver_pod, phase="Pending", node="node-3", node_heard_at=later(58))
    d = run(spec, st, [pending], later(61))
    told = [e for e in d.events if e.type == "Warning" and st.driver_pod in e.message]
    assert len(told) == 1 and "did not start" in told[0].message
    d = run(spec, d.status, [pending], later(200))  # its node silent past the grace: forced out
    assert st.driver_pod in d.force_delete
    assert not [e for e in d.events if e.type == "Warning" and st.driver_pod in e.message]


def test_a_replaced_driver_that_fails_before_its_stop_is_told_once():
    """Found by the simulation (seed 243 of 0-255): a restart by hand targeted attempt 2, the
    leader crashed before its delete of attempt 1 reached the API server, attempt 1 then
    failed (exit 1); the next leader removed it as a stale pod and told nothing. Told once,
    as a failure that a step followed is (its BackOff names the pod: not told again)."""
    spec = make_spec()
    st = launched(spec)
    old = st.driver_pod
    d = run(make_spec(restartNonce=1), st, [driver(old)], later(1))
    assert d.status.driver_pod != old and not d.events[1:]  # attempt 2 targeted
    d = run(make_spec(restartNonce=1), d.status, [exited(old, 1)], later(5))
    told = [e for e in d.events if e.type == "Warning" and old in e.message]
    assert len(told) == 1 and "exited 1" in told[0].message and old in d.force_delete
    d = run(make_spec(restartNonce=1), d.status, [exited(old, 1)], later(6))
    assert not [e for e in d.events if e.type == "Warning"]
    # a failure a step followed: its BackOff tells it, the ended pod is then removed quietly
    st = launched(spec)
    d = run(spec, st, [exited(st.driver_pod, 1)], later(1))
    assert [e.reason for e in d.events if e.type == "Warning"] == ["DriverFailed"]
    d = run(spec, d.status, [exited(st.driver_pod, 1)], later(2))
    assert not [e for e in d.events if e.type == "Warning"]


def test_a_driver_that_fails_while_a_suspend_waits_to_stop_it_is_told_once():
    """Found by the simulation (seed 219 of 0-399, stop 59): a suspend (an offsets action's)
    wrote Stopping, the leader crashed before its delete of the driver reached the API
    server, the driver then failed (exit 1); the next leader found it ended and suspended the
    job, telling nothing. Told once, as a failure a step followed is."""
    st = launched(make_spec())
    old = st.driver_pod
    d = run(make_spec(suspend=True), st, [driver(old)], later(1))
    assert d.status.phase == "Stopping" and old in d.delete  # the delete that never arrived
    d = run(make_spec(suspend=True), d.status, [exited(old, 1)], later(5))
    told = [e for e in d.events if e.type == "Warning" and old in e.message]
    assert len(told) == 1 and "exited 1" in told[0].message and old in d.force_delete
    d = run(make_spec(suspend=True), d.status, [exited(old, 1)], later(6))
    assert not [e for e in d.events if e.type == "Warning"]
    # a driver that stopped as asked (exit 0) is no failure
    d = run(make_spec(suspend=True), launched(make_spec()), [exited(old, 0)], later(5))
    assert not [e for e in d.events if e.type == "Warning"]
    # replaced by a restart's target first, then the suspend: the same
    d = run(make_spec(restartNonce=1), launched(make_spec()), [driver(old)], later(1))
    assert d.status.driver_pod != old
    d = run(make_spec(restartNonce=1, suspend=True), d.status, [exited(old, 1)], later(5))
    assert [e.reason for e in d.events if e.type == "Warning"] == ["DriverFailed"]


def test_a_driver_that_failed_as_its_deletion_was_sent_is_told_once_from_its_last_state():
    """Found by the simulation (seed 78 of 0-95, stop 57): a redeploy's reconcile saw the
    driver running and deleted it; it had just failed, and the pod went with its deletion
    before any list showed its end. Its last state, from the watch (`Observed.gone`), is told
    once; an end the deletion caused (exit 0, 143, 137) is not a failure."""
    spec = make_spec()
    st = launched(spec)
    old = st.driver_pod
    d = run(make_spec(redeployNonce=1), st, [driver(old)], later(1))
    assert d.status.driver_pod != old  # the new target first (write-ahead), then the delete
    failed = exited(old, 1)
    gone = replace(failed, deleting_since=later(1))
    d = run(make_spec(redeployNonce=1), d.status, [], later(2), gone=(gone,))
    told = [e for e in d.events if e.type == "Warning"]
    assert [e.reason for e in told] == ["DriverFailed"] and f"{old} exited 1" in told[0].message
    again = run(make_spec(redeployNonce=1), d.status, [], later(3), gone=(gone,))
    assert not [e for e in again.events if e.type == "Warning"]
    stopped = replace(exited(old, 0), deleting_since=later(1))
    quiet = run(make_spec(redeployNonce=1), st, [], later(2), gone=(stopped,))
    assert not [e for e in quiet.events if e.type == "Warning"]
