"""spec.offsetsAction, pure: when it runs, how it is recorded, the resume after it, and the
plan of spark_app.api.offsets_admin (ranges, timestamps, refusals)."""

from __future__ import annotations

import pytest

from spark_app.api.offsets_admin import (
    OffsetsRefused,
    OffsetsRequest,
    parse_timestamp,
    plan,
    request_of,
)
from streamingjob_operator.api.job import JobMeta
from streamingjob_operator.api.models import InvalidSpecError
from streamingjob_operator.rules import offsets_action
from streamingjob_operator.rules.decide import FIELD_CLASSES, SEPARATE, job_hash, pod_hash
from tests.unit.operator.helpers_operator import driver, later, launched, make_spec, run

pytestmark = pytest.mark.unit

RESET = {"nonce": 1, "action": "reset", "to": "earliest"}


def suspended(mode: str = "stateless"):
    spec = make_spec(upgradeMode=mode)
    st = launched(spec)
    st = run(make_spec(upgradeMode=mode, suspend=True), st, [], later(10)).status
    assert st.phase == "Suspended"
    return st


def test_an_offsets_action_changes_no_hash_and_relaunches_nothing():
    assert FIELD_CLASSES["offsets_action"] == SEPARATE
    with_action = make_spec(offsetsAction=RESET)
    assert job_hash(with_action) == job_hash(make_spec())
    assert pod_hash(with_action) == pod_hash(make_spec())
    st = launched(make_spec())
    d = run(with_action, st, [driver(st.driver_pod)], later(5))
    assert d.action == "none" and d.status.driver_pod == st.driver_pod


def test_gate_refuses_while_running_waits_while_stopping_runs_when_suspended():
    running = launched(make_spec())
    assert offsets_action.gate(make_spec(offsetsAction=RESET), running, True) == "refuse"
    spec = make_spec(suspend=True, offsetsAction=RESET)
    stopping = run(spec, running, [driver(running.driver_pod)], later(5)).status
    assert offsets_action.gate(spec, stopping, True) == "wait"
    st = suspended()
    assert offsets_action.gate(spec, st, False) == "run"
    assert offsets_action.gate(spec, st, True) == "wait"  # a pod is still there
    assert offsets_action.gate(make_spec(suspend=True), st, False) is None


def test_a_nonce_runs_once_and_a_reset_makes_the_resume_a_new_epoch_under_last_state():
    st = suspended("last-state")
    action = make_spec(suspend=True, offsetsAction=RESET).offsets_action
    assert action is not None
    event = offsets_action.record(
        st, action, "Succeeded", "done", who=("kubectl-patch", "t"), now=later(20), history_limit=20
    )
    assert (event.type, event.reason) == ("Normal", "OffsetsReset")
    assert "requested by kubectl-patch" in event.message
    assert st.offsets_acted_since_launch
    spec = make_spec(upgradeMode="last-state", suspend=True, offsetsAction=RESET)
    assert not offsets_action.pending(spec, st)
    d = run(make_spec(upgradeMode="last-state", offsetsAction=RESET), st, [], later(30))
    assert (d.status.epoch, d.status.attempt) == (2, 1)
    assert "after an offsets action" in d.status.message
    # and the resume after that one restores again (the marker names epoch 2 only)
    st = run(make_spec(upgradeMode="last-state", suspend=True), d.status, [], later(40)).status
    d = run(make_spec(upgradeMode="last-state"), st, [], later(50))
    assert (d.status.epoch, d.status.attempt) == (2, 2)


def test_a_list_or_a_refusal_does_not_force_a_new_epoch():
    st = suspended("last-state")
    listing = make_spec(offsetsAction={"nonce": 1, "action": "list"}).offsets_action
    offsets_action.record(
        st, listing, "Succeeded", "ok", who=("", ""), now=later(20), history_limit=20
    )
    refused = make_spec(offsetsAction=RESET).offsets_action
    event = offsets_action.record(
        st, refused, "Refused", "no", who=("", ""), now=later(21), history_limit=20
    )
    assert (event.type, event.reason) == ("Warning", "OffsetsRefused")
    assert not st.offsets_acted_since_launch


def test_requested_by_prefers_the_annotation_then_the_last_manager_of_the_field():
    entry = {
        "manager": "argocd",
        "time": "2026-01-01T00:00:02Z",
        "fieldsV1": {"f:spec": {"f:offsetsAction": {}}},
    }
    other = {
        "manager": "kubectl-edit",
        "time": "2026-01-01T00:00:03Z",
        "fieldsV1": {"f:spec": {"f:suspend": {}}},
    }
    meta = {"name": "orders", "namespace": "team", "managedFields": [entry, other]}
    assert offsets_action.requested_by(JobMeta.of(meta)) == ("argocd", "2026-01-01T00:00:02Z")
    meta["annotations"] = {offsets_action.REQUESTED_BY_ANNOTATION: "alice"}
    assert offsets_action.requested_by(JobMeta.of(meta))[0] == "alice"


@pytest.mark.parametrize(
    "bad",
    [
        {"nonce": 1, "action": "reset"},
        {"nonce": 1, "action": "list", "to": "latest"},
        {"nonce": 1, "action": "reset", "to": "timestamp"},
        {"nonce": 1, "action": "alter", "partitions": [{"topic": "t", "partition": 0}]},
        {"nonce": 1, "action": "list", "partitions": [{"topic": "t", "partition": 0, "offset": 3}]},
    ],
)
def test_malformed_actions_are_invalid(bad):
    with pytest.raises(InvalidSpecError):
        make_spec(offsetsAction=bad)


# --- spark_app.api.offsets_admin.plan -----------------------------------------------------------

RANGES = {("t", 0): (5, 20), ("t", 1): (0, 10)}
COMMITTED = {("t", 0): 7, ("t", 1): None}


def test_plan_earliest_latest_and_some_partitions():
    assert plan(request_of("reset", "earliest"), COMMITTED, RANGES) == {("t", 0): 5, ("t", 1): 0}
    some = request_of("reset", "latest", partitions=[("t", 1, None)])
    assert plan(some, COMMITTED, RANGES) == {("t", 1): 10}
    assert plan(request_of("list"), COMMITTED, RANGES) == {}


def test_plan_timestamp_goes_to_the_log_end_where_no_record_reaches_it():
    request = request_of("reset", "timestamp", "2026-01-01T00:00:00Z")
    assert request.timestamp_ms == parse_timestamp("1767225600000")
    assert plan(request, COMMITTED, RANGES, {("t", 0): 9, ("t", 1): None}) == {
        ("t", 0): 9,
        ("t", 1): 10,
    }


def test_plan_refuses_out_of_range_naming_partition_and_range():
    request = request_of("alter", partitions=[("t", 0, 4), ("t", 1, 10)])
    with pytest.raises(OffsetsRefused, match=r"t-0 offset 4 is outside \[5, 20\]"):
        plan(request, COMMITTED, RANGES)
    assert plan(request_of("alter", partitions=[("t", 0, 20)]), COMMITTED, RANGES) == {("t", 0): 20}
    with pytest.raises(OffsetsRefused, match="t-9"):
        plan(OffsetsRequest("reset", "earliest", None, (("t", 9, None),)), COMMITTED, RANGES)
