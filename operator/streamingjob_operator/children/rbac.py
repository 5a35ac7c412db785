"""The job's own access: the service account, the driver's Role (its executors only, and during a
hand-over also the waiting driver's) and its binding.
"""

from __future__ import annotations

from typing import Any

from streamingjob_operator.api.models import StreamingJobSpec
from streamingjob_operator.api.naming import (
    driver_account_name,
    executor_pod_names,
    go_configmap_name,
    report_configmap_name,
)
from streamingjob_operator.children.builders import (
    child_metadata,
)


def build_service_account(job: dict[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": child_metadata(job, driver_account_name(name)),
    }


def executor_name_budget(instances: int) -> int:
    """How many executor ids of one driver its Role names: the first set plus Spark's default
    `spark.executor.maxNumFailures` (max(3, 2 * instances); the application fails past it)
    and some slack. A driver that replaces executors beyond it cannot delete the later failed
    ones; they stay Terminated until the operator deletes the driver (owner-reference GC)."""
    return instances + max(3, 2 * instances) + 8


def build_role(
    job: dict[str, Any], driver_pod: str, instances: int, *, handing_over_to: str = ""
) -> dict[str, Any]:
    """The least the driver needs (docs/operator/security.md): create its executor pods, list
    and watch pods (Spark follows its executors by label), read by name only its own pod and
    the executor pods it will name, delete and patch only those executors, read and patch its
    own report ConfigMap (report.json, handover.json: merge patches) and only read its go
    ConfigMap (the go fences it: a driver that could write it could start itself beside the
    running one). No Secrets, Services, PVCs or other ConfigMaps; no `update`, no
    `deletecollection` (it would reach every pod of the namespace).

    What RBAC cannot narrow, the residual: pod `create` (no name to check before a pod
    exists: a driver could create pods, not touch existing ones) and `list`/`watch` (RBAC
    has no label selector: a driver sees the namespace's pods). During a warm hand-over or
    beside a standby both drivers run: the Role names both drivers' pods."""
    name = job["metadata"]["name"]
    drivers = [driver for driver in (driver_pod, handing_over_to) if driver]
    executors = [
        pod
        for driver in drivers
        for pod in executor_pod_names(driver, executor_name_budget(instances))
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": child_metadata(job, driver_account_name(name)),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "list", "watch"]},
            _named("pods", [*drivers, *executors], "get"),
            _named("pods", executors, "delete", "patch"),
            _named("configmaps", [report_configmap_name(name)], "get", "patch"),
            _named("configmaps", [go_configmap_name(name)], "get"),
        ],
    }


def _named(resource: str, names: list[str], *verbs: str) -> dict[str, Any]:
    return {"apiGroups": [""], "resources": [resource], "resourceNames": names, "verbs": [*verbs]}


def build_role_binding(job: dict[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    account = driver_account_name(name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": child_metadata(job, account),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [
            {"kind": "ServiceAccount", "name": account, "namespace": job["metadata"]["namespace"]}
        ],
    }


def account_name(job: dict[str, Any], spec: StreamingJobSpec) -> str:
    return spec.service_account_name or driver_account_name(job["metadata"]["name"])
