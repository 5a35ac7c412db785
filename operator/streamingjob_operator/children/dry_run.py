"""Server-side dry runs of a job's pods before its first launch: what the API server (and its
admission webhooks) would refuse, mapped back to the spec field that caused it and its fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus
from streamingjob_operator.api.naming import driver_pod_name
from streamingjob_operator.children.driver_pod import (
    build_driver_pod,
    build_executor_template,
)
from streamingjob_operator.children.pod_parts import (
    credential_sources,
    merge,
    pod_resources,
)
from streamingjob_operator.children.validation import (
    InvalidJobError,
)
from streamingjob_operator.rules.launch import Launch


@dataclass(frozen=True)
class Rejection:
    """The API server's refusal of a dry-run create: HTTP status, message, and its causes
    as (field path in the object, message)."""

    status: int
    message: str
    causes: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True)
class DryRun:
    """An object the job would create, checked by a server-side dry run before any child
    exists. `what` is what a message calls it."""

    what: str
    obj: dict[str, Any]
    role: str  # driver | executor
    # a second look at what another dry run already covers: skipped once one found problems
    template_only: bool = False


def dry_run_pods(
    job: dict[str, Any], spec: StreamingJobSpec, status: StreamingJobStatus
) -> list[DryRun]:
    """The driver pod and an executor pod as Spark makes them from the executor template:
    every free-form field of the spec (env, volumes, volumeMounts, podTemplate) reaches the
    pod API through them. The operator's own service account does not exist before the first
    launch: those dry runs leave it out (the pod API checks nothing more of it)."""
    name = job["metadata"]["name"]
    epoch, attempt = max(status.epoch, 1), max(status.attempt, 1)
    pod_name = status.driver_pod or driver_pod_name(name, epoch, attempt)
    location = status.checkpoint_location or spec.checkpoint.location
    driver = build_driver_pod(job, spec, Launch(pod_name, epoch, attempt, location))
    executor = build_executor_template(spec, name)
    executor["metadata"] = {
        **executor.get("metadata", {}),
        "namespace": job["metadata"]["namespace"],
    }
    executor["spec"]["restartPolicy"] = "Never"
    ex = spec.executor
    container = next(c for c in executor["spec"]["containers"] if c.get("name") == "executor")
    container["image"] = spec.image
    container["imagePullPolicy"] = spec.image_pull_policy
    container["resources"] = pod_resources(
        ex.cores, ex.memory, ex.memory_overhead, ex.cpu_limit, ex.cpu_request
    )
    pods = [DryRun("driver pod", driver, "driver"), DryRun("executor pod", executor, "executor")]
    if spec.pod_template.metadata or spec.pod_template.spec:
        pods.append(_template_as_written(driver, spec, job["metadata"]["namespace"]))
    for pod in pods:
        # generated names: the job's own driver and executors may exist under the real ones
        # (a dry run of an existing name is refused as AlreadyExists)
        pod.obj["metadata"].pop("name", None)
        pod.obj["metadata"]["generateName"] = f"{pod_name[:50].rstrip('-.')}-dry-run-"
        if pod.template_only:
            continue  # the template's own values, as written (_template_as_written)
        if spec.service_account_name is None:
            pod.obj["spec"].pop("serviceAccountName", None)
            pod.obj["spec"]["automountServiceAccountToken"] = False
        else:
            pod.obj["spec"]["serviceAccountName"] = spec.service_account_name
    return pods


def _template_as_written(driver: dict[str, Any], spec: StreamingJobSpec, namespace: str) -> DryRun:
    """The driver pod with the user's podTemplate winning over the operator's own fields.
    Where the operator (or Spark, for executors) sets a field itself, the real pods never
    show the template's value to the pod API: a wrong type or an unknown enum value there
    (restartPolicy: Sometimes, labels as a list) would be dropped without a word. This pod
    shows it. Its name, namespace and account are the operator's (as in `dry_run_pods`)
    where the template's are strings: only their type is the template's to get wrong."""
    own = spec.pod_template
    pod = merge(driver, {"metadata": own.metadata, "spec": own.spec})
    meta = pod["metadata"]
    if isinstance(meta.get("name", ""), str):
        meta.pop("name", None)
    if isinstance(meta.get("namespace", ""), str):
        meta["namespace"] = namespace
    if not isinstance(own.spec.get("serviceAccountName", ""), str):
        pass  # of the wrong type: the API server names it
    elif spec.service_account_name is not None:
        pod["spec"]["serviceAccountName"] = spec.service_account_name
    else:
        pod["spec"].pop("serviceAccountName", None)
        if "automountServiceAccountToken" not in own.spec:
            pod["spec"]["automountServiceAccountToken"] = False
    return DryRun("driver pod with the podTemplate's own values", pod, "driver", True)


_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')


_TYPE_ERROR = re.compile(r"Go struct field \w+\.(\S+) of type")


_INDEX = re.compile(r"\[(\d+)\]")


def rejection_problems(
    dry: DryRun, spec: StreamingJobSpec, rejection: Rejection
) -> list[InvalidJobError]:
    """The API server's causes, each attributed to the spec field it came from."""
    causes = list(rejection.causes)
    causes += [(f, "unknown field") for f in _UNKNOWN_FIELD.findall(rejection.message)]
    causes += [(f, rejection.message) for f in _TYPE_ERROR.findall(rejection.message)]
    if not causes:
        causes = [("", rejection.message)]
    problems: dict[str, list[str]] = {}
    for path, message in causes:
        account = re.search(r"service ?account", message, re.IGNORECASE)
        if not path and account and spec.service_account_name:
            where = "spec.serviceAccountName"
        else:
            where = attribute(dry, spec, path)
        detail = f"{path}: {message}" if path else message
        problems.setdefault(where, []).append(detail)
    return [
        InvalidJobError(
            where,
            f"the API server refuses the {dry.what} (dry run): " + "; ".join(details),
            f"correct {where}" + _KIND_HINT.get(where.split("[")[0], ""),
        )
        for where, details in problems.items()
    ]


_KIND_HINT = {
    "spec.env": " (a Kubernetes EnvVar: name, value or valueFrom)",
    "spec.volumes": " (a Kubernetes Volume)",
    "spec.volumeMounts": " (a Kubernetes VolumeMount: name, mountPath)",
    "spec.podTemplate": " (a partial Kubernetes Pod: metadata, spec)",
    "spec.tolerations": " (a Kubernetes Toleration)",
    "spec.nodeSelector": " (label keys and values)",
}


def _resolve(obj: Any, path: str) -> list[Any]:
    """The objects along a field path such as spec.containers[0].env[7].name (outermost
    first); the walk stops where the path leaves the object."""
    chain = [obj]
    for part in re.split(r"\.(?![^\[]*\])", path):
        name, *indexes = re.split(r"\[", part)
        node = chain[-1]
        if name:
            if not isinstance(node, dict) or name not in node:
                break
            node = node[name]
            chain.append(node)
        for index in indexes:
            index = index.rstrip("]")
            if isinstance(node, list) and index.isdigit() and int(index) < len(node):
                node = node[int(index)]
            elif isinstance(node, dict) and index.strip("\"'") in node:
                node = node[index.strip("\"'")]
            else:
                return chain
            chain.append(node)
    return chain


def _index_in(items: list[Any], candidates: list[Any]) -> int | None:
    for item in reversed(candidates):
        for i, mine in enumerate(items):
            if isinstance(item, dict) and item == mine:
                return i
    return None


def _credential_field(spec: StreamingJobSpec, chain: list[Any]) -> str | None:
    """The spec field of the operator's credential env entry on `chain`, if one is."""
    for spec_field, entries in credential_sources(spec).items():
        if any(isinstance(e, dict) and e in entries for e in chain):
            return spec_field
    return None


def attribute(dry: DryRun, spec: StreamingJobSpec, path: str) -> str:
    """The spec field a rejected pod field came from: the user's list entries (env,
    volumes, volumeMounts) by content, the operator's own container fields by name, the
    rest from the pod template."""
    chain = _resolve(dry.obj, path)
    bare = _INDEX.sub("", path)
    container_field = re.match(r"spec\.(?:init)?[cC]ontainers(?:\[\d+\])?\.?(\w*)", path)
    container = chain[3] if container_field and len(chain) > 3 else None
    ours = isinstance(container, dict) and container.get("name") == dry.role
    if bare.startswith("spec.containers") and container is None and container_field:
        ours = True  # a decoding error without indexes: most likely our container's field
    sub = container_field.group(1) if container_field else ""
    if bare.startswith(("spec.containers", "spec.initContainers")) and ours:
        if sub == "env":
            i = _index_in(spec.env, chain)
            if i is not None:
                return f"spec.env[{i}]"
            if (credentials := _credential_field(spec, chain)) is not None:
                return credentials
            return "spec.env" if spec.env and len(chain) <= 5 else "spec.podTemplate"
        if sub == "volumeMounts":
            i = _index_in(spec.volume_mounts, chain)
            if i is not None:
                return f"spec.volumeMounts[{i}]"
            return "spec.volumeMounts" if spec.volume_mounts else "spec.podTemplate"
        if sub == "resources":
            return f"spec.{dry.role}"
        if sub in ("image", "imagePullPolicy"):
            return f"spec.{sub}"
        return "spec.podTemplate"
    if bare.startswith("spec.volumes"):
        i = _index_in(spec.volumes, chain)
        if i is not None:
            return f"spec.volumes[{i}]"
        return "spec.volumes" if spec.volumes and len(chain) <= 2 else "spec.podTemplate"
    if bare.startswith("spec.tolerations") and spec.tolerations:
        return "spec.tolerations"
    if bare.startswith("spec.nodeSelector") and spec.node_selector:
        return "spec.nodeSelector"
    if bare.startswith("spec.serviceAccountName") and spec.service_account_name:
        return "spec.serviceAccountName"
    return "spec.podTemplate"
