"""Deterministic names and labels of a job's children.

Driver pods are named `<job>-e<epoch>-a<attempt>-driver`, so a relaunch in the same attempt can
only ever produce the same name (the API server refuses a second create). Names longer than a
DNS label are shortened with a hash of the full job name, keeping them unique.
"""

from __future__ import annotations

import hashlib

from streamingjob_operator.api.models import API_GROUP

MAX_LABEL = 63

LABEL_JOB = f"{API_GROUP}/job"
LABEL_EPOCH = f"{API_GROUP}/epoch"
LABEL_ATTEMPT = f"{API_GROUP}/attempt"
LABEL_DRIVER = f"{API_GROUP}/driver-pod"
LABEL_ROLE = "spark-role"  # Spark's own label: driver | executor
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "streamingjob-operator"

FINALIZER = f"{API_GROUP}/finalizer"


def _fit(base: str, suffix: str, limit: int = MAX_LABEL) -> str:
    """`base + suffix`, with base cut and hashed when the result would exceed `limit`."""
    if len(base) + len(suffix) <= limit:
        return base + suffix
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    keep = limit - len(suffix) - len(digest) - 1
    return f"{base[:keep].rstrip('-.')}-{digest}{suffix}"


def driver_pod_name(job: str, epoch: int, attempt: int) -> str:
    return _fit(job, f"-e{epoch}-a{attempt}-driver")


def service_name(job: str) -> str:
    """A Service name is a DNS-1035 label: letters, digits and '-', starting with a letter.
    A job name may have dots (orders.v2): they become '-', with a hash of the full name so
    that orders.v2 and orders-v2 stay apart."""
    if "." in job:
        job = f"{job.replace('.', '-')}-{hashlib.sha256(job.encode()).hexdigest()[:6]}"
    name = _fit(job, "-driver")
    return name if name[0].isalpha() else _fit("j" + job, "-driver")


def driver_host_name(driver_pod: str) -> str:
    """The driver pod's hostname (a DNS label: no dots). With the headless Service as its
    subdomain it gives each driver its own address, <host>.<service>.<namespace>.svc, so
    that executors reach their own driver even while two run (a warm hand-over)."""
    return driver_pod.replace(".", "-")


def driver_address(job: str, driver_pod: str, namespace: str) -> str:
    return f"{driver_host_name(driver_pod)}.{service_name(job)}.{namespace}.svc"


def ui_service_name(job: str) -> str:
    """`<job>-ui`, a DNS-1035 label like service_name()."""
    return service_name(job).removesuffix("-driver") + "-ui"


def job_configmap_name(job: str) -> str:
    return _fit(job, "-job", 253)


def report_configmap_name(job: str) -> str:
    return _fit(job, "-report", 253)


def go_configmap_name(job: str) -> str:
    """The go of a warm hand-over (go.json): the operator's alone, drivers only read it."""
    return _fit(job, "-go", 253)


def offsets_configmap_name(job: str) -> str:
    return _fit(job, "-offsets", 253)


def executor_pod_names(driver_pod: str, count: int) -> list[str]:
    """The first `count` executor pods of a driver, as Spark names them
    (`<spark.kubernetes.executor.podNamePrefix>-exec-<id>`, ids counting up from 1 per driver,
    replacements included; the prefix is the driver pod's name)."""
    return [f"{driver_pod}-exec-{i}" for i in range(1, count + 1)]


def driver_account_name(job: str) -> str:
    return _fit(job, "-driver", 253)


def disruption_budget_name(job: str) -> str:
    return _fit(job, "-executors", 253)


def cleanup_job_name(job: str) -> str:
    return _fit(job, "-ckpt-cleanup")


def label_value(value: str) -> str:
    """A label value (≤ 63 chars); long job names are hashed like resource names."""
    return _fit(value, "")


def job_selector(job: str) -> dict[str, str]:
    return {LABEL_JOB: label_value(job)}


def executor_selector(job: str) -> str:
    """The job's executor pods, as a label selector string (the scale subresource's)."""
    return selector_string({**job_selector(job), LABEL_ROLE: "executor"})


def selector_string(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
