"""Two operator replicas and their Lease, as __main__.run_elected runs them: each process is
a candidate of the real `Leadership` (leadership.py, election.py) until it holds the Lease,
then it starts the operator (operator.py) with fresh memory, every write through the real
`Gate`. The election's threads (renewal every retry period, the watchdog at the renew
deadline) are events here. A lost Lease, a crash in a call, or an upgrade ends the process;
its kubelet starts a new one as a candidate, as a restarted container is.

Each replica has a clock of its own: a wall clock `offset` seconds off the world's and a
monotonic clock running at `rate` (a bounded drift, which the Lease's margin between the
renew deadline and the lease duration covers: election.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from streamingjob_operator.io.errors import OperatorError
from streamingjob_operator.leadership import Gate, Leadership, NotLeading
from streamingjob_operator.rules.election import ElectionTiming
from streamingjob_operator.settings import OperatorSettings

from .cluster import SimApi
from .operator import Operator
from .world import NAMESPACE, World

LEASE = "streamingjob-operator"
TIMING = ElectionTiming()  # the chart's defaults: 15 s lease, 10 s deadline, 2 s retries
MAX_DRIFT = 0.005  # monotonic clocks within 0.5 % of each other
MAX_OFFSET = 2.0  # wall clocks within 2 s of the world's


class GatedApi(SimApi):
    """The operator's API client with the leader's write gate (k8s.KubeApi(write_gate=...)):
    every create, replace, patch and delete passes the gate first; an Event that cannot pass
    is dropped, as any Event the client cannot post."""

    def __init__(self, base: SimApi, gate: Gate, identity: str) -> None:
        super().__init__(base.server)
        self.base, self.gate, self.identity = base, gate, identity

    def _enter(self, what: str) -> None:
        self.base._enter(what)  # the replica's own partition

    def _gated(self, what: str, call: Callable[[], Any]) -> Any:
        with self.gate.writing(what):
            lease = self.server.get("Lease", NAMESPACE, LEASE) or {}
            holder = lease.get("spec", {}).get("holderIdentity")
            if holder and holder != self.identity:  # the invariant "one leader" (invariants.py)
                self.server.deposed.append(f"{self.identity} wrote ({what}) while {holder} led")
            return call()

    def replace_status(self, job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        return self._gated("status", lambda: super(GatedApi, self).replace_status(job, status))

    def set_executor_instances(self, job: dict[str, Any], count: int) -> dict[str, Any]:
        write = super().set_executor_instances
        return self._gated("scale", lambda: write(job, count))

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        return self._gated("create pod", lambda: super(GatedApi, self).create_pod(pod))

    def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> bool:
        delete = super().delete_pod
        return bool(self._gated("delete pod", lambda: delete(namespace, name, force=force)))

    def apply(self, obj: dict[str, Any]) -> None:
        self._gated("apply", lambda: super(GatedApi, self).apply(obj))

    def create_once(self, obj: dict[str, Any]) -> None:
        self._gated("create", lambda: super(GatedApi, self).create_once(obj))

    def set_configmap_key(self, namespace: str, name: str, key: str, value: str) -> None:
        patch = super().set_configmap_key
        self._gated("patch configmap", lambda: patch(namespace, name, key, value))

    def remove_finalizer(self, meta: dict[str, Any]) -> bool:
        remove = super().remove_finalizer
        return bool(self._gated("patch job finalizers", lambda: remove(meta)))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._gated("delete", lambda: super(GatedApi, self).delete(kind, namespace, name))

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
        try:
            post = super().post_event
            return bool(
                self._gated("event", lambda: post(job, type_, reason, message, name=name, at=at))
            )
        except NotLeading:
            return False  # logged, never raised (k8s.KubeApi.post_event)


@dataclass
class Skew:
    offset: float = 0.0  # the wall clock, ahead of the world's by this
    rate: float = 1.0  # the monotonic clock's seconds per world second


class Replica:
    """One operator pod: its current process (`generation`), candidate or leader."""

    def __init__(self, world: World, config: OperatorSettings, name: str, skew: Skew) -> None:
        self.world, self.config, self.name, self.skew = world, config, name, skew
        self.api = SimApi(world.server)  # its own network path (partitions)
        self.generation = 0
        self.alive = False
        self.paused_until = -1.0
        self.leadership: Leadership | None = None
        self.operator: Operator | None = None
        self.timers: dict[str, int] = {}  # per job: the daemon's current sleep

    # --- its clocks ----------------------------------------------------------------------

    def wall(self) -> datetime:
        return self.world.clock() + timedelta(seconds=self.skew.offset)

    def mono(self) -> float:
        return self.world.clock.t * self.skew.rate

    def world_delay(self, seconds: float) -> float:
        """World seconds until this replica's monotonic clock has advanced by `seconds`."""
        return max(seconds, 0.0) / self.skew.rate

    # --- its process -----------------------------------------------------------------------

    def start(self) -> None:
        """A new process: a candidate with nothing in memory."""
        self.generation += 1
        self.alive = True
        self.operator = None
        self.timers = {}
        self.leadership = Leadership(
            self.api,  # type: ignore[arg-type]  # the KubeApi seam
            namespace=NAMESPACE,
            name=LEASE,
            identity=f"{self.name}-{self.generation}",
            timing=TIMING,
            gate=Gate(self.mono),
            on_lost=self._lost,
            clock=self.mono,
        )
        self.world.log(f"operator {self.name} process {self.generation} started (candidate)")
        self.at(0.0, "lease-try")

    def stop(self, why: str) -> None:
        """The process ends; its kubelet starts the next one after a restart delay."""
        if not self.alive:
            return
        self.alive = False
        self.operator = None
        self.world.log(f"operator {self.name} process {self.generation} ended: {why}")
        self.world.at(self.world.delay(1, 10), "replica-start", self.name)

    def _lost(self, reason: str) -> None:  # leadership's on_lost: os._exit(75)
        self.stop(f"leadership lost ({reason})")

    def at(self, seconds: float, kind: str, payload: Any = None) -> None:
        """An event of this process, `seconds` later on its own monotonic clock."""
        self.world.at(self.world_delay(seconds), kind, (self.name, self.generation, payload))

    # --- the election's loops ----------------------------------------------------------------

    def try_lease(self) -> None:
        """leadership.acquire's loop, one look per event."""
        assert self.leadership is not None
        try:
            wait = self.leadership._try()
        except OperatorError:
            wait = TIMING.retry_period_seconds
        if wait is not None:
            self.at(wait, "lease-try")
            return
        self.leadership.leading_since = self.mono()
        gated = GatedApi(self.api, self.leadership.gate, self.leadership.identity)
        self.operator = Operator(
            self.world,
            self.config,
            gated,
            self.wall,
            lambda job: self.at(0.1, "reconcile", (job, None)),
        )
        self.world.log(f"operator {self.name}-{self.generation} leads")
        self.at(TIMING.retry_period_seconds, "lease-renew")
        self.at(self.leadership.gate.until - self.mono(), "lease-watchdog")
        self.leadership._event("Normal", "LeaderElected", f"{self.name} leads")
        self.world.at(0.0, "wake", "")  # every job: its daemon starts with the operator

    def renew(self) -> None:
        """leadership._renew's loop body."""
        assert self.leadership is not None
        if self.leadership._lost.is_set():
            return
        try:
            if self.leadership._try() is not None:
                self.leadership._lose("the Lease changed hands")
                return
        except OperatorError:
            pass  # the deadline decides
        self.at(TIMING.retry_period_seconds, "lease-renew")

    def watchdog(self) -> None:
        """leadership._watchdog: the term ends the instant the renew deadline passes."""
        assert self.leadership is not None
        left = self.leadership.gate.until - self.mono()
        if left <= 1e-6:
            deadline = TIMING.renew_deadline_seconds
            self.leadership._lose(f"no renewal within renewDeadlineSeconds={deadline:g}")
        elif not self.leadership._lost.is_set():
            self.at(left, "lease-watchdog")

    def release(self) -> None:
        """SIGTERM (an upgrade's rolling update): the Lease given up after the writes in
        flight, the process ends."""
        if self.leadership is not None and self.alive:
            self.leadership.release(wait_seconds=TIMING.renew_deadline_seconds)
        self.stop("terminated (upgrade)")

    def leads(self) -> bool:
        return self.alive and self.operator is not None
