"""What the reconciles last observed of each job, so the handlers can tell a watch event that
shows something new from the echo of the operator's own write (see `Seen`)."""

from __future__ import annotations

import threading
from typing import Any

from streamingjob_operator.api.job import JobMeta


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
