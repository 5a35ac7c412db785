"""The operator as handlers.py runs it in the leading replica (replicas.py), over the
simulated API server: the real `Reconciler`, `Finalizer` and `NodeTracker`, a reconcile per
wake-up or when the last one asked to look again, the finalizer while the job is being
deleted. A crash (`Crash` at any API call) ends the process; its replacement starts with
empty memory, as a new pod would."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from streamingjob_operator.api.naming import LABEL_JOB
from streamingjob_operator.finalizer import Finalizer
from streamingjob_operator.io.errors import TransientError
from streamingjob_operator.io.nodes import NodeTracker
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.rules.timing import watch_quiet_seconds
from streamingjob_operator.settings import OperatorSettings

from . import offsets
from .cluster import Crash, SimApi
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
    def __init__(
        self,
        world: World,
        config: OperatorSettings,
        api: SimApi,
        clock: Callable[[], datetime],
        wake: Callable[[str], None],
    ) -> None:
        """`api`: the replica's, through its write gate; `clock`: its wall clock; `wake`:
        looks at a job again soon (the handlers' poke)."""
        self.world = world
        self.config = config
        self.api = api
        self.wake = wake
        self.tracker = NodeTracker(
            list_leases=lambda: ([], ""),
            watch_leases=lambda version, timeout: iter(()),
            list_nodes=lambda: ([], ""),
            watch_nodes=lambda version, timeout: iter(()),
            grace_seconds=config.node_lost_grace_seconds,
            quiet_seconds=watch_quiet_seconds(config.kubelet_lease_renew_seconds),
            wake=lambda namespace, name: wake(name),
            clock=clock,
        )
        api.lost_nodes = self.tracker.lost
        readings = offsets.Readings(world.kafka, config.kafka_poll_seconds)
        readings.now = clock
        self.reconciler = Reconciler(
            api,  # type: ignore[arg-type]
            config,
            nodes=self.tracker,
            clock=clock,
            kafka=readings,  # type: ignore[arg-type]
        )
        self.reconciler.offsets.runner = offsets.runner(world.kafka, world.offsets_moved)
        self.finalizer = Finalizer(api, config, nodes=self.tracker, clock=clock)  # type: ignore[arg-type]

    def lease(self, lease: dict[str, Any]) -> None:
        self.tracker._on_lease("MODIFIED", lease)

    def pod_deleted(self, pod: dict[str, Any]) -> None:
        """A driver pod's last watch event (handlers.driver_pod_event)."""
        job = pod["metadata"]["labels"][LABEL_JOB]
        self.reconciler.seen.driver_event(NAMESPACE, job, pod)

    def check_nodes(self) -> None:
        for _namespace, name in self.tracker.silent_jobs():
            self.wake(name)

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
            body = self.api.get_job(NAMESPACE, job["metadata"]["name"])
            if body is None:
                return None
            self.finalizer.finalize(body)
        except TransientError as exc:
            return float(getattr(exc, "delay", None) or self.config.fencing_poll_seconds)
        try:  # kopf's PATCH removing the finalizer: the API server then deletes the job
            if self.api.remove_finalizer(job["metadata"]):
                self.world.log(f"job {job['metadata']['name']} ({job['metadata']['uid']}) deleted")
        except TransientError:
            return self.config.fencing_poll_seconds
        return None


__all__ = ["Crash", "Operator", "settings"]
