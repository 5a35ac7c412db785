"""Pure builders of a job's children: plain dicts, no API calls, golden-tested.

The driver pod runs the project's runner through `spark-submit` in client mode against the
in-cluster API server; executors are pods the driver creates (owned by the driver pod, labelled
with the job, epoch, attempt and driver name). Credentials reach containers only through
`secretKeyRef`; they never appear in ConfigMaps, Spark confs or status.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from spark_app.manifest import CheckpointSpec, job_checkpoints
from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND, StreamingJobSpec
from streamingjob_operator.api.naming import (
    LABEL_ATTEMPT,
    LABEL_DRIVER,
    LABEL_EPOCH,
    LABEL_JOB,
    LABEL_MANAGED_BY,
    LABEL_ROLE,
    MANAGED_BY,
    disruption_budget_name,
    driver_account_name,
    driver_address,
    driver_host_name,
    executor_pod_names,
    go_configmap_name,
    job_configmap_name,
    job_selector,
    label_value,
    offsets_configmap_name,
    report_configmap_name,
    service_name,
    ui_service_name,
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
    s3_env,
    scratch_mounts,
    scratch_volumes,
    spec_tolerations,
)
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.timing import DRIVER_STOP

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


def _meta(job: dict[str, Any], name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    job_name = job["metadata"]["name"]
    return {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "labels": {**base_labels(job_name), **(labels or {})},
        "ownerReferences": [owner_reference(job)],
    }


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
        "metadata": _meta(job, job_configmap_name(name)),
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


def build_report_configmap(job: dict[str, Any]) -> dict[str, Any]:
    """The runner's report, without data: its keys are the runner's (a merge patch), never
    in the operator's applied fields."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(job, report_configmap_name(name)),
    }


def build_go_configmap(job: dict[str, Any]) -> dict[str, Any]:
    """Where the operator writes the go of a warm hand-over (go.json, a merge patch of its
    own field manager: never in the applied fields). Apart from the report ConfigMap, which
    the drivers write: the go fences the running driver, so no driver may write it."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(job, go_configmap_name(name)),
    }


def build_offsets_configmap(job: dict[str, Any], data: dict[str, str]) -> dict[str, Any]:
    """The full result of the last offsets action (spec.offsetsAction), owned by the job."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(job, offsets_configmap_name(name)),
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
        "metadata": _meta(job, disruption_budget_name(name)),
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
        "metadata": _meta(job, service_name(name)),
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
        "metadata": _meta(job, ui_service_name(name)),
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_JOB: label_value(name), LABEL_ROLE: "driver"},
            "ports": [{"name": "http", "port": UI_PORT, "targetPort": UI_PORT}],
        },
    }


def build_service_account(job: dict[str, Any]) -> dict[str, Any]:
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(job, driver_account_name(name)),
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
        "metadata": _meta(job, driver_account_name(name)),
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
        "metadata": _meta(job, account),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [
            {"kind": "ServiceAccount", "name": account, "namespace": job["metadata"]["namespace"]}
        ],
    }


def account_name(job: dict[str, Any], spec: StreamingJobSpec) -> str:
    return spec.service_account_name or driver_account_name(job["metadata"]["name"])


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
            **_meta(job, launch.driver_pod, labels),
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


def checkpoint_cleanup_paths(
    spec: StreamingJobSpec, namespace: str, name: str, uid: str, recorded: list[str]
) -> list[str] | None:
    """What a cleanup Job deletes: this job's own directory (`manifest.job_checkpoints`:
    <location>/<namespace>/<name>/<uid>), never another job's of the same name, and the
    `recorded` locations outside it (epochs an earlier operator laid out without the uid).
    For an s3a:// location, or a file:// one on one of the job's volumeMounts; None when the
    operator cannot reach the data (a node-local path, another scheme)."""
    location = spec.checkpoint.location
    own = job_checkpoints(location, namespace, name, uid)
    paths = [own, *sorted({p for p in recorded if p and not p.startswith(own + "/")})]
    if location.startswith("s3a://"):
        return paths
    local = [_mounted(spec, path) for path in paths]
    return [p for p in local if p is not None] if local[0] is not None else None


def _mounted(spec: StreamingJobSpec, location: str) -> str | None:
    """A file:// (or absolute) location as a path inside one of the job's volumeMounts."""
    if location.startswith("file://"):
        path = location[len("file://") :]
    elif location.startswith("/"):
        path = location
    else:
        return None
    target = "/" + path.lstrip("/").rstrip("/")
    for mount in spec.volume_mounts:
        mount_path = str(mount.get("mountPath", "")).rstrip("/")
        if mount_path and (target + "/").startswith(mount_path + "/") and target != mount_path:
            return target
    return None


def cleanup_command(spec: StreamingJobSpec, paths: list[str]) -> list[str]:
    """rm for mounted paths; Hadoop's FsShell (in the Spark image, with S3A) for s3a://."""
    if not paths[0].startswith("s3a://"):
        return ["rm", "-rf", "--", *paths]
    confs = spec.s3.hadoop_conf() if spec.s3 else {}
    defines = [
        arg
        for key, value in sorted(confs.items())
        for arg in ("-D", f"{key.removeprefix('spark.hadoop.')}={value}")
    ]
    return [
        "java",
        "-cp",
        f"{IMAGE_HADOOP_CONF}:/opt/spark/jars/*",
        "org.apache.hadoop.fs.FsShell",
        *defines,
        "-rm",
        "-r",
        "-f",
        "-skipTrash",
        *paths,
    ]


def build_cleanup_job(
    job: dict[str, Any], spec: StreamingJobSpec, paths: list[str], job_name: str
) -> dict[str, Any]:
    """A short-lived Job that deletes the job's checkpoint data (checkpoint_cleanup_paths). It
    is not owned by the StreamingJob (which is going away); it deletes itself after it
    finished."""
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": meta["namespace"],
            "labels": base_labels(meta["name"]),
        },
        "spec": {
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": base_labels(meta["name"])},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "securityContext": pod_security(),
                    "tolerations": spec_tolerations(spec),
                    "nodeSelector": dict(spec.node_selector),
                    "volumes": [*scratch_volumes(), *copy.deepcopy(spec.volumes)],
                    "containers": [
                        {
                            "name": "cleanup",
                            "image": spec.image,
                            "imagePullPolicy": spec.image_pull_policy,
                            "command": cleanup_command(spec, paths),
                            "env": s3_env(spec),
                            "volumeMounts": [
                                *scratch_mounts(),
                                *copy.deepcopy(spec.volume_mounts),
                            ],
                            "securityContext": container_security(),
                        }
                    ],
                },
            },
        },
    }
