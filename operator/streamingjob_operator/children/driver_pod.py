"""The driver pod and what it mounts: its job ConfigMap (the runner's manifest and the executor pod
template), the Spark settings and the runner's arguments.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from spark_app.api.manifest import CheckpointSpec
from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND, StreamingJobSpec
from streamingjob_operator.api.naming import (
    LABEL_ATTEMPT,
    LABEL_DRIVER,
    LABEL_EPOCH,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    driver_address,
    driver_host_name,
    go_configmap_name,
    job_configmap_name,
    label_value,
    report_configmap_name,
    service_name,
)
from streamingjob_operator.children.builders import (
    BLOCK_MANAGER_PORT,
    CONFIG_DIR,
    DRIVER_PORT,
    EXECUTOR_TEMPLATE_PATH,
    MANIFEST_PATH,
    MASTER,
    STANDBY_EXECUTOR_TEMPLATE_PATH,
    UI_PORT,
    base_labels,
    child_metadata,
)
from streamingjob_operator.children.pod_parts import (
    apart_from_other_drivers,
    avoiding,
    container_security,
    credential_env,
    merge,
    pod_mounts,
    pod_resources,
    pod_security,
    pod_volumes,
    spec_tolerations,
)
from streamingjob_operator.children.rbac import account_name
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.timing import DRIVER_STOP


def build_executor_template(
    spec: StreamingJobSpec, name: str, avoid_nodes: list[str] | None = None
) -> dict[str, Any]:
    """The executor pod template Spark merges its executor pods from."""
    ours = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": base_labels(name)},
        "spec": {
            # Executors never call the API server: no token, whatever the account grants.
            "automountServiceAccountToken": False,
            "securityContext": pod_security(),
            "tolerations": spec_tolerations(spec),
            "nodeSelector": dict(spec.node_selector),
            "volumes": [*pod_volumes(spec), *copy.deepcopy(spec.volumes)],
            "containers": [
                {
                    "name": "executor",
                    "env": [*credential_env(spec), *copy.deepcopy(spec.env)],
                    "volumeMounts": [*pod_mounts(spec), *copy.deepcopy(spec.volume_mounts)],
                    "securityContext": container_security(),
                }
            ],
        },
    }
    template = {
        "metadata": spec.pod_template.metadata,
        "spec": spec.pod_template.spec,
    }
    # a standby's executors stay off the running driver's node too (and its off theirs)
    return apart_from_other_drivers(avoiding(merge(template, ours), avoid_nodes or []), name)


def runner_manifest(job: dict[str, Any]) -> dict[str, Any]:
    """The StreamingJob as the runner reads it: metadata trimmed, status dropped, and
    spec.checkpoint limited to the runner's fields (the policy fields are the operator's)."""
    spec = copy.deepcopy(job.get("spec") or {})
    runner_keys = {f.alias or n for n, f in CheckpointSpec.model_fields.items()}
    spec["checkpoint"] = {
        k: v for k, v in (spec.get("checkpoint") or {}).items() if k in runner_keys
    }
    meta = job["metadata"]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": spec,
    }


def build_job_configmap(
    job: dict[str, Any], spec: StreamingJobSpec, avoid_nodes: list[str] | None = None
) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(job, job_configmap_name(name)),
        "data": {
            "job.yaml": yaml.safe_dump(runner_manifest(job), sort_keys=False),
            "executor-template.yaml": yaml.safe_dump(
                build_executor_template(spec, name, avoid_nodes), sort_keys=False
            ),
            "standby-executor-template.yaml": yaml.safe_dump(
                build_executor_template(spec, name), sort_keys=False
            ),
        },
    }


def spark_confs(
    job: dict[str, Any], spec: StreamingJobSpec, driver_pod: str, epoch: int, attempt: int
) -> dict[str, str]:
    name = job["metadata"]["name"]
    namespace = job["metadata"]["namespace"]
    ex = spec.executor
    confs = dict(spec.spark_conf)  # user first; ours below always win
    confs.update(
        {
            "spark.kubernetes.namespace": namespace,
            "spark.kubernetes.container.image": spec.image,
            "spark.kubernetes.container.image.pullPolicy": spec.image_pull_policy,
            "spark.kubernetes.driver.pod.name": driver_pod,
            # the driver's own address (its hostname in the headless Service): executors
            # reach their driver, also while a warm hand-over runs two
            "spark.driver.host": driver_address(name, driver_pod, namespace),
            "spark.driver.port": str(DRIVER_PORT),
            "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
            "spark.driver.bindAddress": "0.0.0.0",
            # Spark 4.1 makes executors dial the bind address (0.0.0.0 here) unless this is
            # off; they must reach the driver through its address above.
            "spark.kubernetes.executor.useDriverPodIP": "false",
            "spark.driver.memory": spec.driver.memory,
            "spark.executor.instances": str(ex.instances),
            "spark.executor.cores": str(ex.cores),
            "spark.executor.memory": ex.memory,
            "spark.executor.memoryOverhead": ex.memory_overhead,
            "spark.dynamicAllocation.enabled": "false",
            "spark.ui.enabled": "true" if spec.spark_ui.enabled else "false",
            "spark.kubernetes.executor.podNamePrefix": driver_pod,
            "spark.kubernetes.authenticate.executor.serviceAccountName": account_name(job, spec),
            "spark.kubernetes.executor.podTemplateFile": EXECUTOR_TEMPLATE_PATH,
            "spark.kubernetes.executor.podTemplateContainerName": "executor",
            "spark.kubernetes.executor.deleteOnTermination": "true",
            # Least privilege (build_role): no executor ConfigMap (its name is generated, the
            # driver could not be limited to it), no PVCs, no Service clean-up by label.
            "spark.kubernetes.executor.disableConfigMap": "true",
            "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
            "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
            "spark.kubernetes.driver.service.deleteOnTermination": "false",
            f"spark.kubernetes.executor.label.{LABEL_JOB}": label_value(name),
            f"spark.kubernetes.executor.label.{LABEL_EPOCH}": str(epoch),
            f"spark.kubernetes.executor.label.{LABEL_ATTEMPT}": str(attempt),
            f"spark.kubernetes.executor.label.{LABEL_DRIVER}": driver_pod,
            f"spark.kubernetes.executor.label.{LABEL_MANAGED_BY}": MANAGED_BY,
        }
    )
    if ex.cpu_limit:
        confs["spark.kubernetes.executor.limit.cores"] = ex.cpu_limit
    if ex.cpu_request:
        confs["spark.kubernetes.executor.request.cores"] = ex.cpu_request
    return confs


def driver_args(job: dict[str, Any], spec: StreamingJobSpec, launch: Launch) -> list[str]:
    name = job["metadata"]["name"]
    args = ["--master", MASTER, "--deploy-mode", "client", "--name", name]
    confs = spark_confs(job, spec, launch.driver_pod, launch.epoch, launch.attempt)
    if launch.away_from_drivers:
        confs["spark.kubernetes.executor.podTemplateFile"] = STANDBY_EXECUTOR_TEMPLATE_PATH
    for key, value in sorted(confs.items()):
        args += ["--conf", f"{key}={value}"]
    args += [
        launch.entrypoint,
        "--manifest",
        MANIFEST_PATH,
        "--epoch",
        str(launch.epoch),
        "--attempt",
        str(launch.attempt),
        "--checkpoint-location",
        launch.checkpoint_location,
        "--report-configmap",
        report_configmap_name(name),
    ]  # the runner's stop timings are its defaults: timing.DRIVER_STOP (a unit test checks)
    for previous in launch.previous_checkpoints:  # none when an offsets action set the group
        args += ["--previous-checkpoint", previous]
    if launch.wait_for_go:  # a warm hand-over's next driver (handover.py): its go, apart
        args += ["--go-configmap", go_configmap_name(name), "--wait-for-go"]
    return args


def build_driver_pod(job: dict[str, Any], spec: StreamingJobSpec, launch: Launch) -> dict[str, Any]:
    """The driver pod of `launch`: the operator's fields over the user's podTemplate, kept off
    the nodes the launch avoids."""
    labels = {
        LABEL_ROLE: "driver",
        LABEL_EPOCH: str(launch.epoch),
        LABEL_ATTEMPT: str(launch.attempt),
        LABEL_DRIVER: launch.driver_pod,
    }
    ours = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **child_metadata(job, launch.driver_pod, labels),
            "annotations": {f"{API_GROUP}/checkpoint-location": launch.checkpoint_location},
        },
        "spec": {
            "restartPolicy": "Never",
            # its own DNS name in the headless Service (spark.driver.host)
            "hostname": driver_host_name(launch.driver_pod),
            "subdomain": service_name(job["metadata"]["name"]),
            "serviceAccountName": account_name(job, spec),
            "automountServiceAccountToken": True,
            # the runner's graceful stop and final commit fit inside (timing.DriverStop)
            "terminationGracePeriodSeconds": DRIVER_STOP.termination_grace_seconds,
            "securityContext": pod_security(),
            "tolerations": spec_tolerations(spec),
            "nodeSelector": dict(spec.node_selector),
            "volumes": [
                {
                    "name": "streamingjob-config",
                    "configMap": {"name": job_configmap_name(job["metadata"]["name"])},
                },
                *pod_volumes(spec),
                *copy.deepcopy(spec.volumes),
            ],
            "containers": [_driver_container(job, spec, launch)],
        },
    }
    template = {"metadata": spec.pod_template.metadata, "spec": spec.pod_template.spec}
    pod = avoiding(merge(template, ours), list(launch.avoid_nodes))
    if launch.away_from_drivers:
        apart_from_other_drivers(pod, job["metadata"]["name"])
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    return pod


def _driver_container(
    job: dict[str, Any], spec: StreamingJobSpec, launch: Launch
) -> dict[str, Any]:
    return {
        "name": "driver",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        # the image's entrypoint (tini → entrypoint.sh submit) runs spark-submit and hands
        # the pod's SIGTERM to the job's runner: a clean stop
        "args": ["submit", launch.spark_submit, *driver_args(job, spec, launch)],
        "ports": [
            {"name": "driver", "containerPort": DRIVER_PORT},
            {"name": "block-manager", "containerPort": BLOCK_MANAGER_PORT},
            {"name": "ui", "containerPort": UI_PORT},
        ],
        "env": _driver_env(job, spec, launch),
        "resources": pod_resources(
            spec.driver.cores,
            spec.driver.memory,
            spec.driver.memory_overhead,
            spec.driver.cpu_limit,
            spec.driver.cpu_request,
        ),
        "volumeMounts": [
            {"name": "streamingjob-config", "mountPath": CONFIG_DIR, "readOnly": True},
            *pod_mounts(spec),
            *copy.deepcopy(spec.volume_mounts),
        ],
        "securityContext": container_security(),
    }


def _driver_env(
    job: dict[str, Any], spec: StreamingJobSpec, launch: Launch
) -> list[dict[str, Any]]:
    return [
        {"name": "STREAMINGJOB_NAMESPACE", "value": job["metadata"]["namespace"]},
        {"name": "STREAMINGJOB_NAME", "value": job["metadata"]["name"]},
        {"name": "STREAMINGJOB_EPOCH", "value": str(launch.epoch)},
        {"name": "STREAMINGJOB_ATTEMPT", "value": str(launch.attempt)},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        *_waiting_env(launch),
        {"name": "SPARK_USER", "value": "spark"},
        *credential_env(spec),
        *copy.deepcopy(spec.env),
    ]


def _waiting_env(launch: Launch) -> list[dict[str, Any]]:
    """A waiting driver names itself in handover.json and looks for its name in go.json."""
    if not launch.wait_for_go:
        return []
    return [
        {"name": "STREAMJOB_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]
