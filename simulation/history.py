"""One history: a seed's plan of user acts and faults, played against the world and the
operator, with the invariants (invariants.py) checked after every event.

The plan is drawn from the seed first, as a list of (time, act); the world's own delays
come from a second stream. A shrunk plan (a subset of the acts) replays the same way."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamingjob_operator.io.errors import OperatorError

from . import acts
from .acts import NAME, Act
from .cluster import Crash
from .invariants import Checker, Violation
from .nodes import LEAST_GRACE
from .operator import settings
from .replicas import MAX_DRIFT, MAX_OFFSET, Replica, Skew
from .world import World

GRACES = (LEAST_GRACE, 40.0)  # nodeLostGraceSeconds: the least the operator accepts, the chart's
ACTS = (
    "create",
    "delete",
    "redeploy",
    "restart",
    "suspend",
    "resume",
    "upgrade-mode",
    "handover-mode",
    "change-job",
    "change-group",
    "scale",
    "standby",
    "fail-on-data-loss",
    "autoscaler",
    "offsets-action",
    "produce",
    "crash-driver",
    "driver-exit",
    "commit-fails",
    "pull-fails",
    "node-lost",
    "node-freeze",
    "api-outage",
    "watch-stall",
    "table-maintenance",
    "retention",
    "leader-election",
    *acts.OPERATOR_FAULTS,
)
FAULTS = frozenset(
    {
        "crash-driver",
        "driver-exit",
        "commit-fails",
        "pull-fails",
        "node-lost",
        "node-freeze",
        "api-outage",
        "watch-stall",
        "table-maintenance",
        "retention",
        "leader-election",
    }
    | set(acts.OPERATOR_FAULTS)
)
# How often each act is drawn (the rest: 1)
WEIGHTS = {"produce": 6, "crash-driver": 2, "redeploy": 2, "create": 2}


@dataclass
class Outcome:
    seed: int
    plan: list[Act]
    steps: int
    violations: list[Violation] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)


def plan(seed: int, acts: int = 24, span: float = 600.0) -> list[Act]:
    rng = random.Random(f"plan-{seed}")
    names = [n for n in ACTS for _ in range(WEIGHTS.get(n, 1))]
    drawn = [Act(0.0, "create", rng.randrange(2))]
    for _ in range(acts):
        # a third of the acts close behind another one: races of two acts
        at = (
            rng.uniform(1, span)
            if rng.random() < 0.67
            else rng.choice(drawn).at + rng.uniform(0.1, 5)
        )
        drawn.append(Act(round(at, 1), rng.choice(names), rng.randrange(1000)))
    return sorted(drawn, key=lambda a: a.at)


SINKS: dict[str, dict[str, Any]] = {
    "kafka": {"format": "kafka", "topic": "orders-out"},
    "iceberg": {
        "format": "iceberg",
        "table": "lake.orders",
        "catalog": {
            "type": "rest",
            "uri": "http://catalog.lake.svc:8181",
            "warehouse": "s3a://lake/w",
        },
    },
}


def base_spec(rng: random.Random, sink: str) -> dict[str, Any]:
    return {
        "image": "repo/streamingjob:1",
        "job": {
            "source": {
                "bootstrapServers": "kafka:9092",
                "subscribe": ["orders"],
                "groupId": "orders-group",
                "maxOffsetsPerTrigger": 7,
            },
            "sink": SINKS.get(sink) or {"format": sink, "path": "s3a://lake/orders"},
        },
        "checkpoint": {"location": "s3a://ckpt/base", "deleteOnJobDeletion": rng.random() < 0.5},
        "upgradeMode": rng.choice(["stateless", "last-state"]),
        "handover": {"mode": rng.choice(["cold", "warm"]), "readyTimeoutSeconds": 60},
        "restartPolicy": {
            "maxRestarts": 1000,
            "windowSeconds": 600,
            "backoff": {"baseSeconds": 1, "capSeconds": 8},
            "stableRunSeconds": 60,
        },
    }


class History:
    def __init__(self, seed: int, acts: list[Act]) -> None:
        self.seed = seed
        self.acts = acts
        self.world = World(seed)
        self.rng = random.Random(f"acts-{seed}")
        self.sink = random.Random(f"sink-{seed}").choice(["delta", "parquet", "kafka"])
        if self.sink == "delta" and random.Random(f"table-{seed}").random() < 0.5:
            self.sink = "iceberg"  # the other table sink (a seed's other draws unchanged)
        # the least grace the operator accepts ends before the node lifecycle controller's
        # (40 s): the scheduler may still place pods on a node the operator counts lost
        self.config = settings(random.Random(f"grace-{seed}").choice(GRACES))
        self.world.server.on_create = lambda pod: self.world.at(
            self.world.delay(0.2, 2), "kubelet", pod["metadata"]["name"]
        )
        skew = random.Random(f"skew-{seed}")
        self.replicas = {
            name: Replica(
                self.world,
                self.config,
                name,
                Skew(
                    round(skew.uniform(-MAX_OFFSET, MAX_OFFSET), 2),
                    1 + round(skew.uniform(-MAX_DRIFT, MAX_DRIFT), 5),
                ),
            )
            for name in ("op-a", "op-b")
        }
        for replica in self.replicas.values():
            replica.start()
        self.pause_at_handover = 0.0  # armed: the leader stalls this long at a hand-over
        self.unavailable_at = 0.0  # the last moment without an API server or a leader
        self.checker = Checker(self.world, NAME, lambda: self.unavailable_at)
        self.world.offsets_moved = self.checker.offsets_moved
        self.uids = 0
        self.steps = 0

    def base_spec(self) -> dict[str, Any]:
        return base_spec(self.rng, self.sink)

    def acting(self) -> bool:
        """A leader that runs and reaches the API server."""
        t = self.world.clock.t
        return any(
            r.leads() and r.paused_until <= t and r.api.cut_until <= t
            for r in self.replicas.values()
        )

    def leader(self) -> Replica | None:
        """The replica that believes it leads (during a stall, two may)."""
        leading = [r for r in self.replicas.values() if r.leads()]
        return max(leading, key=lambda r: r.paused_until <= self.world.clock.t, default=None)

    def run(self, quiet: float = 900.0, max_steps: int = 20_000) -> Outcome:
        w = self.world
        for act in self.acts:
            w.at(act.at, "act", act)
        end = (self.acts[-1].at if self.acts else 0.0) + 1.0
        w.at(end + quiet, "converged")  # the faults end with the last act
        w.at(2.0, "check-nodes")
        outcome = Outcome(self.seed, self.acts, 0, trace=w.trace)
        while w.queue and self.steps < max_steps:
            event = w.pop()
            if event.kind == "converged":
                outcome.violations += self.checker.converged()
                break
            self.steps += 1
            self.handle(event.kind, event.arg)
            if w.server.down() or not self.acting():
                self.unavailable_at = w.clock.t
            if found := self.checker.check():
                outcome.violations += found
                break
        outcome.steps = self.steps
        return outcome

    # --- events ------------------------------------------------------------------------

    def handle(self, kind: str, arg: Any) -> None:
        w = self.world
        if kind == "act":
            w.log(f"ACT {arg}")
            acts.act(self, arg)
        elif kind == "wake":  # a watch event: every running operator sees it
            for replica in self.replicas.values():
                if replica.leads():
                    self.on_replica(replica, "reconcile", (arg or NAME, None))
        elif kind == "renew":
            w.renew(arg)
        elif kind == "lease":  # a node's Lease renewed, through every operator's watch
            node = w.nodes[arg["metadata"]["name"]]
            node.seen = max(node.seen, float(arg["spec"]["renewTime"].rpartition("#")[2]))
            for replica in self.replicas.values():
                if replica.leads():
                    self.on_replica(replica, "node-lease", arg)
        elif kind == "pod-deleted":  # its last state, through every operator's pod watch
            for replica in self.replicas.values():
                if replica.leads():
                    self.on_replica(replica, "driver-pod-event", arg)
        elif kind == "check-nodes":
            w.at(2.0, "check-nodes")
            w.node_lifecycle()
            for replica in self.replicas.values():
                if replica.leads() and replica.paused_until <= w.clock.t:
                    assert replica.operator is not None
                    replica.operator.check_nodes()
        elif kind == "replica-start":
            self.replicas[arg].start()
        elif kind == "replica-upgrade":
            self.replicas[arg].release()
        elif kind in REPLICA_EVENTS:
            name, generation, payload = arg
            replica = self.replicas[name]
            if replica.alive and replica.generation == generation:
                self.on_replica(replica, kind, payload)
        elif kind == "cleanup":
            w.run_cleanup_jobs()
        else:
            getattr(w, kind.replace("-", "_"))(arg)

    def on_replica(self, replica: Replica, kind: str, payload: Any) -> None:
        """An event of one operator process; a stalled one takes it up when it resumes."""
        w = self.world
        if replica.paused_until > w.clock.t:
            w.at(
                replica.paused_until - w.clock.t, kind, (replica.name, replica.generation, payload)
            )
        elif kind == "reconcile":
            self.reconcile(replica, payload)
        elif kind == "node-lease":
            if replica.operator is not None:
                replica.operator.lease(payload)
        elif kind == "driver-pod-event":
            if replica.operator is not None:
                replica.operator.pod_deleted(payload)
        else:
            LEASE_TIMERS[kind](replica)

    def reconcile(self, replica: Replica, call: tuple[str, int | None]) -> None:
        """The job's daemon (handlers.keep_reconciled): a reconcile when woken (`token`
        None) or when its sleep ends; a wake-up cuts the sleep short (a later sleep replaces
        it)."""
        (name, token), w, operator = call, self.world, replica.operator
        if operator is None or (token is not None and token != replica.timers.get(name)):
            return
        try:
            delay = operator.reconcile(name)
        except Crash as crash:
            w.server.faults.crash_in = ""
            replica.stop(f"crashed in: {crash}")
            return
        except OperatorError as exc:  # kopf retries a handler that raised (NotLeading)
            w.log(f"operator {replica.name}: reconcile failed: {exc}")
            delay = self.config.fencing_poll_seconds
        token = replica.timers[name] = replica.timers.get(name, 0) + 1
        if delay is not None:  # None: the job is gone, and its daemon with it
            replica.at(delay, "reconcile", (name, token))
        if w.server.of_kind("Job"):
            w.at(w.delay(3, 60), "cleanup")
        self._maybe_stall(replica)

    def _maybe_stall(self, replica: Replica) -> None:
        """The armed change of leader in the middle of a warm hand-over."""
        status = (acts.job(self) or {}).get("status") or {}
        if self.pause_at_handover and status.get("handover") and replica.leads():
            replica.paused_until = self.world.clock.t + self.pause_at_handover
            self.world.log(f"operator {replica.name} stalls mid hand-over")
            self.pause_at_handover = 0.0


LEASE_TIMERS: dict[str, Callable[[Replica], None]] = {
    "lease-try": Replica.try_lease,
    "lease-renew": Replica.renew,
    "lease-watchdog": Replica.watchdog,
}
REPLICA_EVENTS = {"reconcile", "node-lease", "driver-pod-event", *LEASE_TIMERS}
