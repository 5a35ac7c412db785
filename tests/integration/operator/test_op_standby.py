"""spec.standby against a real kube-apiserver + etcd: the test plays the kubelet (pod phases;
a finalizer holds a crashed driver as a slow kubelet would) and the runners (handover.json in
the report ConfigMap). The standby waits for its go; the go is written only once every pod of
the lost driver is gone."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HELD = "test.sparkkafka.dev/held"  # keeps a crashed driver's pod while the kubelet cleans up


def _standby(kube: Kube, ns: str, job: str) -> dict:
    return kube.status(ns, job).get("standby") or {}


def _ready_standby(kube: Kube, ns: str, job: str, attempt: int) -> str:
    """The standby of epoch 1's `attempt`, created, running and reported ready."""
    spare = f"{job}-e1-a{attempt}-driver"
    wait_for(lambda: kube.pod(ns, spare), 30, f"standby {spare}")
    kube.set_running(ns, spare)
    kube.signal_ready(ns, job, spare, 1, attempt)
    wait_for(lambda: _standby(kube, ns, job).get("state") == "Ready", 20, "standby Ready")
    conditions = {c["type"]: c for c in kube.status(ns, job)["conditions"]}
    assert conditions["StandbyReady"]["status"] == "True", conditions
    return spare


def _running_with_standby(kube: Kube, ns: str, job: str) -> str:
    """A job with spec.standby on, its first driver running; that driver's name."""
    spec = job_spec(standby={"enabled": True}, handover={"readyTimeoutSeconds": 60})
    kube.create_job(ns, job, spec)
    driver = f"{job}-e1-a1-driver"
    wait_for(lambda: kube.pod(ns, driver), 30, f"driver {driver}")
    kube.set_running(ns, driver)
    return driver


def test_a_crashed_driver_hands_over_to_the_ready_standby_only_once_it_is_gone(
    kube: Kube, ns: str, operator: object
):
    old = _running_with_standby(kube, ns, "orders")

    spare = "orders-e1-a2-driver"
    pod = wait_for(lambda: kube.pod(ns, spare), 30, f"standby {spare}")
    assert pod.spec.containers[0].args[-1] == "--wait-for-go"
    (apart,) = (
        pod.spec.affinity.pod_anti_affinity.preferred_during_scheduling_ignored_during_execution
    )
    # kept off the nodes of another driver's pods (the API server merged the key's value in)
    assert apart.pod_affinity_term.mismatch_label_keys == ["sparkkafka.dev/driver-pod"]
    (other,) = apart.pod_affinity_term.label_selector.match_expressions
    assert (other.key, other.operator, other.values) == (
        "sparkkafka.dev/driver-pod",
        "NotIn",
        [spare],
    )
    assert _standby(kube, ns, "orders")["state"] == "Warming"
    role = kube.rbac.read_namespaced_role("orders-driver", ns)
    names = next(r.resource_names for r in role.rules if "delete" in r.verbs)
    assert f"{old}-exec-1" in names and f"{spare}-exec-1" in names
    _ready_standby(kube, ns, "orders", 2)
    assert kube.status(ns, "orders")["phase"] == "Running"  # the running driver untouched

    kube.core.patch_namespaced_pod(old, ns, {"metadata": {"finalizers": [HELD]}})
    kube.set_terminated(ns, old, 137)  # killed
    wait_for(lambda: kube.pod(ns, old).metadata.deletion_timestamp, 20, "crashed driver deleted")
    st = kube.status(ns, "orders")
    assert (st["handover"]["pod"], st["handover"]["phase"]) == (spare, "Stopping")
    assert (st["restarts"], st["lastRestartReason"]) == (1, "DriverFailed")
    deadline = time.monotonic() + 2  # its pod still exists: no go, reconcile after reconcile
    while time.monotonic() < deadline:
        assert kube.go(ns, "orders") is None
        time.sleep(0.2)

    kube.core.patch_namespaced_pod(old, ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    go = json.loads(wait_for(lambda: kube.go(ns, "orders"), 20, "go"))
    assert (go["pod"], go["epoch"], go["attempt"]) == (spare, 1, 2)
    st = wait_for(
        lambda: (s := kube.status(ns, "orders")).get("driverPod") == spare and s, 20, "switched"
    )
    assert (st["epoch"], st["attempt"]) == (1, 2)
    uid = kube.job(ns, "orders")["metadata"]["uid"]
    assert st["checkpointLocation"].endswith(f"/orders/{uid}/epoch-1")  # restored, same epoch
    # a new standby behind it, under a name never used
    _ready_standby(kube, ns, "orders", 3)
    assert kube.driver_names(ns) == [spare, "orders-e1-a3-driver"]
    events = kube.wait_for_events(ns, "orders", {"StandbyReady", "StandbyTakeover", "HandedOver"})
    # the failure told once, though the hand-over followed the failed driver for several steps
    failed = [e for e in events if e.reason == "DriverFailed" and old in (e.message or "")]
    assert len(failed) == 1 and (failed[0].count or 1) == 1, failed
    kept = [w for w in kube.status(ns, "orders")["warnings"] if w["reason"] == "DriverFailed"]
    assert len(kept) == 1, kept


def test_a_failed_standby_is_replaced_and_switching_it_off_removes_it(
    kube: Kube, ns: str, operator: object
):
    driver = _running_with_standby(kube, ns, "clicks")
    failed = "clicks-e1-a2-driver"
    wait_for(lambda: kube.pod(ns, failed), 30, f"standby {failed}")
    kube.set_terminated(ns, failed, 1, message="OutOfMemory")

    events = kube.wait_for_events(ns, "clicks", {"StandbyFailed"})
    warning = next(e for e in events if e.reason == "StandbyFailed")
    assert warning.type == "Warning" and failed in warning.message
    wait_for(lambda: kube.pod(ns, failed) is None, 20, "failed standby deleted")
    _ready_standby(kube, ns, "clicks", 3)  # after the backoff (1 s here)
    st = kube.status(ns, "clicks")
    assert (st["driverPod"], st["restarts"], st["phase"]) == (driver, 0, "Running")

    kube.patch_spec(ns, "clicks", {"standby": {"enabled": False}})
    wait_for(lambda: kube.driver_names(ns) == [driver], 20, "standby removed")
    assert _standby(kube, ns, "clicks")["state"] == "Removed"
    assert kube.status(ns, "clicks")["restarts"] == 0  # the running driver never stopped
