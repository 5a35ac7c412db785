"""One history: a seed's plan of user acts and faults, played against the world and the
operator, with the invariants (invariants.py) checked after every event.

The plan is drawn from the seed first, as a list of (time, act); the world's own delays
come from a second stream. A shrunk plan (a subset of the acts) replays the same way."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from streamingjob_operator.api.models import API_GROUP, API_VERSION
from streamingjob_operator.api.naming import FINALIZER

from .cluster import Crash
from .invariants import Checker, Violation
from .operator import Operator, settings
from .world import NAMESPACE, World

NAME = "orders"
GRACE = 40.0
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
    "produce",
    "crash-driver",
    "commit-fails",
    "pull-fails",
    "node-lost",
    "api-outage",
    "watch-stall",
    "operator-crash",
)
FAULTS = frozenset(
    {"crash-driver", "commit-fails", "pull-fails", "node-lost", "api-outage", "watch-stall"}
    | {"operator-crash"}
)
# Where an armed driver crash strikes: the stage it is about to run ("plan": after the
# commit-log entry, before the batch's group commit)
CRASH_STAGES = ("sink", "commit", "plan", "start", "catch-up", "resolve", "restore", "final-commit")
# In which API call an operator crash strikes (cluster.SimApi's names)
CRASH_CALLS = ("status job", "create pod", "delete pod", "patch configmap key go.json", "apply")
# How often each act is drawn (the rest: 1)
WEIGHTS = {"produce": 6, "crash-driver": 2, "redeploy": 2, "create": 2}


@dataclass(frozen=True)
class Act:
    at: float
    name: str
    arg: int = 0

    def __str__(self) -> str:
        return f"{self.at:7.1f}s {self.name}" + (f" {self.arg}" if self.arg else "")


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
            "sink": {"format": sink, "path": "s3a://lake/orders"},
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
        self.sink = random.Random(f"sink-{seed}").choice(["delta", "parquet"])  # one table
        self.config = settings(GRACE)
        self.world.server.on_create = lambda pod: self.world.at(
            self.world.delay(0.2, 2), "kubelet", pod["metadata"]["name"]
        )
        self.operator: Operator | None = Operator(self.world, self.config)
        self.checker = Checker(self.world, NAME)
        self.uids = 0
        self.steps = 0

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
            self.act(arg)
        elif kind in ("reconcile", "wake"):
            self.reconcile(arg)
        elif kind == "renew":
            w.renew(arg)
        elif kind == "lease":
            if self.operator is not None:
                self.operator.lease(arg)
        elif kind == "check-nodes":
            w.at(2.0, "check-nodes")
            w.node_lifecycle()
            if self.operator is not None:
                self.operator.check_nodes()
        elif kind == "operator-start":
            self.operator = Operator(w, self.config)
            w.log("operator started")
            w.at(0.0, "reconcile", NAME)
        elif kind == "cleanup":
            w.run_cleanup_jobs()
        else:
            getattr(w, kind.replace("-", "_"))(arg)

    def reconcile(self, name: str) -> None:
        if self.operator is None or not name:
            return
        w = self.world
        try:
            delay = self.operator.reconcile(name)
        except Crash as crash:
            w.log(f"operator crashed in: {crash}")
            self.operator = None
            w.server.faults.crash_in = ""
            w.at(w.delay(2, 15), "operator-start")
            return
        if delay is not None:
            w.at(delay, "reconcile", name)
        if w.server.of_kind("Job"):
            w.at(w.delay(3, 60), "cleanup")

    # --- user acts and faults ----------------------------------------------------------

    def job(self) -> dict[str, Any] | None:
        return self.world.server.get("StreamingJob", NAMESPACE, NAME)

    def edit(self, change: Any) -> bool:
        """kubectl edit: a spec change, a new generation, the operator woken."""
        job = self.job()
        if job is None or job["metadata"].get("deletionTimestamp") or self.world.server.down():
            return False
        change(job["spec"])
        job["metadata"]["generation"] += 1
        self.world.server.bump(job)
        self.world.at(self.world.delay(0.1, 1), "wake", NAME)
        return True

    def act(self, act: Act) -> None:
        w, arg = self.world, act.arg
        spec_acts = {
            "redeploy": lambda s: s.update(redeployNonce=s.get("redeployNonce", 0) + 1),
            "restart": lambda s: s.update(restartNonce=s.get("restartNonce", 0) + 1),
            "suspend": lambda s: s.update(suspend=True),
            "resume": lambda s: s.update(suspend=False),
            "upgrade-mode": lambda s: s.update(
                upgradeMode="last-state" if s["upgradeMode"] == "stateless" else "stateless"
            ),
            "handover-mode": lambda s: s["handover"].update(
                mode="warm" if s["handover"]["mode"] == "cold" else "cold"
            ),
            "change-job": lambda s: s.update(sparkConf={"spark.sim.change": str(arg)}),
        }
        if act.name in spec_acts:
            self.edit(spec_acts[act.name])
        elif act.name == "change-group":
            group = f"orders-group-{arg % 3}"
            if self.edit(lambda s: s["job"]["source"].update(groupId=group)):
                self.checker.group_changed(group, self.job() or {})
        elif act.name == "create":
            self.create()
        elif act.name == "delete":
            self.delete()
        elif act.name == "produce":
            w.kafka.produce(arg % w.kafka.partitions, 1 + arg % 20)
        elif act.name == "crash-driver":  # at the next driver's arrival at a stage
            w.crash_at_stage = CRASH_STAGES[arg % len(CRASH_STAGES)]
        elif act.name == "commit-fails":
            w.commit_failures = 1 + arg % 3
        elif act.name == "pull-fails":
            w.pull_fail_until = w.clock.t + 10 + arg % 300
        elif act.name == "node-lost":
            busy = sorted({d.node for d in w.drivers.values() if d.alive})
            if busy:
                w.kill_node(busy[arg % len(busy)])
        elif act.name == "api-outage":
            w.server.faults.outage_until = w.clock.t + 5 + arg % 120
        elif act.name == "watch-stall":
            w.watch_stalled_until = w.clock.t + 5 + arg % 60
        elif act.name == "operator-crash":  # in the next call of a kind, before or after it
            w.server.faults.crash_in = CRASH_CALLS[arg % len(CRASH_CALLS)]
            w.server.faults.crash_after = arg % 2 == 0

    def create(self) -> None:
        w = self.world
        if self.job() is not None or w.server.down():
            return
        self.uids += 1
        job = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": "StreamingJob",
            "metadata": {
                "name": NAME,
                "namespace": NAMESPACE,
                "uid": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
                "generation": 1,
                "finalizers": [FINALIZER],
            },
            "spec": base_spec(self.rng, self.sink),
            "status": {},
        }
        w.server.put(job)
        self.checker.created(job)
        w.at(w.delay(0.1, 1), "wake", NAME)

    def delete(self) -> None:
        job = self.job()
        w = self.world
        if job is None or job["metadata"].get("deletionTimestamp") or w.server.down():
            return
        job["metadata"]["deletionTimestamp"] = "deleting"
        w.server.bump(job)
        w.at(w.delay(0.1, 1), "wake", NAME)
