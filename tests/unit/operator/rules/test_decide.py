"""The decision table of docs/operator/lifecycle.md, row by row."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from spark_app.api.manifest import checkpoint_location
from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus
from streamingjob_operator.api.status_records import HistoryEntry
from streamingjob_operator.io.errors import InvalidJobError
from streamingjob_operator.rules.decide import (
    FIELD_CLASSES,
    IGNORE,
    REDEPLOY,
    RESTART,
    SEPARATE,
    DecideConfig,
    backoff_delay,
)
from streamingjob_operator.rules.observed import PodInfo, Report, Termination, iso
from tests.unit.operator.helpers_operator import (
    CFG,
    NAME,
    NS,
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

LOC1 = checkpoint_location("s3a://ckpt/base", NS, NAME, 1)
LOC2 = checkpoint_location("s3a://ckpt/base", NS, NAME, 2)


def test_every_spec_field_is_classified():
    assert set(FIELD_CLASSES) == set(StreamingJobSpec.model_fields)
    assert set(FIELD_CLASSES.values()) <= {REDEPLOY, RESTART, IGNORE, SEPARATE}


# --- row: none, never launched → launch epoch 1 (fresh) -------------------------------


def test_first_launch_records_target_before_launching():
    spec = make_spec()
    d = run(spec, StreamingJobStatus())
    st = d.status
    assert d.action == "none" and d.requeue_after == 0  # recorded first (write-ahead)
    assert (st.epoch, st.attempt, st.launch_state) == (1, 1, "Pending")
    assert st.driver_pod == "orders-e1-a1-driver"
    assert st.checkpoint_location == LOC1
    assert st.phase == "Launching"
    d2 = run(spec, st)
    assert d2.action == "launch"


def test_launch_pending_with_existing_pod_is_adopted_not_recreated():
    spec = make_spec()
    st = run(spec, StreamingJobStatus()).status
    d = run(spec, st, [driver("orders-e1-a1-driver", "Pending")])
    assert d.action == "none"
    assert d.status.launch_state == "Created"
    assert [e.reason for e in d.events] == ["Launched"]


# --- row: running, same → nothing --------------------------------------------------------


def test_running_driver_same_spec_does_nothing():
    spec = make_spec()
    st = launched(spec)
    d = run(spec, st, [driver(st.driver_pod), executor("x-exec-1", st.driver_pod)], later(5))
    assert d.action == "none"
    assert d.status.phase == "Running"
    assert d.status.epoch == 1 and d.status.attempt == 1


# --- rows: driver terminated / deleted / evicted / node lost → restore after backoff ----


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (exited("orders-e1-a1-driver", 1, "Error"), "DriverFailed"),
        (exited("orders-e1-a1-driver", 0, "Completed"), "DriverExited"),
        (exited("orders-e1-a1-driver", 137, "OOMKilled"), "OOMKilled"),
        (driver("orders-e1-a1-driver", "Failed", reason="Evicted"), "DriverEvicted"),
        (None, "DriverDeleted"),
        (driver("orders-e1-a1-driver", "Unknown", ready_unknown_since=T0), "NodeLost"),
        (driver("orders-e1-a1-driver", "Running", deleting_since=T0), "DriverDeleted"),
    ],
)
def test_driver_gone_relaunches_same_epoch_after_backoff(pod, reason):
    spec = make_spec()
    st = launched(spec)
    pods = [pod] if pod else []
    now = later(100)
    d = run(spec, st, pods, now)
    new = d.status
    assert d.restart_reason == reason
    assert (new.epoch, new.attempt) == (1, 2)
    assert new.checkpoint_location == LOC1  # same location: Spark restores
    assert new.driver_pod == "orders-e1-a2-driver"
    assert new.launch_state == "Pending" and new.phase == "Restarting"
    assert new.next_retry_time == iso(later(110))  # base 10s
    assert new.restarts == 1 and new.consecutive_failures == 1
    assert new.last_restart_reason == reason
    assert {"DriverFailed", "BackOff"} <= {e.reason for e in d.events}


def test_backoff_then_fencing_then_launch():
    spec = make_spec()
    st = launched(spec)
    old = exited("orders-e1-a1-driver", 1)
    ex = executor("orders-e1-a1-driver-exec-1", "orders-e1-a1-driver")
    st = run(spec, st, [old, ex], later(100)).status
    # old pods are stale: deleted first, even during backoff
    d = run(spec, st, [old, ex], later(101))
    assert d.action == "delete"
    assert (d.delete, d.force_delete) == ((), (old.name, ex.name))  # nothing left running
    # gone, but backoff not over → wait until nextRetryTime
    d = run(spec, st, [], later(105))
    assert d.action == "wait" and d.requeue_after == pytest.approx(5)
    # backoff over → launch
    d = run(spec, st, [], later(110))
    assert d.action == "launch"
    assert d.status.driver_pod == "orders-e1-a2-driver"


def test_node_lost_only_after_grace_period_then_forced():
    spec = make_spec()
    st = launched(spec)
    unknown = driver(st.driver_pod, "Unknown")
    d = run(spec, st, [unknown], later(10))
    assert d.action == "none" and d.status.unknown_since == iso(later(10))
    d = run(spec, d.status, [unknown], later(30))
    assert d.status.attempt == 1  # still within grace
    d = run(spec, d.status, [unknown], later(71))
    assert d.restart_reason == "NodeLost" and d.status.attempt == 2
    d = run(spec, d.status, [unknown], later(72))
    assert d.action == "delete" and d.force_delete == (unknown.name,)


def _created(spec):
    """Status right after the first driver was created (launchedAt = T0), not running yet."""
    st = run(spec, StreamingJobStatus()).status
    st = run(spec, st, [driver(st.driver_pod, "Pending")]).status
    assert st.launch_state == "Created"
    return st


def test_driver_that_cannot_start_says_why_once_per_attempt():
    spec = make_spec(restartPolicy__startTimeoutSeconds=300)
    st = _created(spec)
    pulling = driver(st.driver_pod, "Pending", not_starting="ImagePullBackOff: Back-off")
    d = run(spec, st, [pulling], later(20))
    assert d.action == "none" and d.status.phase == "Pending"
    assert "ImagePullBackOff" in d.status.message and "spec.image" in d.status.message
    assert [e.reason for e in d.events] == ["DriverNotStarting"]
    assert d.status.history[-1].reason == "DriverNotStarting"
    assert d.requeue_after == 30  # resync, well before the timeout
    again = run(spec, d.status, [pulling], later(40))
    assert again.events == [] and len(again.status.history) == len(d.status.history)


def test_a_driver_that_cannot_start_is_told_once_also_after_another_entry_in_history():
    """Found by the simulation (issue 41, seed 0 of `0-63` once it counted Warnings per
    driver pod): a refused offsets action wrote its entry between two looks at a driver whose
    image could not be pulled, and the second look told it again. The history entry comes
    back (the Degraded condition reads the newest entry), the Warning does not."""
    spec = make_spec(restartPolicy__startTimeoutSeconds=300)
    st = _created(spec)
    pulling = driver(st.driver_pod, "Pending", not_starting="ImagePullBackOff: Back-off")
    d = run(spec, st, [pulling], later(20))
    assert [e.reason for e in d.events] == ["DriverNotStarting"]
    refused = HistoryEntry(time=iso(later(30)), reason="OffsetsRefused", message="not suspended")
    d.status.history.append(refused)
    again = run(spec, d.status, [pulling], later(40))
    assert again.events == []
    assert again.status.history[-1].reason == "DriverNotStarting"


def test_driver_not_started_within_timeout_is_a_failed_attempt():
    spec = make_spec(restartPolicy__startTimeoutSeconds=300)
    st = _created(spec)
    unschedulable = driver(st.driver_pod, "Pending", not_starting="Unschedulable: 0/3 nodes")
    d = run(spec, st, [unschedulable], later(290))
    assert d.status.attempt == 1 and d.requeue_after == pytest.approx(10)
    assert "spec.nodeSelector" in d.status.message
    d = run(spec, d.status, [unschedulable], later(300))
    assert d.restart_reason == "StartTimeout" and d.status.attempt == 2
    assert "startTimeoutSeconds=300" in d.status.message
    assert "Unschedulable: 0/3 nodes" in d.status.message
    assert d.status.consecutive_failures == 1 and d.status.phase == "Restarting"
    # the pod that never started is stale now: deleted before the next launch
    d = run(spec, d.status, [unschedulable], later(301))
    assert d.action == "delete" and d.delete == (unschedulable.name,)


def test_driver_pending_without_a_problem_only_waits():
    spec = make_spec()
    st = _created(spec)
    d = run(spec, st, [driver(st.driver_pod, "Pending")], later(5))
    assert d.action == "none" and d.events == [] and d.status.phase == "Pending"


def test_stuck_terminating_pod_is_force_deleted_after_grace():
    spec = make_spec()
    st = launched(spec)
    stuck = driver(st.driver_pod, "Running", deleting_since=later(1))
    st = run(spec, st, [stuck], later(2)).status
    # waiting: first its own termination grace (30 s), then the node-lost grace (60 s)
    for t in (30, 62, 90):
        d = run(spec, st, [stuck], later(t))
        assert d.action == "delete" and d.delete == () and d.force_delete == (), t
    d = run(spec, st, [stuck], later(92))
    assert d.force_delete == (stuck.name,)


def test_backoff_is_exponential_with_cap():
    spec = make_spec()
    assert [backoff_delay(spec, n) for n in (1, 2, 3, 4, 5, 9)] == [10, 20, 40, 60, 60, 60]
    assert backoff_delay(spec, 500) == 60


def test_consecutive_failures_grow_backoff_and_stable_run_resets():
    spec = make_spec(restartPolicy__maxRestarts=10)
    st = launched(spec)
    now = 0.0
    delays = []
    for _ in range(3):
        now += 1
        d = run(spec, st, [exited(st.driver_pod, 1)], later(now))
        delays.append(d.requeue_after)
        st = d.status
        now += d.requeue_after
        d = run(spec, st, [], later(now))
        assert d.action == "launch"
        st = run(spec, st, [driver(st.driver_pod)], later(now)).status
        st = run(spec, st, [driver(st.driver_pod)], later(now)).status
    assert delays == [10, 20, 40]
    assert st.consecutive_failures == 3
    # runs stably for stableRunSeconds → counters reset, next failure backs off from base
    d = run(spec, st, [driver(st.driver_pod)], later(now + 121))
    assert d.status.consecutive_failures == 0 and d.status.recent_failures == []
    assert [e.reason for e in d.events] == ["StableRun"]
    d = run(spec, d.status, [exited(st.driver_pod, 1)], later(now + 130))
    assert d.requeue_after == 10
    assert d.status.restarts == 4  # the total keeps counting


# --- row: failed past maxRestarts → Failed until a nonce ----------------------------------


def test_max_restarts_in_window_fails_with_resume_hint_and_nonce_resumes():
    spec = make_spec()  # maxRestarts 3 within 600s
    st = launched(spec)
    t = 0.0
    for i in range(3):
        t += 20
        st = run(spec, st, [exited(st.driver_pod, 1)], later(t)).status
        assert st.phase == "Restarting", i
        t += 70
        st = run(spec, st, [], later(t)).status  # launch decision (status unchanged)
        st = run(spec, st, [driver(st.driver_pod, "Pending")], later(t)).status
    d = run(spec, st, [exited(st.driver_pod, 1)], later(t + 10))
    assert d.status.phase == "Failed"
    assert "restartNonce" in d.status.message and "redeployNonce" in d.status.message
    assert "maxRestarts=3" in d.status.message
    assert [e.reason for e in d.events][-1] == "MaxRestartsExceeded"
    failed = d.status
    # no relaunch: the failed pod is cleaned up, then nothing
    d = run(spec, failed, [exited(st.driver_pod, 1)], later(t + 11))
    assert d.action == "delete"
    d = run(spec, failed, [], later(t + 1000))
    assert d.action == "none" and d.status.phase == "Failed"
    # an ignored field (restartPolicy) does not resume
    d = run(make_spec(restartPolicy__maxRestarts=50), failed, [], later(t + 1001))
    assert d.status.phase == "Failed"
    # restartNonce resumes, restoring (same epoch)
    d = run(make_spec(restartNonce=1), failed, [], later(t + 1002))
    assert d.status.phase == "Launching"
    assert (d.status.epoch, d.status.attempt) == (1, st.attempt + 1)
    assert d.status.consecutive_failures == 0


def test_failures_outside_window_do_not_count():
    spec = make_spec()  # 3 in 600s
    st = launched(spec)
    st = st.model_copy(update={"recent_failures": [iso(later(-5000))] * 3})
    d = run(spec, st, [exited(st.driver_pod, 1)], later(10))
    assert d.status.phase == "Restarting"
    assert d.status.recent_failures == [iso(later(10))]


def test_restart_policy_never_fails_at_first_exit():
    spec = make_spec(restartPolicy__type="Never")
    st = launched(spec)
    d = run(spec, st, [exited(st.driver_pod, 1)], later(10))
    assert d.status.phase == "Failed" and "Never" in d.status.message


def test_streaming_driver_exit_zero_is_a_failure_even_with_on_failure():
    spec = make_spec(restartPolicy__type="OnFailure")
    st = launched(spec)
    d = run(spec, st, [exited(st.driver_pod, 0)], later(10))
    assert d.status.phase == "Restarting" and d.restart_reason == "DriverExited"


def test_available_now_clean_exit_completes_under_on_failure():
    spec = make_spec(restartPolicy__type="OnFailure", job__trigger={"availableNow": True})
    st = launched(spec)
    d = run(spec, st, [exited(st.driver_pod, 0)], later(10))
    assert d.status.phase == "Completed" and d.restart_reason is None


# --- rows: manual acts ---------------------------------------------------------------------


def test_restart_nonce_restores_in_same_epoch_without_backoff():
    spec = make_spec()
    st = launched(spec)
    running = driver(st.driver_pod)
    d = run(make_spec(restartNonce=7), st, [running], later(10))
    assert (d.status.epoch, d.status.attempt) == (1, 2)
    assert d.status.checkpoint_location == LOC1
    assert d.status.next_retry_time == "" and d.requeue_after == 0
    assert d.status.deployed_restart_nonce == 7
    d = run(make_spec(restartNonce=7), d.status, [running], later(11))
    assert d.action == "delete" and d.delete == (running.name,)  # stop before relaunch
    d = run(make_spec(restartNonce=7), d.status, [], later(12))
    assert d.action == "launch"


def test_job_change_stateless_redeploys_into_new_epoch():
    spec = make_spec()
    st = launched(spec)
    changed = make_spec(job__sink={"format": "json", "path": "s3a://lake/orders-json"})
    d = run(changed, st, [driver(st.driver_pod)], later(10))
    assert (d.status.epoch, d.status.attempt) == (2, 1)
    assert d.status.checkpoint_location == LOC2
    assert [e.reason for e in d.events] == ["Redeploying"]


@pytest.mark.parametrize(
    "change",
    [{"image": "repo/streamingjob:2"}, {"sparkConf": {"spark.sql.shuffle.partitions": "4"}}],
)
def test_image_and_spark_conf_are_job_changes(change):
    spec = make_spec()
    st = launched(spec)
    key, value = next(iter(change.items()))
    d = run(make_spec(**{key: value}), st, [driver(st.driver_pod)], later(10))
    assert d.status.epoch == 2


def test_job_change_last_state_restores_in_same_epoch():
    spec = make_spec(upgradeMode="last-state")
    st = launched(spec)
    changed = make_spec(upgradeMode="last-state", image="repo/streamingjob:2")
    d = run(changed, st, [driver(st.driver_pod)], later(10))
    assert (d.status.epoch, d.status.attempt) == (1, 2)
    assert d.status.checkpoint_location == LOC1


def test_restart_class_change_restores_in_same_epoch():
    spec = make_spec()
    st = launched(spec)
    d = run(make_spec(executor={"instances": 4}), st, [driver(st.driver_pod)], later(10))
    assert (d.status.epoch, d.status.attempt) == (1, 2)


def test_ignored_fields_change_nothing():
    spec = make_spec()
    st = launched(spec)
    d = run(
        make_spec(restartPolicy__maxRestarts=99, upgradeMode="last-state"),
        st,
        [driver(st.driver_pod)],
        later(10),
    )
    assert d.action == "none" and (d.status.epoch, d.status.attempt) == (1, 1)


def test_redeploy_nonce_starts_new_epoch():
    spec = make_spec()
    st = launched(spec)
    d = run(make_spec(redeployNonce=1), st, [driver(st.driver_pod)], later(10))
    assert (d.status.epoch, d.status.attempt) == (2, 1)
    assert d.status.checkpoint_location == LOC2


def test_checkpoint_base_change_always_starts_new_epoch():
    spec = make_spec(upgradeMode="last-state")
    st = launched(spec)
    moved = make_spec(upgradeMode="last-state", checkpoint={"location": "s3a://other"})
    d = run(moved, st, [driver(st.driver_pod)], later(10))
    assert d.status.epoch == 2
    assert d.status.checkpoint_location == checkpoint_location("s3a://other", NS, NAME, 2)


# --- rows: suspend / resume -----------------------------------------------------------------


def test_suspend_stops_and_keeps_epoch():
    spec = make_spec()
    st = launched(spec)
    suspended = make_spec(suspend=True)
    pods = [driver(st.driver_pod), executor("e-1", st.driver_pod)]
    d = run(suspended, st, pods, later(10))
    assert d.action == "delete" and (d.delete, d.force_delete) == ((st.driver_pod,), ())
    assert d.status.suspended and d.status.phase == "Stopping"  # e-1 goes with its driver
    d = run(suspended, d.status, [], later(11))
    assert d.status.phase == "Suspended" and d.status.epoch == 1
    assert [e.reason for e in d.events] == ["Suspended"]
    d = run(suspended, d.status, [], later(12))
    assert d.action == "none" and d.events == []


@pytest.mark.parametrize(("mode", "expected"), [("stateless", (2, 1)), ("last-state", (1, 2))])
def test_resume(mode, expected):
    spec = make_spec(upgradeMode=mode)
    st = launched(spec)
    st = run(make_spec(upgradeMode=mode, suspend=True), st, [], later(10)).status
    d = run(make_spec(upgradeMode=mode, suspend=False), st, [], later(20))
    assert (d.status.epoch, d.status.attempt) == expected
    assert not d.status.suspended
    assert [e.reason for e in d.events] == ["Resumed"]


def test_a_new_epoch_catches_up_from_the_previous_epochs_checkpoint():
    spec = make_spec()
    st = launched(spec)
    assert st.previous_checkpoint_location == ""  # epoch 1: no epoch before it
    d = run(make_spec(redeployNonce=1), st, [driver(st.driver_pod)], later(10))
    assert d.status.epoch == 2 and d.status.previous_checkpoint_location == LOC1
    d = run(make_spec(redeployNonce=1), d.status, [], later(11))
    assert d.action == "launch"
    # A restore in the same epoch keeps it (a start that is still fresh catches up again).
    st = d.status.model_copy(update={"launch_state": "Created"})
    d = run(make_spec(redeployNonce=1, restartNonce=1), st, [], later(12))
    assert (d.status.epoch, d.status.attempt) == (2, 2)
    assert d.status.previous_checkpoint_location == LOC1


@pytest.mark.parametrize(
    ("change", "location"),
    [
        ({"redeployNonce": 1}, LOC2),
        (
            {"checkpoint": {"location": "s3a://other"}},
            checkpoint_location("s3a://other", NS, NAME, 2),
        ),
    ],
    ids=["redeployNonce", "checkpoint base"],
)
def test_a_resume_that_changes_the_redeploy_nonce_is_a_new_epoch_under_last_state(change, location):
    """A redeployNonce (or checkpoint base) change is a new epoch in every state: a resume
    that carries one used to restore the old checkpoint under last-state and mark the nonce
    deployed, so the redeploy never happened."""
    spec = make_spec(upgradeMode="last-state")
    st = launched(spec)
    st = run(make_spec(upgradeMode="last-state", suspend=True), st, [], later(10)).status
    resumed = make_spec(upgradeMode="last-state", suspend=False, **change)
    d = run(resumed, st, [], later(20))
    assert (d.status.epoch, d.status.attempt) == (2, 1)
    assert d.status.checkpoint_location == location
    assert d.status.previous_checkpoint_location == LOC1  # the same group catches up
    assert not d.status.suspended and [e.reason for e in d.events] == ["Resumed"]
    assert "fresh start from committed offsets" in d.status.message
    assert run(resumed, d.status, [], later(21)).action == "launch"


@pytest.mark.parametrize("mode", ["stateless", "last-state"])
def test_a_new_group_starts_where_the_user_asked_not_from_the_old_groups_checkpoint(mode):
    """The catch-up commits the previous epoch's checkpoint into the group: only when that
    checkpoint belongs to the same group. A new group starts from its own committed offsets
    or the reset strategy."""
    spec = make_spec(upgradeMode=mode)
    st = launched(spec)
    assert st.checkpoint_group_id == "orders-group"  # recorded with the epoch
    regrouped = make_spec(upgradeMode=mode, job__source__groupId="orders-v2", redeployNonce=1)
    d = run(regrouped, st, [], later(10))
    assert d.status.epoch == 2 and d.status.checkpoint_group_id == "orders-v2"
    assert d.status.previous_checkpoint_location == ""
    # the next redeploy in the new group catches up from its own epoch's checkpoint
    again = make_spec(upgradeMode=mode, job__source__groupId="orders-v2", redeployNonce=2)
    d = run(again, d.status.model_copy(update={"launch_state": "Created"}), [], later(20))
    assert d.status.epoch == 3 and d.status.previous_checkpoint_location == LOC2


def test_a_restore_in_a_new_group_owns_the_checkpoint_only_once_its_run_reads_as_it():
    """Simulation seed 1140 (of 0-1279): a group change under last-state targeted a restore
    that never ran (the operator crashed, then a stateless change redeployed): the new
    epoch caught up from the old epoch's checkpoint into the new group, whose reads it never
    held. The checkpoint's group is now the group of the run that started on it."""
    st = launched(make_spec(upgradeMode="last-state"))  # epoch 1 read as orders-group
    regrouped = {"upgradeMode": "last-state", "job__source__groupId": "orders-v2"}
    d = run(make_spec(**regrouped), st, [driver(st.driver_pod)], later(10))
    assert (d.status.epoch, d.status.attempt) == (1, 2)  # last-state: a restore
    assert d.status.checkpoint_group_id == "orders-group"  # not read as orders-v2 yet
    redeploy = make_spec(**{**regrouped, "upgradeMode": "stateless", "redeployNonce": 1})
    never_ran = run(redeploy, d.status, [], later(20))
    assert never_ran.status.epoch == 2 and never_ran.status.previous_checkpoint_location == ""
    # ... but once the restored run reports that it reads as orders-v2, the checkpoint is
    # that group's, and a redeploy catches up from it
    ran = Report(epoch=1, attempt=2, start_path="restored", group_id="orders-v2")
    created = d.status.model_copy(update={"launch_state": "Created"})
    d = run(make_spec(**regrouped), created, [driver("orders-e1-a2-driver")], later(15), report=ran)
    assert d.status.checkpoint_group_id == "orders-v2"
    d = run(redeploy, d.status, [], later(20))
    assert d.status.epoch == 2 and d.status.previous_checkpoint_location == LOC1


def test_a_status_without_a_recorded_group_catches_up_as_before():
    """Jobs launched by an operator that recorded no group keep their catch-up."""
    spec = make_spec()
    st = launched(spec).model_copy(update={"checkpoint_group_id": ""})
    d = run(make_spec(redeployNonce=1), st, [], later(10))
    assert d.status.previous_checkpoint_location == LOC1


# An offsets action makes the resume a new epoch under last-state too (its restored checkpoint
# would ignore the new offsets): tests/unit/operator/rules/test_offsets_action.py.
@pytest.mark.parametrize(("mode", "expected"), [("stateless", (2, 1)), ("last-state", (2, 1))])
def test_an_offsets_action_while_suspended_wins_over_the_catch_up(mode, expected):
    spec = make_spec(upgradeMode=mode)
    st = launched(spec)
    st = run(make_spec(upgradeMode=mode, suspend=True), st, [], later(10)).status
    st = st.model_copy(update={"offsets_acted_since_launch": True})  # the offsets action
    d = run(make_spec(upgradeMode=mode, suspend=False), st, [], later(20))
    assert (d.status.epoch, d.status.attempt) == expected
    assert d.status.previous_checkpoint_location == ""
    assert not d.status.offsets_acted_since_launch  # consumed by this launch
    d = run(make_spec(upgradeMode=mode, redeployNonce=1), d.status, [], later(30))
    assert d.status.previous_checkpoint_location == d.status.checkpoint_location.replace(
        f"epoch-{d.status.epoch}", f"epoch-{d.status.epoch - 1}"
    )


# --- fencing ------------------------------------------------------------------------------


def test_never_launch_while_any_other_pod_of_the_job_exists():
    spec = make_spec()
    st = launched(spec)
    st = run(make_spec(redeployNonce=1), st, [driver(st.driver_pod)], later(1)).status
    leftovers = [
        driver("orders-e1-a1-driver", "Running", deleting_since=later(1)),
        executor("orders-e1-a1-driver-exec-2", "orders-e1-a1-driver"),
    ]
    d = run(make_spec(redeployNonce=1), st, leftovers, later(2))
    assert d.action == "delete"  # waiting: the driver is deleting, its executor goes with it
    assert (d.delete, d.force_delete) == ((), ())
    d = run(make_spec(redeployNonce=1), st, leftovers[:1], later(3))
    assert d.action == "delete"  # still waiting: no launch
    d = run(make_spec(redeployNonce=1), st, leftovers[1:], later(4))
    assert d.action == "delete"  # the driver is gone: its executor is removed at once
    assert (d.delete, d.force_delete) == ((), ("orders-e1-a1-driver-exec-2",))
    assert run(make_spec(redeployNonce=1), st, [], later(5)).action == "launch"


def test_a_driver_whose_container_ended_is_gone_before_its_phase_says_so():
    """The kubelet sets the terminal phase only after cleaning up the pod, about a second
    after the container's terminated state: the restart starts from the latter."""
    spec = make_spec()
    st = launched(spec)
    ended = driver(st.driver_pod, "Running", termination=Termination(exit_code=137))
    ex = executor("orders-e1-a1-driver-exec-1", st.driver_pod)
    d = run(spec, st, [ended, ex], later(100))
    assert d.restart_reason == "DriverFailed" and d.status.attempt == 2
    d = run(spec, d.status, [ended, ex], later(101))
    assert d.action == "delete"
    assert (d.delete, d.force_delete) == ((), (ended.name, ex.name))  # no process to wait for


@pytest.mark.parametrize(
    "old_driver",
    [
        None,  # force-deleted: gone from the API server at once
        driver("orders-e1-a1-driver", "Failed"),  # its process was killed
        # node lost past the grace: forced too
        driver("orders-e1-a1-driver", "Unknown", ready_unknown_since=later(1)),
    ],
    ids=["gone", "finished", "lost"],
)
def test_executors_of_a_gone_or_finished_driver_are_removed_at_once(old_driver):
    spec = make_spec()
    st = launched(spec)
    st = run(spec, st, [], later(1)).status  # driver gone → attempt 2, the old pods are stale
    old = [executor(f"orders-e1-a1-driver-exec-{n}", "orders-e1-a1-driver") for n in (1, 2)]
    d = run(spec, st, [*old, *([old_driver] if old_driver else [])], later(200))
    assert d.action == "delete"
    assert set(d.force_delete) == {p.name for p in old} | (
        {old_driver.name} if old_driver else set()
    )


def test_executors_of_the_current_driver_are_not_stale():
    spec = make_spec()
    st = launched(spec)
    pods = [driver(st.driver_pod), executor("ex-1", st.driver_pod)]
    assert run(spec, st, pods, later(1)).action == "none"


# --- report, invalid spec, stale checkpoints ----------------------------------------------


def test_report_of_current_run_is_shown_and_stale_report_ignored():
    spec = make_spec()
    st = launched(spec)
    stale = Report(epoch=1, attempt=0, start_path="restored", restored_batch=3)
    d = run(spec, st, [driver(st.driver_pod)], later(1), report=stale)
    assert d.status.start_path == ""
    current = Report(
        epoch=1,
        attempt=1,
        start_path="fresh",
        start_detail="fresh: committed for orders-0",
        last_progress_time="2026-01-01T12:00:05Z",
    )
    d = run(spec, st, [driver(st.driver_pod)], later(1), report=current)
    assert d.status.start_path == "fresh"
    assert d.status.start_detail == "fresh: committed for orders-0"
    assert d.status.last_progress_time == "2026-01-01T12:00:05Z"


def test_offsets_a_run_skipped_are_an_event_each_time_a_condition_and_reset_by_a_new_run():
    """failOnDataLoss=false: the driver reports offsets it skipped (deleted or truncated
    before they were read). Each increase is a Warning Event; condition DataLoss is True
    while the run has skipped any, and False again for a new run that skipped none."""
    from streamingjob_operator.rules.status import set_conditions

    spec = make_spec()
    st = launched(spec)
    pods = [driver(st.driver_pod)]
    d = run(spec, st, pods, later(1), report=Report(epoch=1, attempt=1))
    assert d.events == [] and d.status.data_loss_skipped_offsets == 0
    skipped = Report(epoch=1, attempt=1, data_loss_skipped_offsets=1500)
    d = run(spec, d.status, pods, later(2), report=skipped)
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "DataLossSkipped")]
    assert d.events[0].message.startswith("1500 more offsets skipped (1500 in this run)")
    assert st.driver_pod in d.events[0].message  # whose log names them (the simulation's check)
    set_conditions(d.status, 1, later(2))
    loss = next(c for c in d.status.conditions if c.type == "DataLoss")
    assert (loss.status, loss.reason) == ("True", "OffsetsSkipped") and "1500" in loss.message
    assert run(spec, d.status, pods, later(3), report=skipped).events == []  # no news
    relaunched = run(spec, d.status, [exited(st.driver_pod, 1)], later(4))
    assert relaunched.status.data_loss_skipped_offsets == 0
    set_conditions(relaunched.status, 1, later(4))
    loss = next(c for c in relaunched.status.conditions if c.type == "DataLoss")
    assert (loss.status, loss.reason) == ("False", "NoneSkipped")


@pytest.mark.parametrize("act", [{"redeployNonce": 1}, {"restartNonce": 1}, {"suspend": True}])
def test_offsets_a_replaced_run_skipped_are_told_before_the_act_replaces_it(act):
    """Found by the simulation (seed 110 of stop 57): the driver counted skipped offsets,
    and a change came before the operator's next look; the new run's status starts from
    none, so the count was told nowhere. The run's last report is read first."""
    spec = make_spec()
    st = launched(spec)
    skipped = Report(epoch=1, attempt=1, data_loss_skipped_offsets=40)
    d = run(make_spec(**act), st, [driver(st.driver_pod)], later(1), report=skipped)
    assert [e.reason for e in d.events if e.type == "Warning"] == ["DataLossSkipped"]
    assert "40 more offsets skipped" in d.events[0].message and st.driver_pod in d.events[0].message


def test_dead_lettered_records_are_an_event_each_time_more_go_and_reset_by_a_new_run():
    """A dead-letter topic takes records that cannot be decoded; the driver counts this run's
    copies by reason. Each increase is a Warning Event naming the reasons; a relaunch starts
    from none; a report's garbage (a bad reason, a negative count) is never a label."""
    from streamingjob_operator.rules.observed import parse_report

    spec = make_spec()
    st = launched(spec)
    pods = [driver(st.driver_pod)]
    raw = {"epoch": 1, "attempt": 1, "deadLetterRecords": {"truncated": 2, "Bad Label!": 5}}
    report = parse_report({"data": {"report.json": json.dumps(raw)}})
    assert report is not None and report.dead_letter_records == {"truncated": 2}
    d = run(spec, st, pods, later(1), report=report)
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "DeadLettered")]
    assert d.events[0].message.startswith("2 more records could not be decoded")
    assert "(truncated 2 in this run)" in d.events[0].message
    assert d.status.dead_letter_records == {"truncated": 2}
    assert run(spec, d.status, pods, later(2), report=report).events == []  # no news
    more = Report(epoch=1, attempt=1, dead_letter_records={"truncated": 2, "bad-magic-byte": 3})
    d = run(spec, d.status, pods, later(3), report=more)
    assert d.events[0].message.startswith("3 more records could not be decoded")
    relaunched = run(spec, d.status, [exited(st.driver_pod, 1)], later(4))
    assert relaunched.status.dead_letter_records == {}


def test_the_sinks_transactions_are_status_and_an_aborted_batch_an_event_reset_by_a_new_run():
    """The exactly-once Kafka sink's counts of this run reach status as reported (garbage as
    0); each batch Spark aborted more is a Warning Event; a relaunch starts from none."""
    from streamingjob_operator.rules.observed import parse_report

    spec = make_spec()
    st = launched(spec)
    pods = [driver(st.driver_pod)]
    counts = {"transactions": 6, "replaysSkipped": 3, "records": 1500, "batchesAborted": -2}
    raw = {"epoch": 1, "attempt": 1, "sinkTransactions": {**counts, "other": 9}}
    report = parse_report({"data": {"report.json": json.dumps(raw)}})
    assert report is not None
    assert report.sink_transactions == {**counts, "batchesAborted": 0}
    d = run(spec, st, pods, later(1), report=report)
    assert d.events == [] and d.status.sink_transactions["replaysSkipped"] == 3
    aborted = Report(epoch=1, attempt=1, sink_transactions={**counts, "batchesAborted": 1})
    d = run(spec, d.status, pods, later(2), report=aborted)
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "SinkBatchAborted")]
    assert "1 more batch(es)" in d.events[0].message
    assert run(spec, d.status, pods, later(3), report=aborted).events == []  # no news
    relaunched = run(spec, d.status, [exited(st.driver_pod, 1)], later(4))
    assert relaunched.status.sink_transactions == {}


def test_invalid_spec_blocks_launch_with_event_once():
    spec = make_spec()
    st = run(spec, StreamingJobStatus()).status
    problem = InvalidJobError("spec.kafkaCredentials.secretName", "Secret 'x' not found")
    d = run(spec, st, invalid=problem)
    assert d.action == "none" and d.status.phase == "Invalid"
    assert "spec.kafkaCredentials.secretName" in d.status.message
    assert [e.reason for e in d.events] == ["InvalidSpec"]
    again = run(spec, d.status, invalid=problem)
    assert again.events == []
    assert run(spec, d.status).action == "launch"  # fixed → launches


def test_stale_checkpoint_is_refused_unless_forced():
    spec = make_spec(checkpoint={"location": "s3a://ckpt/base", "maxCheckpointAgeSeconds": 60})
    st = launched(spec)
    st = st.model_copy(update={"last_progress_time": iso(later(0))})
    d = run(spec, st, [exited(st.driver_pod, 1)], later(500))
    assert d.status.phase == "Failed"
    assert "force" in d.status.message and "redeployNonce" in d.status.message
    forced = make_spec(
        checkpoint={"location": "s3a://ckpt/base", "maxCheckpointAgeSeconds": 60, "force": True}
    )
    d = run(forced, st, [exited(st.driver_pod, 1)], later(500))
    assert d.status.phase == "Restarting"


def test_history_is_bounded():
    spec = make_spec(restartPolicy__maxRestarts=1000)
    st = launched(spec)
    for i in range(30):
        st = run(spec, st, [exited(st.driver_pod, 1)], later(i * 1000)).status
        st = st.model_copy(update={"launch_state": "Created"})
    assert len(st.history) == CFG.history_limit


def test_decide_is_pure():
    spec = make_spec()
    st = launched(spec)
    before = st.model_dump()
    pods = (PodInfo(name=st.driver_pod, role="driver", phase="Failed"),)
    run(spec, st, pods, later(5))
    assert st.model_dump() == before


# --- one lost-pod rule for every path (semantics rule 10) ---------------------------------


def _heard(pod: PodInfo, seconds: float, **kw) -> PodInfo:
    """`pod` on node w1, whose lease this operator last saw renewed at T0 + seconds."""
    return replace(pod, node="w1", node_heard_at=later(seconds), **kw)


def test_a_silent_node_loses_its_driver_after_the_grace_counted_from_its_last_renewal():
    spec = make_spec()
    st = launched(spec)
    alive = _heard(driver(st.driver_pod), 0)
    assert run(spec, st, [alive], later(15)).status.unknown_since == ""  # renewals are 10 s
    d = run(spec, st, [alive], later(25))  # silent: the job looks again when the grace ends
    assert d.action == "none" and d.status.attempt == 1
    assert d.status.unknown_since == iso(T0) and d.requeue_after == pytest.approx(30)
    d = run(spec, d.status, [alive], later(60))
    assert d.restart_reason == "NodeLost" and d.status.attempt == 2
    assert "node w1" in d.status.message
    assert d.status.avoid_nodes == ["w1"]  # the scheduler may still think it Ready
    d = run(spec, d.status, [alive], later(61))
    assert d.action == "delete" and d.force_delete == (alive.name,)


def test_every_driver_is_created_off_the_nodes_counted_lost_at_its_creation():
    """A node the operator counts lost may still be Ready to the scheduler (a grace shorter
    than the node lifecycle controller's; a node back from a freeze before its kubelet is
    heard): a driver placed there would count as lost at once. Found by the simulation: a
    restart targeted before a node was lost, created after. The launch itself keeps off every
    node counted lost then; the attempt after a loss also off its own node."""
    spec = make_spec()
    d = run(spec, StreamingJobStatus())  # the target recorded, no node lost yet
    d = run(spec, d.status, lost_nodes=frozenset({"w9", "w3"}))
    assert d.action == "launch" and d.status.avoid_nodes == ["w3", "w9"]
    st = launched(spec)
    d = run(spec, st, [_heard(driver(st.driver_pod), 0)], later(60))
    assert d.restart_reason == "NodeLost" and d.status.avoid_nodes == ["w1"]
    d = run(spec, d.status, now=later(80), lost_nodes=frozenset({"w3"}))
    assert d.action == "launch" and d.status.avoid_nodes == ["w1", "w3"]


def test_a_node_heard_from_keeps_its_driver_whatever_the_pod_conditions_say():
    spec = make_spec()
    st = launched(spec)
    unknown = _heard(driver(st.driver_pod), 100, ready_unknown_since=later(0))
    d = run(spec, st, [unknown], later(110))
    assert d.action == "none" and d.status.attempt == 1 and d.status.phase == "Running"


@pytest.mark.parametrize(
    "manual",
    [{"restartNonce": 1}, {"redeployNonce": 1}, {"suspend": True}, {"driver": {"cores": 2}}],
    ids=["restartNonce", "redeployNonce", "suspend", "pod-class change"],
)
@pytest.mark.parametrize("view", ["lease", "ready-unknown"])
def test_manual_acts_wait_out_the_grace_for_a_driver_on_an_unreachable_node(manual, view):
    """The exception issue 15 found: a manual act used to force-delete a driver whose node was
    unreachable at once, and relaunch on the same checkpoint while it might still run."""
    spec = make_spec()
    st = launched(spec)
    old = driver(st.driver_pod)
    silent = _heard(old, 0) if view == "lease" else replace(old, ready_unknown_since=later(0))
    st = run(spec, st, [silent], later(25)).status  # noticed: silent, within the grace
    changed = make_spec(**manual)
    d = run(changed, st, [silent], later(30))
    for t in (31, 45, 59):
        d = run(changed, d.status, [silent], later(t))
        assert silent.name not in d.force_delete and d.action != "launch", t
    d = run(changed, d.status, [silent], later(61))
    assert d.force_delete == (silent.name,)


def test_a_pod_being_deleted_on_a_live_node_is_waited_for_not_forced():
    spec = make_spec()
    st = launched(spec)
    st = run(make_spec(restartNonce=1), st, [driver(st.driver_pod)], later(1)).status
    stopping = _heard(driver("orders-e1-a1-driver", deleting_since=later(1)), 200)
    d = run(make_spec(restartNonce=1), st, [stopping], later(205))
    assert d.action == "delete" and (d.delete, d.force_delete) == ((), ())


def test_a_cordoned_node_moves_the_job_gracefully_before_the_drain_evicts_it():
    spec = make_spec()
    st = launched(spec)
    pods = [
        _heard(driver(st.driver_pod), 9),
        replace(executor("e-1", st.driver_pod), node="w2", node_cordoned=True),
    ]
    d = run(spec, st, pods, later(10))
    assert d.restart_reason == "NodeDrained" and d.status.attempt == 2
    assert d.status.epoch == 1 and d.status.consecutive_failures == 0
    assert [e.reason for e in d.events] == ["NodeDrained"] and "w2" in d.status.message
    d = run(spec, d.status, pods, later(11))  # the driver stops between batches
    assert d.action == "delete" and (d.delete, d.force_delete) == ((st.driver_pod,), ())
    assert run(spec, d.status, [], later(20)).action == "launch"


def test_a_drain_eviction_before_the_cordon_was_seen_is_a_move_not_a_failure():
    spec = make_spec()
    st = launched(spec)
    evicted = _heard(driver(st.driver_pod, deleting_since=later(9)), 9, node_cordoned=True)
    d = run(spec, st, [evicted], later(10))
    assert d.restart_reason == "NodeDrained" and d.status.consecutive_failures == 0
    assert d.status.next_retry_time == ""  # no backoff
    d = run(spec, d.status, [evicted], later(11))
    assert d.action == "delete" and (d.delete, d.force_delete) == ((), ())  # it stops itself


def test_a_driver_on_a_node_between_renewals_is_never_lost_whatever_the_grace():
    """The grace counts from the last renewal seen, but a healthy node's last renewal is up
    to one interval old: a pod is lost only once its node has been silent (two missed
    renewals), even with a grace shorter than that (which settings.py refuses anyway)."""
    cfg = DecideConfig(node_lost_grace_seconds=5, node_silent_seconds=20, resync_seconds=30)
    spec = make_spec()
    st = launched(spec)
    for renewed in (0, 10, 20, 30):  # a healthy kubelet: every 10 s
        for t in (renewed + 6, renewed + 9.9):
            pod = _heard(driver(st.driver_pod), renewed)
            d = run(spec, st, [pod], later(t), cfg=cfg)
            assert d.action == "none" and d.restart_reason is None, t
            assert d.status.attempt == 1 and d.status.phase == "Running"
            st = d.status
    silent = _heard(driver(st.driver_pod), 30)
    d = run(spec, st, [silent], later(50), cfg=cfg)
    assert d.restart_reason == "NodeLost"  # silent for 20 s: lost (the grace is past)


def test_a_failed_catch_up_restarts_with_backoff_naming_the_checkpoint_and_cause():
    """The runner's exit 5: the previous epoch's last durable batch did not reach the group,
    nothing was read. A restart with backoff (the next attempt is still a fresh start, so it
    catches up again); the Degraded condition carries the runner's termination message."""
    from streamingjob_operator.rules.status import set_conditions

    spec = make_spec(restartPolicy__maxRestarts=10)
    st = launched(spec)
    said = (
        f"the previous epoch's checkpoint {LOC1}: its last durable batch 7 could not be "
        "committed to group 'orders-group' (failed: reading the group: Kafka unreachable)"
    )
    ended = driver(st.driver_pod, "Failed", termination=Termination(5, "Error", said))
    d = run(spec, st, [ended], later(1))
    assert d.restart_reason == "CatchUpFailed" and d.requeue_after == 10
    assert (d.status.epoch, d.status.attempt) == (1, 2)
    set_conditions(d.status, 1, later(1))
    degraded = next(c for c in d.status.conditions if c.type == "Degraded")
    assert degraded.reason == "CatchUpFailed" and said in degraded.message
    bare = driver(st.driver_pod, "Failed", termination=Termination(5, "Error", ""))
    d = run(spec, st, [bare], later(1))
    assert "could not be committed to the group; nothing was read" in d.status.message


def test_a_failed_query_names_its_cause_in_the_degraded_condition():
    """The runner's exit 1 carries why the query failed in the termination message (here a
    topic deleted mid-stream); the restart's Event and the Degraded condition name it."""
    from streamingjob_operator.rules.status import set_conditions

    spec = make_spec()
    st = launched(spec)
    said = "the query failed: topic orders was deleted while the job read orders-0 [0, 10)"
    ended = driver(st.driver_pod, "Failed", termination=Termination(1, "Error", said))
    d = run(spec, st, [ended], later(1))
    assert d.restart_reason == "DriverFailed"
    assert any(said in e.message for e in d.events)
    set_conditions(d.status, 1, later(1))
    degraded = next(c for c in d.status.conditions if c.type == "Degraded")
    assert degraded.reason == "DriverFailed" and said in degraded.message


@pytest.mark.parametrize(("code", "reason"), [(3, "KafkaAuthFailed"), (4, "KafkaTLSFailed")])
def test_kafka_refusals_of_the_runner_restart_with_backoff_naming_the_secret(code, reason):
    """The runner's exit 3 (SASL refused) or 4 (TLS failed) is a restart like any failure
    (growing backoff, maxRestarts) with its own reason; the Degraded condition carries the
    runner's termination message (which Secret, which cause)."""
    from streamingjob_operator.rules.status import set_conditions

    spec = make_spec(restartPolicy__maxRestarts=10)
    st = launched(spec)
    said = "spec.kafkaCredentials.secretName (Secret 'kafka-creds'): authentication failed"
    ended = driver(st.driver_pod, "Failed", termination=Termination(code, "Error", said))
    d = run(spec, st, [ended], later(1))
    assert d.restart_reason == reason and d.requeue_after == 10
    assert d.status.last_restart_reason == reason
    assert any(e.reason == "DriverFailed" and reason in e.message for e in d.events)
    set_conditions(d.status, 1, later(1))
    degraded = next(c for c in d.status.conditions if c.type == "Degraded")
    assert degraded.reason == reason and said in degraded.message
