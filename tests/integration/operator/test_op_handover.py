"""The warm hand-over (spec.handover.mode warm) against a real kube-apiserver + etcd: the
test plays the kubelet (pod phases; a finalizer holds the running driver while it "stops
between batches") and the runners (handover.json in the report ConfigMap)."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from kubernetes.client.exceptions import ApiException

from tests.integration.operator.kube_helpers import DriverWatch, Kube, job_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STOPPING = "test.sparkkafka.dev/stopping"  # holds a deleted driver like a slow graceful stop


def _handover(kube: Kube, ns: str, job: str) -> dict:
    return kube.status(ns, job).get("handover") or {}


def _running_job(kube: Kube, ns: str, job: str, timeout_seconds: int) -> str:
    spec = job_spec(handover={"mode": "warm", "readyTimeoutSeconds": timeout_seconds})
    kube.create_job(ns, job, spec)
    old = f"{job}-e1-a1-driver"
    wait_for(lambda: kube.pod(ns, old), 30, f"driver {old}")
    kube.set_running(ns, old)
    wait_for(lambda: kube.status(ns, job).get("phase") == "Running", 20, "Running")
    return old


def test_a_warm_redeploy_writes_the_go_only_after_the_running_driver_is_gone(
    kube: Kube, ns: str, operator: object
):
    old = _running_job(kube, ns, "orders", 60)
    kube.core.patch_namespaced_pod(old, ns, {"metadata": {"finalizers": [STOPPING]}})
    kube.patch_spec(ns, "orders", {"redeployNonce": 1})

    new = "orders-e2-a1-driver"
    waiting = wait_for(lambda: kube.pod(ns, new), 30, f"waiting driver {new}")
    (container,) = waiting.spec.containers
    assert container.args[-1] == "--wait-for-go"
    assert "STREAMJOB_POD_NAME" in {e.name for e in container.env}
    assert (waiting.spec.hostname, waiting.spec.subdomain) == (new, "orders-driver")
    role = kube.rbac.read_namespaced_role("orders-driver", ns)
    names = next(r.resource_names for r in role.rules if "delete" in r.verbs)
    assert f"{old}-exec-1" in names and f"{new}-exec-1" in names  # both drivers' executors
    st = kube.status(ns, "orders")
    assert st["driverPod"] == old and st["handover"]["phase"] == "Warming"
    assert kube.pod(ns, old).metadata.deletion_timestamp is None  # not stopped before ready

    kube.set_running(ns, new)
    kube.signal_ready(ns, "orders", new, 2, 1)
    wait_for(lambda: kube.pod(ns, old).metadata.deletion_timestamp, 20, "old driver stopped")
    assert _handover(kube, ns, "orders")["phase"] == "Stopping"
    # the running driver still exists (stopping between batches): no go, reconcile after
    # reconcile (fencing polls every 0.2 s here)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert kube.go(ns, "orders") is None and "go.json" not in kube.report(ns, "orders")
        time.sleep(0.2)

    # the runner's final commit done: the pod goes (a JSON patch: a strategic merge patch
    # merges finalizer lists)
    kube.core.patch_namespaced_pod(old, ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    wait_for(lambda: kube.pod(ns, old) is None, 20, "old driver gone")
    go = json.loads(wait_for(lambda: kube.go(ns, "orders"), 20, "go"))
    assert (go["pod"], go["epoch"], go["attempt"]) == (new, 2, 1)
    assert "go.json" not in kube.report(ns, "orders")  # in the ConfigMap drivers cannot write
    # written under a manager of its own: the operator's apply of the ConfigMap keeps it
    cm = kube.core.read_namespaced_config_map("orders-go", ns)
    writers = {m.manager for m in cm.metadata.managed_fields if "f:go.json" in str(m.fields_v1)}
    assert writers == {"streamingjob-operator-signals"}

    st = wait_for(
        lambda: (s := kube.status(ns, "orders")).get("driverPod") == new and s, 20, "switched"
    )
    assert (st["epoch"], st["attempt"], st["launchState"]) == (2, 1, "Created")
    assert st["handover"]["phase"] == "Started"
    uid = kube.job(ns, "orders")["metadata"]["uid"]
    assert st["checkpointLocation"].endswith(f"/orders/{uid}/epoch-2")
    wait_for(lambda: kube.status(ns, "orders").get("phase") == "Running", 20, "Running")
    assert kube.driver_names(ns) == [new]
    kube.wait_for_events(ns, "orders", {"Redeploying", "HandoverReady", "HandedOver"})


def test_a_waiting_driver_not_ready_in_time_falls_back_to_the_cold_path(
    kube: Kube, ns: str, operator: object
):
    old = _running_job(kube, ns, "clicks", 2)
    waiting = "clicks-e1-a2-driver"
    with DriverWatch(kube, ns) as w:  # under load its 2 s may end between two polls
        kube.patch_spec(ns, "clicks", {"restartNonce": 1})
        wait_for(lambda: waiting in w.created, 30, f"waiting driver {waiting}")
    # running, never ready (under load its 2 s may be over first: deleted, the same fallback)
    with contextlib.suppress(ApiException):
        kube.set_running(ns, waiting)

    cold = "clicks-e1-a3-driver"
    wait_for(lambda: kube.driver_names(ns) == [cold], 30, f"{cold} as the only driver")
    pod = kube.pod(ns, cold)
    assert "--wait-for-go" not in pod.spec.containers[0].args
    st = kube.status(ns, "clicks")
    assert (st["epoch"], st["attempt"], st["driverPod"]) == (1, 3, cold)
    assert st["handover"]["phase"] == "FellBack" and old not in kube.driver_names(ns)
    condition = next(c for c in st["conditions"] if c["type"] == "HandoverFallback")
    assert (condition["status"], condition["reason"]) == ("True", "NotReadyInTime")
    events = kube.wait_for_events(ns, "clicks", {"WarmHandoverFailed"})
    failed = next(e for e in events if e.reason == "WarmHandoverFailed")
    assert failed.type == "Warning" and "readyTimeoutSeconds=2" in failed.message


def test_a_change_before_the_waiting_driver_is_created_replaces_the_hand_over(
    kube: Kube, ns: str, operator: object
):
    """Simulation seeds 212 and 624: a change that came while the waiting driver's create
    was still to come waited for the hand-over's end, then restarted the driver already
    built from it. Here the namespace's quota refuses the create (403) until the change."""
    old = _running_job(kube, ns, "views", 60)
    full = {"metadata": {"name": "full"}, "spec": {"hard": {"pods": "1"}}}
    kube.core.create_namespaced_resource_quota(ns, full)
    # what the quota controller (not run here) would record: admission enforces it from then on
    kube.core.patch_namespaced_resource_quota_status(
        "full", ns, {"status": {"hard": {"pods": "1"}, "used": {"pods": "1"}}}
    )
    with DriverWatch(kube, ns) as w:
        kube.patch_spec(ns, "views", {"redeployNonce": 1})
        wait_for(
            lambda: (kube.status(ns, "views").get("reconcileFailure") or {}).get("count", 0),
            30,
            "the waiting driver's create refused",
        )
        assert _handover(kube, ns, "views")["pod"] == "views-e2-a1-driver"
        kube.patch_spec(ns, "views", {"imagePullPolicy": "Always"})
        new = "views-e3-a1-driver"  # a new epoch still, under a name never handed out
        wait_for(lambda: _handover(kube, ns, "views").get("pod") == new, 30, f"{new} targeted")
        kube.core.delete_namespaced_resource_quota("full", ns)
        waiting = wait_for(lambda: kube.pod(ns, new), 30, f"waiting driver {new}")
        assert waiting.spec.containers[0].image_pull_policy == "Always"
        kube.set_running(ns, new)
        kube.signal_ready(ns, "views", new, 3, 1)
        wait_for(lambda: kube.pod(ns, old) is None, 30, "old driver gone")
        wait_for(lambda: kube.status(ns, "views").get("driverPod") == new, 20, "switched")
        # Running: a reconcile after the switch found no act to do (a restart for the change
        # the driver runs would have come first)
        wait_for(lambda: kube.status(ns, "views").get("phase") == "Running", 20, "Running")
        st = kube.status(ns, "views")
        assert (st["epoch"], st["attempt"], st["driverPod"]) == (3, 1, new)
        assert "views-e2-a1-driver" not in w.created  # the replaced target was never created
