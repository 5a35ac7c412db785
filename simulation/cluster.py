"""The simulated API server: the operator's `KubeApi` seam (k8s.py) over an in-memory store.

It keeps what the operator's rules depend on: resource versions and conflicts on the job's
writes, graceful and forced pod deletion, the report ConfigMap's keys written by two writers,
outages (every call fails as a lost connection does), and an operator crash at any call
(`Crash`, which no `except Exception` of the operator catches, as a killed process is caught
by nothing)."""

from __future__ import annotations

import marshal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamingjob_operator.api.naming import LABEL_JOB, label_value
from streamingjob_operator.io.errors import ConflictError, TransientError

from .clock import Clock


class Crash(BaseException):  # a killed process: no `except Exception` catches it
    """The operator process dies inside an API call (before or after it took effect)."""


@dataclass
class Faults:
    """Which calls fail now: an outage fails every call; `crash_in` kills the operator in the
    next call of that kind (`after`: once the call took effect, else before)."""

    outage_until: float = -1.0
    crash_in: str = ""
    crash_after: bool = False


@dataclass
class Server:
    clock: Clock
    faults: Faults = field(default_factory=Faults)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    version: int = 0
    calls: int = 0
    events: list[tuple[str, str, str, str]] = field(default_factory=list)  # uid, type, reason, msg
    event_times: list[float] = field(default_factory=list)  # when each of `events` was posted
    event_names: set[str] = field(default_factory=set)  # the Events posted under a name
    lease_events: list[tuple[str, str]] = field(default_factory=list)  # reason, message
    deposed: list[str] = field(default_factory=list)  # writes of a replica another deposed
    # the kubelets' side of a pod deletion (world.py): True when the pod is gone at once
    delete_pod: Callable[[str, str, bool], bool] = lambda namespace, name, force: True
    on_create: Callable[[dict[str, Any]], None] = lambda pod: None
    created: Counter[tuple[str, str]] = field(default_factory=Counter)  # (owner uid, pod name)
    launched_with: dict[str, dict[str, Any]] = field(default_factory=dict)  # pod -> job spec

    def down(self) -> bool:
        return self.clock.t < self.faults.outage_until

    def bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.bump(obj)
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj
        return obj

    def remove(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.pop((kind, namespace, name), None)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in sorted(self.objects.items()) if k == kind]


# the nodes the creating operator counted lost, noted on a pod (world.schedule checks them)
LOST_WHEN_CREATED = "simulation/lost-when-created"


class SimApi:
    """`KubeApi`'s methods as the reconciler, finalizer, handlers and the leader election
    call them. Each operator replica has its own: `cut_until` cuts that replica off the API
    server (a network partition of one pod), the others still reach it."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.cut_until = -1.0
        self.lost_nodes: Callable[[], frozenset[str]] = frozenset  # its operator's view

    def _enter(self, what: str) -> None:
        s = self.server
        s.calls += 1
        if s.faults.crash_in and what.startswith(s.faults.crash_in) and not s.faults.crash_after:
            s.faults.crash_in = ""
            raise Crash(what)
        if s.down() or s.clock.t < self.cut_until:
            raise TransientError(f"{what}: ConnectionRefusedError (simulated outage)")

    def _leave(self, what: str) -> None:
        s = self.server
        if s.faults.crash_in and what.startswith(s.faults.crash_in) and s.faults.crash_after:
            s.faults.crash_in = ""
            raise Crash(what)

    # --- the StreamingJob ------------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._enter("get job")
        job = self.server.get("StreamingJob", namespace, name)
        self._leave("get job")
        return clone(job)

    def _job_write(self, job: dict[str, Any], change: str, body: Any) -> dict[str, Any]:
        self._enter(f"{change} job")
        meta = job["metadata"]
        stored = self.server.get("StreamingJob", meta["namespace"], meta["name"])
        if stored is None or stored["metadata"]["uid"] != meta.get("uid"):
            raise TransientError(f"{change}: the job is gone (404)")
        if stored["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise ConflictError(f"{change}: the object has been modified")
        if change == "status":
            stored["status"] = clone(body)
        else:
            stored["spec"].setdefault("executor", {})["instances"] = body
            stored["metadata"]["generation"] += 1
        self.server.bump(stored)
        self._leave(f"{change} job")
        return clone(stored)

    def replace_status(self, job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return self._job_write(job, "status", status)

    def set_executor_instances(self, job: dict[str, Any], count: int) -> dict[str, Any]:
        return self._job_write(job, "scale", count)

    def remove_finalizer(self, meta: dict[str, Any]) -> bool:
        """kopf's PATCH of the job's finalizers once its handler is done: the last finalizer
        gone, the API server deletes the job (True when it was this call)."""
        self._enter("patch job finalizers")
        stored = self.server.get("StreamingJob", meta["namespace"], meta["name"])
        gone = stored is not None and stored["metadata"]["uid"] == meta["uid"]
        if gone:
            self.server.remove("StreamingJob", meta["namespace"], meta["name"])
        self._leave("patch job finalizers")
        return gone

    # --- pods ------------------------------------------------------------------------

    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        self._enter("list pods")
        value = label_value(job)
        pods = [
            clone(p)
            for p in self.server.of_kind("Pod")
            if p["metadata"]["namespace"] == namespace
            and p["metadata"]["labels"].get(LABEL_JOB) == value
        ]
        self._leave("list pods")
        return pods

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        self._enter("create pod")
        meta = pod["metadata"]
        if self.server.get("Pod", meta["namespace"], meta["name"]) is not None:
            self._leave("create pod")
            return None
        stored = clone(pod)
        lost = ",".join(sorted(self.lost_nodes()))
        stored["metadata"].setdefault("annotations", {})[LOST_WHEN_CREATED] = lost
        stored.setdefault("status", {})["phase"] = "Pending"
        stored["metadata"]["uid"] = f"pod-{self.server.version + 1}"
        self.server.put(stored)
        self.server.created[(meta["ownerReferences"][0]["uid"], meta["name"])] += 1
        for job in self.server.of_kind("StreamingJob"):
            if label_value(job["metadata"]["name"]) == meta["labels"].get(LABEL_JOB):
                # what the reconcile built the pod from: the spec it read (no act comes
                # within a reconcile)
                self.server.launched_with[meta["name"]] = clone(job["spec"])
        self.server.on_create(stored)
        self._leave("create pod")
        return clone(stored)

    def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> bool:
        self._enter("delete pod")
        gone = self.server.delete_pod(namespace, name, force)
        self._leave("delete pod")
        return bool(gone)

    def dry_run_create(self, obj: dict[str, Any]) -> None:
        self._enter("dry run")
        self._leave("dry run")
        return None

    # --- children --------------------------------------------------------------------

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply: our fields replaced, another writer's ConfigMap keys kept."""
        self._enter(f"apply {obj['kind']}")
        meta = obj["metadata"]
        old = self.server.get(obj["kind"], meta["namespace"], meta["name"])
        new = clone(obj)
        if old is not None and obj["kind"] == "ConfigMap":
            new["data"] = {**(old.get("data") or {}), **(obj.get("data") or {})}
        self.server.put(new)
        self._leave(f"apply {obj['kind']}")

    def create_once(self, obj: dict[str, Any]) -> None:
        self._enter(f"create {obj['kind']}")
        meta = obj["metadata"]
        if self.server.get(obj["kind"], meta["namespace"], meta["name"]) is None:
            self.server.put(clone(obj))
        self._leave(f"create {obj['kind']}")

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._enter("get configmap")
        cm = self.server.get("ConfigMap", namespace, name)
        self._leave("get configmap")
        return clone(cm)

    def set_configmap_key(self, namespace: str, name: str, key: str, value: str) -> None:
        self._enter(f"patch configmap key {key}")
        cm = self.server.get("ConfigMap", namespace, name)
        if cm is None:
            raise TransientError(f"patch ConfigMap {name}: not found (404)")
        cm.setdefault("data", {})[key] = value
        self.server.bump(cm)
        self._leave(f"patch configmap key {key}")

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._enter(f"delete {kind}")
        self.server.remove(kind, namespace, name)
        self._leave(f"delete {kind}")

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        self._enter("get secret")
        self._leave("get secret")
        return None

    def post_event(
        self,
        job: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        name: str = "",
        at: str = "",
    ) -> bool:
        if self.server.down() or self.server.clock.t < self.cut_until:
            return False  # logged, never raised (k8s.py)
        if name in self.server.event_names:
            return True  # 409 AlreadyExists: posted before
        if name:
            self.server.event_names.add(name)
        uid = job.get("metadata", {}).get("uid", "")
        self.server.events.append((uid, type_, reason, message))
        self.server.event_times.append(self.server.clock.t)
        return True

    # --- the operator's leader-election Lease (leadership.py) ---------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._enter("get lease")
        return clone(self.server.get("Lease", namespace, name))

    def write_lease(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Create (no version) or replace the version read; None on a conflict (409)."""
        self._enter("write lease")
        stored = self.server.get("Lease", namespace, name)
        if (stored is None) != (resource_version is None) or (
            stored is not None and stored["metadata"]["resourceVersion"] != resource_version
        ):
            return None
        meta = {"name": name, "namespace": namespace}
        return clone(self.server.put({"kind": "Lease", "metadata": meta, "spec": clone(spec)}))

    def post_lease_event(
        self, lease: dict[str, Any], type_: str, reason: str, message: str, *, timeout: float
    ) -> None:
        if not (self.server.down() or self.server.clock.t < self.cut_until):
            self.server.lease_events.append((reason, message))


def clone(value: Any) -> Any:
    """A deep copy of plain JSON-like data (what the API server answers), 10x cheaper than
    copy.deepcopy."""
    return marshal.loads(marshal.dumps(value))
