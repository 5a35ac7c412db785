"""What a launch and a relaunch cost in API calls, on a real API server: no wasted round trip
(no 404 / 409 answered), each step's reads not repeated, and the order the guarantees need:
the status written before anything is created, the pods listed right before the create."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from streamingjob_operator.api.naming import job_configmap_name, service_name
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.settings import OperatorSettings
from tests.integration.operator.kube_helpers import Kube, job_spec, operator_env

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class CountingApi(KubeApi):
    """The real API facade, recording every call: (client method, outcome)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def _call(self, what: str, fn, *args: Any, **kwargs: Any) -> Any:
        try:
            result = super()._call(what, fn, *args, **kwargs)
        except Exception as exc:
            self.calls.append((fn.__name__, type(exc).__name__))
            raise
        self.calls.append((fn.__name__, "ok"))
        return result

    def take(self) -> list[str]:
        failed = [c for c in self.calls if c[1] != "ok"]
        assert not failed, f"calls answered with an error: {failed}"
        names = [name for name, _ in self.calls]
        self.calls = []
        return names


CHILD_APPLIES = {  # server-side apply: one call each, created or not
    "patch_namespaced_service": 1,
    "patch_namespaced_config_map": 2,  # report, job manifest
    "patch_namespaced_service_account": 1,
    "patch_namespaced_role": 1,
    "patch_namespaced_role_binding": 1,
    "patch_namespaced_pod_disruption_budget": 1,
}


def test_first_launch_and_relaunch_calls(kube: Kube, apiserver, ns: str):
    spec = job_spec()
    spec["restartPolicy"]["backoff"] = {"baseSeconds": 0, "capSeconds": 0}
    kube.create_job(ns, "calls", spec)
    with operator_env(apiserver.kubeconfig):
        api = CountingApi()
        reconciler = Reconciler(api, OperatorSettings.from_env())

        reconciler.reconcile(ns, "calls")
        assert kube.driver_names(ns) == ["calls-e1-a1-driver"]
        assert kube.status(ns, "calls")["launchState"] == "Created"
        calls = api.take()
        assert Counter(calls) == {
            # the job: once, later steps use our PUT's answer; and once after the create (a
            # job deleted while launching gets its pod removed: test_op_crash.py)
            "get_namespaced_custom_object": 2,
            "list_namespaced_pod": 1,  # fencing (a job never launched has no pod to observe)
            "replace_namespaced_custom_object_status": 2,  # Launching (write-ahead), Created
            **CHILD_APPLIES,
            "dry_run_create_namespaced_pod": 2,  # driver and executor, once per generation
            "create_namespaced_pod": 1,
            "create_namespaced_event": 2,  # Launching, Launched: after the steps
        }
        _check_order(calls)

        # the driver fails: one reconcile records it, deletes it and relaunches
        kube.set_terminated(ns, "calls-e1-a1-driver", 1)
        reconciler.reconcile(ns, "calls")
        assert kube.driver_names(ns) == ["calls-e1-a2-driver"]
        assert kube.status(ns, "calls")["launchState"] == "Created"
        calls = api.take()
        counts = Counter(calls)
        assert counts == {
            "replace_namespaced_custom_object_status": 2,  # failure + new target, Created
            "get_namespaced_custom_object": 2,  # the job, and again after the create
            "list_namespaced_pod": 2,  # observe, fencing: the delete completed at once (200)
            "read_namespaced_config_map": 1,  # the runner's report
            "delete_namespaced_pod": 1,
            **CHILD_APPLIES,  # again: no write where nothing changed (the Role names the driver)
            "create_namespaced_pod": 1,
            "create_namespaced_event": 3,  # DriverFailed, BackOff, Launched
        }
        _check_order(calls)

        # nothing changed: one look, no write
        reconciler.reconcile(ns, "calls")
        assert Counter(api.take()) == {
            "get_namespaced_custom_object": 1,
            "list_namespaced_pod": 1,
            "read_namespaced_config_map": 1,
        }


def _check_order(calls: list[str]) -> None:
    create = calls.index("create_namespaced_pod")
    assert calls[create - 1] == "list_namespaced_pod"  # fencing: a direct list right before
    writes = ("create_", "delete_", "patch_")
    first_write = next(i for i, c in enumerate(calls) if c.startswith(writes))
    # write-ahead: the decision is in status before anything is created or deleted
    assert "replace_namespaced_custom_object_status" in calls[:first_write]
    # events are posted when the reconcile is done
    assert all(
        c == "create_namespaced_event" for c in calls[calls.index("create_namespaced_event") :]
    )


def test_relaunch_keeps_other_managers_fields_and_restores_ours(kube: Kube, apiserver, ns: str):
    """Server-side apply: a field another controller added to a child (an annotation on the
    Service) survives the next launch; a field of ours someone changed (the job ConfigMap's
    manifest) is ours again."""
    spec = job_spec()
    spec["restartPolicy"]["backoff"] = {"baseSeconds": 0, "capSeconds": 0}
    kube.create_job(ns, "owned", spec)
    with operator_env(apiserver.kubeconfig):
        reconciler = Reconciler(KubeApi(), OperatorSettings.from_env())
        reconciler.reconcile(ns, "owned")
        core, service, manifest = kube.core, service_name("owned"), job_configmap_name("owned")
        ours = core.read_namespaced_config_map(manifest, ns).data
        mesh = {"metadata": {"annotations": {"mesh.example/inject": "true"}}}
        core.patch_namespaced_service(service, ns, mesh, field_manager="mesh")
        tampered = {"data": dict.fromkeys(ours, "tampered")}
        core.patch_namespaced_config_map(manifest, ns, tampered, field_manager="someone")

        kube.set_terminated(ns, "owned-e1-a1-driver", 1)
        reconciler.reconcile(ns, "owned")
        assert kube.driver_names(ns) == ["owned-e1-a2-driver"]
        annotations = core.read_namespaced_service(service, ns).metadata.annotations
        assert annotations == {"mesh.example/inject": "true"}
        assert core.read_namespaced_config_map(manifest, ns).data == ours
