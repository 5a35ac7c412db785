"""What the reconciles last observed of each job, so the handlers can tell a watch event that
shows something new from the echo of the operator's own write (see `Seen`); and the other
way, what only a watch event shows: a driver pod that failed as it was being deleted, gone
before any list showed its end."""

from __future__ import annotations

import threading
from typing import Any

from streamingjob_operator.api.job import JobMeta
from streamingjob_operator.rules.fencing import ended_by_its_deletion, has_ended
from streamingjob_operator.rules.observed import PodInfo, pod_info

ENDED_KEPT = 8  # per job: more than a reconcile's worth of replaced drivers


class Seen:
    """What the reconciles last observed of each job: its generation and its pods' resource
    versions. A watch event that shows nothing new (most often the echo of the operator's own
    write) need not wake the job's reconcile; anything else does. Written by reconciles
    (worker threads, one at a time per job), read by the handlers (event loop); a job's pod
    snapshot is replaced, never changed in place.

    A pod snapshot maps names to resourceVersions, or to CREATING / DELETING while this
    operator's own create or delete of that pod is under way: their echoes wake nothing. A
    deletion the API server did not complete at once (graceful) leaves the pod with an
    unknown version, so its later events wake the job; the reconcile that deleted it also
    looks again after fencingPollSeconds by itself.
    """

    CREATING = "+"
    DELETING = "-"

    def __init__(self) -> None:
        self._generations: dict[tuple[str, str], int] = {}
        self._pods: dict[tuple[str, str], dict[str, str]] = {}
        # per job name: pod name -> (its owners' uids, the pod as its last event showed it)
        self._ended: dict[tuple[str, str], dict[str, tuple[set[str], PodInfo]]] = {}
        self._lock = threading.Lock()

    # --- written by reconciles -----------------------------------------------------------

    def saw_job(self, meta: JobMeta) -> None:
        with self._lock:
            self._generations[meta.key] = meta.generation

    def saw_pods(self, namespace: str, name: str, pods: list[dict[str, Any]]) -> None:
        """A list of the job's pods (replaces what was known)."""
        snapshot = {p["metadata"]["name"]: resource_version(p) for p in pods}
        with self._lock:
            self._pods[(namespace, name)] = snapshot

    def mark(self, namespace: str, name: str, pod: str, state: str | None) -> None:
        """One pod: a resourceVersion, CREATING, DELETING, or None (gone / unknown)."""
        with self._lock:
            snapshot = dict(self._pods.get((namespace, name)) or {})
            if state is None:
                snapshot.pop(pod, None)
            else:
                snapshot[pod] = state
            self._pods[(namespace, name)] = snapshot

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._generations.pop((namespace, name), None)
            self._pods.pop((namespace, name), None)
            self._ended.pop((namespace, name), None)

    def ended_drivers(self, namespace: str, name: str, uid: str) -> list[PodInfo]:
        """The driver pods of the job (this one: `uid`, not a deleted one of the same name)
        that failed as they were being deleted, as their last watch event showed them (a
        list may no longer show them)."""
        with self._lock:
            kept = list((self._ended.get((namespace, name)) or {}).values())
        return [info for owners, info in kept if uid in owners]

    def told(self, namespace: str, name: str, pod: str) -> None:
        """The history tells that pod's end: no need to keep it."""
        with self._lock:
            (self._ended.get((namespace, name)) or {}).pop(pod, None)

    # --- written by handlers -----------------------------------------------------------

    def driver_event(self, namespace: str, job: str, body: dict[str, Any]) -> None:
        """A driver pod's watch event: kept when it shows the pod ended by a failure of its
        own while being deleted (the kubelet removes such a pod right after its last status:
        a reconcile may never list it)."""
        meta = body.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            return  # most events: parsed only for a pod being deleted
        info = pod_info(body)
        if not has_ended(info) or ended_by_its_deletion(info):
            return
        owners = {o.get("uid", "") for o in meta.get("ownerReferences") or []}
        with self._lock:
            ended = self._ended.setdefault((namespace, job), {})
            ended[info.name] = (owners, info)
            while len(ended) > ENDED_KEPT:
                ended.pop(next(iter(ended)))

    # --- read by handlers ----------------------------------------------------------------

    def job_is_news(self, namespace: str, name: str, generation: Any) -> bool:
        """A StreamingJob event: news unless its generation (spec) was already observed."""
        return self._generations.get((namespace, name)) != int(generation or 0)

    def pod_is_news(
        self, namespace: str, job: str, pod: str, resource_version: Any, event_type: str | None
    ) -> bool:
        """A pod event (ADDED, MODIFIED, DELETED, or None when kopf lists): news unless the
        last observation already showed it. A MODIFIED pod that the last list did not show
        was deleted before that list (a stale event), or its ADDED event woke the job."""
        snapshot = self._pods.get((namespace, job))
        if snapshot is None:
            return True
        known = snapshot.get(pod)
        if known == self.DELETING:
            return False
        if event_type == "DELETED":
            return known is not None
        if known is None:
            return event_type != "MODIFIED"
        if known == self.CREATING:
            return event_type == "MODIFIED"
        return known != str(resource_version or "")


def resource_version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("resourceVersion") or "")
