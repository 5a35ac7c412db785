"""Pure builders of a job's children: plain dicts, no API calls, golden-tested. Here: the
metadata every child shares (owner reference, labels), the Services, the disruption budget
and the small ConfigMaps (the runner's report, the go of a hand-over, an offsets listing);
the driver pod and its job ConfigMap are driver_pod.py, the access rbac.py, the cleanup Job
cleanup.py.

The driver pod runs the project's runner through `spark-submit` in client mode against the
in-cluster API server; executors are pods the driver creates (owned by the driver pod, labelled
with the job, epoch, attempt and driver name). Credentials reach containers only through
`secretKeyRef`; they never appear in ConfigMaps, Spark confs or status.
"""

from __future__ import annotations

from typing import Any

from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND
from streamingjob_operator.api.naming import (
    LABEL_DRIVER,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    disruption_budget_name,
    go_configmap_name,
    job_selector,
    label_value,
    offsets_configmap_name,
    report_configmap_name,
    service_name,
    ui_service_name,
)

CONFIG_DIR = "/etc/streamingjob"
MANIFEST_PATH = f"{CONFIG_DIR}/job.yaml"
EXECUTOR_TEMPLATE_PATH = f"{CONFIG_DIR}/executor-template.yaml"
# A standby's executors: without the nodes the running attempt avoids (it was placed apart
# from that attempt, which may run on the node left after a loss)
STANDBY_EXECUTOR_TEMPLATE_PATH = f"{CONFIG_DIR}/standby-executor-template.yaml"
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
UI_PORT = 4040
IMAGE_HADOOP_CONF = "/opt/streamingjob/hadoop-conf"  # an empty core-site.xml (FsShell wants one)
MASTER = "k8s://https://kubernetes.default.svc:443"


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def base_labels(name: str) -> dict[str, str]:
    return {LABEL_JOB: label_value(name), LABEL_MANAGED_BY: MANAGED_BY}


def child_metadata(
    job: dict[str, Any], name: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    job_name = job["metadata"]["name"]
    return {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "labels": {**base_labels(job_name), **(labels or {})},
        "ownerReferences": [owner_reference(job)],
    }


def build_report_configmap(job: dict[str, Any]) -> dict[str, Any]:
    """The runner's report, without data: its keys are the runner's (a merge patch), never
    in the operator's applied fields."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, report_configmap_name(name)),
    }


def build_go_configmap(job: dict[str, Any]) -> dict[str, Any]:
    """Where the operator writes the go of a warm hand-over (go.json, a merge patch of its
    own field manager: never in the applied fields). Apart from the report ConfigMap, which
    the drivers write: the go fences the running driver, so no driver may write it."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, go_configmap_name(name)),
    }


def build_offsets_configmap(job: dict[str, Any], data: dict[str, str]) -> dict[str, Any]:
    """The full result of the last offsets action (spec.offsetsAction), owned by the job."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, offsets_configmap_name(name)),
        "data": data,
    }


def build_disruption_budget(job: dict[str, Any], driver_pod: str, executors: int) -> dict[str, Any]:
    """No voluntary eviction of the running driver's executors (kubectl drain, the cluster
    autoscaler): they go with their driver, which may need them to finish the batch in
    flight. A drain therefore waits until the operator has moved the job off the cordoned node
    (the driver stops between batches and removes its executors; restarts.move_off). The
    driver itself is not covered: its eviction is a graceful stop between batches.

    Only `driver_pod`'s executors are selected: beside a standby or during a warm hand-over a
    second driver has executors too, and a budget over both would let a drain evict as many
    as that driver has, the running driver's included. The waiting driver's run no task until
    its go; before the go the budget moves to it (reconcile._go).

    Executors are pods of a pod, not of a controller with a scale: Kubernetes then honours
    only an integer minAvailable (maxUnavailable cannot be computed and evictions pass),
    here every executor the driver runs (`executors`). An executor that is not Ready may go
    (it holds up no batch)."""
    name = job["metadata"]["name"]
    selector = {**job_selector(name), LABEL_ROLE: "executor", LABEL_DRIVER: driver_pod}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(job, disruption_budget_name(name)),
        "spec": {
            "minAvailable": executors,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_service(job: dict[str, Any]) -> dict[str, Any]:
    """Headless Service: each driver pod's subdomain, so executors reach their own driver
    at <pod>.<service>.<namespace>.svc (spark.driver.host), one or two drivers alike."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(job, service_name(name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: label_value(name), LABEL_ROLE: "driver"},
            "ports": [
                {"name": "driver", "port": DRIVER_PORT, "targetPort": DRIVER_PORT},
                {
                    "name": "block-manager",
                    "port": BLOCK_MANAGER_PORT,
                    "targetPort": BLOCK_MANAGER_PORT,
                },
                {"name": "ui", "port": UI_PORT, "targetPort": UI_PORT},
            ],
        },
    }


def build_ui_service(job: dict[str, Any]) -> dict[str, Any]:
    """The current driver's Spark UI (spec.sparkUI.enabled), for `kubectl port-forward
    svc/<job>-ui 4040`. One driver runs at a time (fencing), so job + role select it."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(job, ui_service_name(name)),
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_JOB: label_value(name), LABEL_ROLE: "driver"},
            "ports": [{"name": "http", "port": UI_PORT, "targetPort": UI_PORT}],
        },
    }
