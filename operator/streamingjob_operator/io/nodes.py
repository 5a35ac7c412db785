"""The operator's own view of the nodes its jobs run on: liveness and cordons.

* **Liveness.** A kubelet renews its node's Lease (namespace kube-node-lease) every 10 s. This
  module watches the leases and notes, by this process's clock, when each renewal was seen:
  no clock skew between nodes matters, and an operator that starts during an outage counts
  from its own start (later, never earlier). A node not heard from for `grace` seconds is
  lost (`fencing.is_lost`), with no wait for the node lifecycle controller (which marks pods
  only after its own node-monitor grace, 50 s by default). The view is trusted only while
  the watch itself is alive: when no renewal of any node arrives for the quiet window
  (`timing.watch_quiet_seconds`: one and a half renewal intervals), every answer is
  "unknown" and the operator falls back to the API server's view; when renewals come back,
  every node counts from that moment, as at the operator's start.
* **Cordons.** `kubectl drain` first cordons the node: the jobs with pods there are moved
  before the evictions come (`restarts.move_off`), their PodDisruptionBudget holds the
  evictions until then.

Jobs report which nodes their pods run on (`track`); the tracker wakes them when such a node
goes silent past the grace or is cordoned. Without read access to leases or nodes (RBAC) it
logs once and stays "unknown": the operator then works as before, from pod conditions.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from streamingjob_operator.io.errors import FatalError
from streamingjob_operator.rules.observed import PodInfo, pod_info

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0
RETRY_SECONDS = 2.0

JobKey = tuple[str, str]
# (list of objects, resourceVersion) and a watch of (event type, object) from it
Lister = Callable[[], tuple[list[dict[str, Any]], str]]
Watcher = Callable[[str, int], Iterator[tuple[str, dict[str, Any]]]]


class NodeTracker:
    def __init__(
        self,
        *,
        list_leases: Lister,
        watch_leases: Watcher,
        list_nodes: Lister,
        watch_nodes: Watcher,
        grace_seconds: float,
        quiet_seconds: float,  # timing.watch_quiet_seconds
        wake: Callable[[str, str], object],  # its result is ignored
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._sources = {
            "leases": (list_leases, watch_leases, self._on_lease),
            "nodes": (list_nodes, watch_nodes, self._on_node),
        }
        self._grace = timedelta(seconds=grace_seconds)
        self._quiet = timedelta(seconds=quiet_seconds)
        self._wake = wake
        self._clock = clock
        self._lock = threading.Lock()
        self._renewals: dict[str, str] = {}  # node -> renewTime as its lease says
        self._heard: dict[str, datetime] = {}  # node -> when we saw it renew
        self._last_renewal_seen: datetime | None = None
        self._view_since = clock()  # this process's start, or the view's last return
        self._cordoned: set[str] = set()
        self._jobs: dict[JobKey, frozenset[str]] = {}
        self._woken_lost: set[tuple[JobKey, str]] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- what decide() gets -----------------------------------------------------------

    def heard_at(self, node: str) -> datetime | None:
        """When this operator last saw `node`'s kubelet renew its lease; None when unknown
        (no such lease, leases not watched, or the watch itself has gone quiet)."""
        if not node:
            return None
        with self._lock:
            if self._quiet_at(self._clock()):
                return None
            return self._heard.get(node)

    def _quiet_at(self, now: datetime) -> bool:
        last = self._last_renewal_seen
        return last is None or now - last >= self._quiet

    def lost(self) -> frozenset[str]:
        """The nodes not heard from for the grace (none while the view is unknown): where a
        new pod would be counted lost the moment it is placed."""
        now = self._clock()
        with self._lock:
            if self._quiet_at(now):
                return frozenset()
            return frozenset(n for n, heard in self._heard.items() if now - heard >= self._grace)

    def confirmable_since(self) -> datetime:
        """Since when a kubelet could have confirmed a deletion to this view: its start or
        last return; now while it is out after it had heard renewals (an outage of the API
        server or of this watch). (Never heard, leases not readable: from its start.)"""
        now = self._clock()
        with self._lock:
            if self._last_renewal_seen is not None and self._quiet_at(now):
                return now
            return self._view_since

    def view_since(self) -> datetime:
        """Since when this view counts silences: the operator's start, or the end of the last
        silence of every node (an outage of the API server or of this watch)."""
        with self._lock:
            return self._view_since

    def cordoned(self, node: str) -> bool:
        with self._lock:
            return node in self._cordoned

    def track(self, job: JobKey, nodes: set[str]) -> None:
        """The nodes `job`'s pods run on now (empty: forget it)."""
        with self._lock:
            if nodes:
                self._jobs[job] = frozenset(nodes)
            else:
                self._jobs.pop(job, None)
            self._woken_lost = {(k, n) for k, n in self._woken_lost if k != job or n in nodes}

    # --- life cycle -------------------------------------------------------------------

    def start(self) -> NodeTracker:
        for name in self._sources:
            thread = threading.Thread(target=self._follow, args=(name,), daemon=True)
            thread.name = f"nodes-{name}"
            thread.start()
            self._threads.append(thread)
        checker = threading.Thread(target=self._check_loop, name="nodes-check", daemon=True)
        checker.start()
        self._threads.append(checker)
        return self

    def stop(self) -> None:
        self._stop.set()

    # --- watching ---------------------------------------------------------------------

    def _follow(self, source: str) -> None:
        """List, then watch from that version; on any error list again (a watch can
        expire or break)."""
        list_fn, watch_fn, handle = self._sources[source]
        warned = False
        while not self._stop.is_set():
            try:
                items, version = list_fn()
                for item in items:
                    handle("ADDED", item)
                for kind, item in watch_fn(version, 60):
                    if self._stop.is_set():
                        return
                    handle(kind, item)
            except FatalError as exc:  # forbidden: no view of this source
                if not warned:
                    log.warning("no %s view (%s): node checks use pod conditions", source, exc)
                    warned = True
                self._stop.wait(60)
            except Exception as exc:
                log.info("%s watch interrupted (%s); listing again", source, exc)
                self._stop.wait(RETRY_SECONDS)

    def _on_lease(self, kind: str, lease: dict[str, Any]) -> None:
        node = (lease.get("metadata") or {}).get("name", "")
        renewed = str((lease.get("spec") or {}).get("renewTime") or "")
        now = self._clock()
        with self._lock:
            if kind == "DELETED":
                self._renewals.pop(node, None)
                self._heard.pop(node, None)
                return
            if self._renewals.get(node) != renewed:
                if self._last_renewal_seen is not None and self._quiet_at(now):
                    # The view comes back after a silence of every node (an outage of the
                    # API server or of this watch): the other kubelets renew within one
                    # interval from now; counting their silence from before it would declare
                    # healthy drivers lost. From now, as at this operator's start.
                    self._heard = dict.fromkeys(self._heard, now)
                    self._view_since = now
                self._renewals[node] = renewed
                self._heard[node] = now
                self._last_renewal_seen = now

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        with self._lock:
            was = name in self._cordoned
            if unschedulable and kind != "DELETED":
                self._cordoned.add(name)
            else:
                self._cordoned.discard(name)
            newly = unschedulable and not was and kind != "DELETED"
            jobs = [k for k, nodes in self._jobs.items() if name in nodes] if newly else []
        for namespace, job in jobs:
            log.info("node %s cordoned: waking %s/%s", name, namespace, job)
            self._wake(namespace, job)

    def _check_loop(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_SECONDS):
            for namespace, job in self.silent_jobs():
                self._wake(namespace, job)

    def silent_jobs(self) -> list[JobKey]:
        """Jobs with a pod on a node silent past the grace, each once per node."""
        due = []
        lost = self.lost()
        for key, nodes in list(self._jobs.items()):
            for node in nodes & lost:
                heard = self.heard_at(node)
                with self._lock:
                    if (key, node) in self._woken_lost:
                        continue
                    self._woken_lost.add((key, node))
                log.info("node %s silent since %s: waking %s/%s", node, heard, *key)
                due.append(key)
        return due


def with_node_view(pods: list[dict[str, Any]], nodes: NodeTracker | None) -> tuple[PodInfo, ...]:
    """Pods as plain values, with this operator's view of their nodes (liveness, cordon)."""
    infos = tuple(pod_info(p) for p in pods)
    if nodes is None:
        return infos
    return tuple(_viewed(p, nodes) if p.node else p for p in infos)


def _viewed(pod: PodInfo, nodes: NodeTracker) -> PodInfo:
    """Without a lease view the pod's Ready=Unknown decides, counted no earlier than this
    view's start: a mark the node lifecycle controller made before an outage (or before this
    operator started) says nothing of a kubelet that could not renew since, as the controller
    itself counts from the control plane's return (simulation seed 39: a node thawed during an
    outage, its healthy driver forced out the second the new leader looked). So is a deletion
    no kubelet confirmed (seed 1080: the new leader after an outage forced out a driver its
    predecessor had asked to stop before it)."""
    heard = nodes.heard_at(pod.node)
    unknown = pod.ready_unknown_since
    if heard is None and unknown is not None:
        unknown = max(unknown, nodes.view_since())
    return replace(
        pod,
        node_heard_at=heard,
        node_cordoned=nodes.cordoned(pod.node),
        deletion_confirmable_since=None if heard is not None else nodes.confirmable_since(),
        ready_unknown_since=unknown,
    )
