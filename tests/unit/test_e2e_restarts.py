"""The e2e tier's check for containers that restarted without the test causing it (pure part)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import restart_counts, unexpected_restarts

pytestmark = pytest.mark.unit


def pod(namespace, name, restarts=0, state=None, labels=None, deleting=False, last=None):
    meta = {"namespace": namespace, "name": name, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cs = {"name": "main", "restartCount": restarts, "state": state or {"running": {}}}
    if last:
        cs["lastState"] = {"terminated": last}
    return {"metadata": meta, "status": {"containerStatuses": [cs]}}


DRIVER = {"spark-role": "driver"}


def test_a_restarted_operator_or_broker_is_reported_with_its_last_exit():
    before = restart_counts([pod("streamingjob-system", "op"), pod("kafka", "kafka-0")])
    after = [
        pod("streamingjob-system", "op", 1, last={"exitCode": 139, "reason": "Error"}),
        pod("kafka", "kafka-0"),
        pod("kube-system", "coredns", 3),  # not watched
    ]
    (problem,) = unexpected_restarts(before, after, set())
    assert "operator streamingjob-system/op" in problem and "exit 139" in problem


def test_only_restarts_during_the_test_count():
    before = restart_counts([pod("kafka", "kafka-0", 2)])
    assert unexpected_restarts(before, [pod("kafka", "kafka-0", 2)], set()) == []
    assert unexpected_restarts(before, [pod("kafka", "kafka-0", 3)], set())


def test_failed_drivers_count_unless_the_test_killed_them_or_they_are_being_deleted():
    failed = {"terminated": {"exitCode": 137, "reason": "Error"}}
    stopped = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    pods = [pod("e2e-1", "j-e1-a1-driver", state=failed, labels=DRIVER)]
    assert unexpected_restarts({}, pods, set())
    assert unexpected_restarts({}, pods, {"e2e-1/j-e1-a1-driver"}) == []
    assert unexpected_restarts({}, pods, {"j-e1-a1-driver"}) == []
    deleting = [pod("e2e-1", "j-e1-a1-driver", state=failed, labels=DRIVER, deleting=True)]
    assert unexpected_restarts({}, deleting, set()) == []
    graceful = [pod("e2e-1", "j-e1-a2-driver", state=stopped, labels=DRIVER)]
    assert unexpected_restarts({}, graceful, set()) == []
    oom = {"terminated": {"exitCode": 0, "reason": "OOMKilled"}}
    executor = [pod("e2e-1", "x-exec-1", state=oom, labels={"spark-role": "executor"})]
    assert unexpected_restarts({}, executor, set())


def test_an_operator_or_broker_that_ended_at_all_is_reported():
    done = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert unexpected_restarts({}, [pod("kafka", "kafka-0", state=done)], set())
