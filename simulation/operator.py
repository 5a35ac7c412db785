"""The operator process as handlers.py runs it, over the simulated API server: the real
`Reconciler`, `Finalizer` and `NodeTracker`, a reconcile per wake-up or when the last one
asked to look again, the finalizer while the job is being deleted. A crash (`Crash` at any
API call) ends the process; its replacement starts with empty memory, as a new pod would."""

from __future__ import annotations

from typing import Any

from streamingjob_operator.api.naming import FINALIZER
from streamingjob_operator.finalizer import Finalizer
from streamingjob_operator.io.errors import TransientError
from streamingjob_operator.io.nodes import NodeTracker
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.rules.timing import watch_quiet_seconds
from streamingjob_operator.settings import OperatorSettings

from .cluster import Crash
from .world import NAMESPACE, World


def settings(grace: float) -> OperatorSettings:
    return OperatorSettings(
        node_lost_grace_seconds=grace,
        fencing_poll_seconds=2.0,
        resync_seconds=30.0,
        failure_backoff_base_seconds=2.0,
        failure_backoff_cap_seconds=30.0,
    )


class Operator:
    def __init__(self, world: World, config: OperatorSettings) -> None:
        self.world = world
        self.config = config
        self.tracker = NodeTracker(
            list_leases=lambda: ([], ""),
            watch_leases=lambda version, timeout: iter(()),
            list_nodes=lambda: ([], ""),
            watch_nodes=lambda version, timeout: iter(()),
            grace_seconds=config.node_lost_grace_seconds,
            quiet_seconds=watch_quiet_seconds(config.kubelet_lease_renew_seconds),
            wake=lambda namespace, name: self.world.at(0.1, "reconcile", name),
            clock=world.clock,
        )
        self.reconciler = Reconciler(world.api, config, nodes=self.tracker, clock=world.clock)
        self.finalizer = Finalizer(world.api, config, nodes=self.tracker, clock=world.clock)
        self.generation = 0  # which process this is (a crash starts the next one)

    def lease(self, lease: dict[str, Any]) -> None:
        self.tracker._on_lease("MODIFIED", lease)

    def check_nodes(self) -> None:
        for _namespace, name in self.tracker.silent_jobs():
            self.world.at(0.1, "reconcile", name)

    def reconcile(self, name: str) -> float | None:
        """One reconcile (or the finalizer's turn) of the job; seconds until the next look,
        None when the job is gone. Raises Crash when the process dies."""
        job = self.world.server.get("StreamingJob", NAMESPACE, name)
        if job is None:
            return None
        if job["metadata"].get("deletionTimestamp"):
            return self._finalize(job)
        return self.reconciler.reconcile(NAMESPACE, name)

    def _finalize(self, job: dict[str, Any]) -> float | None:
        try:
            body = self.world.api.get_job(NAMESPACE, job["metadata"]["name"])
            if body is None:
                return None
            self.finalizer.finalize(body)
        except TransientError as exc:
            return float(getattr(exc, "delay", None) or self.config.fencing_poll_seconds)
        if self.world.server.down():
            return self.config.fencing_poll_seconds  # kopf's PATCH removing the finalizer
        stored = self.world.server.get("StreamingJob", NAMESPACE, job["metadata"]["name"])
        if stored is not None and FINALIZER in stored["metadata"].get("finalizers", []):
            self.world.server.remove("StreamingJob", NAMESPACE, job["metadata"]["name"])
            self.world.log(f"job {job['metadata']['name']} ({job['metadata']['uid']}) deleted")
        return None


__all__ = ["Crash", "Operator", "settings"]
