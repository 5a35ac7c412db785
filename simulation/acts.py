"""The user's acts and the world's faults a history's plan draws (history.py plays them):
what each one does to the simulated cluster."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from spark_app.api.exit_codes import EXIT_INVALID, REFUSED_MARK, RUNNER_EXIT_REASONS
from streamingjob_operator.api.models import API_GROUP, API_VERSION
from streamingjob_operator.api.naming import FINALIZER

from . import offsets
from .invariants import Checker
from .replicas import Replica
from .world import NAMESPACE, OOM, World


class History(Protocol):
    """What the acts act on: a history's world, replicas and checker (history.py plays them)."""

    world: World
    checker: Checker
    replicas: dict[str, Replica]
    rng: random.Random
    uids: int
    pause_at_handover: float

    def base_spec(self) -> dict[str, Any]: ...

    def leader(self) -> Replica | None: ...


@dataclass(frozen=True)
class Act:
    at: float
    name: str
    arg: int = 0

    def __str__(self) -> str:
        return f"{self.at:7.1f}s {self.name}" + (f" {self.arg}" if self.arg else "")


NAME = "orders"
# Where an armed driver crash strikes: the stage it is about to run ("plan": after the
# commit-log entry, before the batch's group commit; "dead-letter": before the batch's
# dead-letter transactions, "dead-letter+1": between two of them (world._crashes_now);
# "sink": after them, before the sink and commits/N; "sink+1": between two of the
# exactly-once Kafka sink's transactions)
CRASH_STAGES = (
    "sink",
    "commit",
    "plan",
    "start",
    "catch-up",
    "resolve",
    "restore",
    "final-commit",
    "dead-letter",
    "dead-letter+1",
    "sink+1",
)
# How a driver exits (code, termination reason, message): every exit the operator tells
# apart (spark_app/kafka/config.py; restarts.failure_of). The runner's own causes come at its
# start, before any read; a failure of the query or an OOM kill anywhere.
EXITS = (
    (1, "", "py4j: the query failed"),
    (EXIT_INVALID, "", f"{REFUSED_MARK}spec.job.sql: no such column"),
    (EXIT_INVALID, "", "usage: runner.py: unrecognized arguments"),
    *((code, "", "") for code in sorted(RUNNER_EXIT_REASONS) if code != EXIT_INVALID),
    (137, OOM, ""),
)
# In which API call an operator crash strikes (cluster.SimApi's names)
CRASH_CALLS = ("status job", "create pod", "delete pod", "patch configmap key go.json", "apply")

SPEC_ACTS: dict[str, Callable[[dict[str, Any], int], object]] = {
    "redeploy": lambda s, _: s.update(redeployNonce=s.get("redeployNonce", 0) + 1),
    "restart": lambda s, _: s.update(restartNonce=s.get("restartNonce", 0) + 1),
    "suspend": lambda s, _: s.update(suspend=True),
    "resume": lambda s, _: s.update(suspend=False),
    "upgrade-mode": lambda s, _: s.update(
        upgradeMode="last-state" if s["upgradeMode"] == "stateless" else "stateless"
    ),
    "handover-mode": lambda s, _: s["handover"].update(
        mode="warm" if s["handover"]["mode"] == "cold" else "cold"
    ),
    "change-job": lambda s, arg: s.update(sparkConf={"spark.sim.change": str(arg)}),
    # kubectl scale (the scale subresource): a restart in the epoch with this many executors
    "scale": lambda s, arg: s.setdefault("executor", {}).update(instances=1 + arg % 4),
    "autoscaler": offsets.autoscaler,
    "fail-on-data-loss": lambda s, _: s["job"]["source"].update(
        failOnDataLoss=not s["job"]["source"].get("failOnDataLoss", True)
    ),
    "standby": lambda s, _: s.update(
        standby={"enabled": not (s.get("standby") or {}).get("enabled", False)}
    ),
}


def later(name: str, at: float) -> Act:
    """An act that follows from another one (not in the plan: shrinking drops it with it)."""
    return Act(round(at, 1), name)


def job(h: History) -> dict[str, Any] | None:
    return h.world.server.get("StreamingJob", NAMESPACE, NAME)


def edit(h: History, change: Callable[[dict[str, Any]], object]) -> bool:
    """kubectl edit: a spec change, a new generation, the operator woken."""
    body = job(h)
    if body is None or body["metadata"].get("deletionTimestamp") or h.world.server.down():
        return False
    change(body["spec"])
    body["metadata"]["generation"] += 1
    h.world.server.bump(body)
    h.world.at(h.world.delay(0.1, 1), "wake", NAME)
    return True


# The acts that set a new target: a job held Invalid by the runner's refusal starts again
NEW_TARGET = frozenset({"redeploy", "restart", "change-job", "change-group", "fail-on-data-loss"})


def act(h: History, a: Act) -> None:
    w, arg = h.world, a.arg
    if a.name in SPEC_ACTS:
        if edit(h, lambda s: SPEC_ACTS[a.name](s, arg)) and a.name in NEW_TARGET:
            w.refused.clear()  # a write refused (the API server down) changes nothing
    elif a.name == "change-group":
        group = f"orders-group-{arg % 3}"
        if edit(h, lambda s: s["job"]["source"].update(groupId=group)):
            w.refused.clear()
            h.checker.group_changed(group, job(h) or {})
    elif a.name == "create":
        create(h)
    elif a.name == "delete":
        delete(h)
    elif a.name == "offsets-action":
        offsets_action(h, arg)
    elif a.name == "produce":
        w.kafka.produce(arg % w.kafka.partitions, 1 + arg % 20)
    elif a.name in OPERATOR_FAULTS:
        OPERATOR_FAULTS[a.name](h, arg)
    else:
        world_fault(h, a.name, arg)


def world_fault(h: History, name: str, arg: int) -> None:
    w = h.world
    if name == "crash-driver":  # at the next driver's arrival at a stage
        w.crash_at_stage = CRASH_STAGES[arg % len(CRASH_STAGES)]
        w.crash_exit = (1, "", "")
    elif name == "driver-exit":  # the next driver exits so (the runner's causes at its start)
        w.crash_exit = EXITS[arg % len(EXITS)]
        code, reason, _ = w.crash_exit
        early = code in RUNNER_EXIT_REASONS and reason != OOM
        w.crash_at_stage = "start" if early else CRASH_STAGES[arg // 7 % len(CRASH_STAGES)]
    elif name == "commit-fails":
        w.commit_failures = 1 + arg % 3
    elif name == "pull-fails":
        w.pull_fail_until = w.clock.t + 10 + arg % 300
    elif name == "node-lost":
        busy = sorted({d.node for d in w.drivers.values() if d.alive})
        if busy:
            w.kill_node(busy[arg % len(busy)])
    elif name == "node-freeze":
        busy = sorted({d.node for d in w.drivers.values() if d.alive and not w.frozen(d.node)})
        if busy:
            w.freeze_node(busy[arg % len(busy)], 20 + arg % 100)
    elif name == "api-outage":
        if not w.server.down():
            w.api_down_at = w.clock.t
        w.server.faults.outage_until = w.clock.t + 5 + arg % 120
    elif name == "watch-stall":
        w.watch_stalled_until = w.clock.t + 5 + arg % 60
    elif name == "retention":  # the partition keeps only its newest records (0 to 11)
        w.kafka.retain(arg % w.kafka.partitions, arg // 7 % 12)
    elif name == "leader-election":  # a new leader; unclean (0 to 7 records lost) or clean
        w.kafka.elect(arg % w.kafka.partitions, arg // 7 % 8)
    elif name == "table-maintenance":  # compaction and snapshot expiry beside the job
        w.sinks.iceberg.maintain()


# --- the operator's replicas -------------------------------------------------------------


def _operator_crash(h: History, arg: int) -> None:
    """In the next call of a kind (by whichever replica makes it), before or after it."""
    h.world.server.faults.crash_in = CRASH_CALLS[arg % len(CRASH_CALLS)]
    h.world.server.faults.crash_after = arg % 2 == 0


def _leader_pause(h: History, arg: int) -> None:
    """The leader stalls (a long GC pause, a starved CPU): its events wait; beyond the
    lease duration the other replica takes over meanwhile."""
    leader = h.leader()
    if leader is not None:
        leader.paused_until = h.world.clock.t + 3 + arg % 30
        h.world.log(f"operator {leader.name} paused until {leader.paused_until:.1f}s")


def _leader_partition(h: History, arg: int) -> None:
    """The leader cut off the API server (the other replica still reaches it): its renewals
    fail, its watchdog ends the term at the renew deadline."""
    leader = h.leader()
    if leader is not None:
        leader.api.cut_until = h.world.clock.t + 3 + arg % 40
        h.world.log(f"operator {leader.name} cut off until {leader.api.cut_until:.1f}s")


def _upgrade(h: History, arg: int) -> None:
    """A new operator image, rolled out one replica after the other: each gets SIGTERM
    (the leader releases the Lease) and comes back as a new process with empty memory."""
    first, second = sorted(h.replicas.values(), key=lambda r: r.leads() != bool(arg % 2))
    h.world.log("ACT operator upgrade rolls out")
    first.release()
    h.world.at(h.world.delay(5, 40), "replica-upgrade", second.name)


def _handover_leader_change(h: History, arg: int) -> None:
    """Armed: the leader stalls past the lease duration at the next look at a warm
    hand-over under way (a change of leader in its middle)."""
    h.pause_at_handover = 16 + arg % 20


OPERATOR_FAULTS: dict[str, Callable[[History, int], None]] = {
    "operator-crash": _operator_crash,
    "leader-pause": _leader_pause,
    "leader-partition": _leader_partition,
    "operator-upgrade": _upgrade,
    "handover-leader-change": _handover_leader_change,
}


# --- the job itself ----------------------------------------------------------------------


def create(h: History) -> None:
    w = h.world
    if job(h) is not None or w.server.down():
        return
    h.uids += 1
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "StreamingJob",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": str(uuid.UUID(int=h.rng.getrandbits(128), version=4)),
            "generation": 1,
            "finalizers": [FINALIZER],
        },
        "spec": h.base_spec(),
        "status": {},
    }
    w.server.put(body)
    h.checker.created(body)
    w.at(w.delay(0.1, 1), "wake", NAME)


def delete(h: History) -> None:
    body = job(h)
    w = h.world
    if body is None or body["metadata"].get("deletionTimestamp") or w.server.down():
        return
    body["metadata"]["deletionTimestamp"] = "deleting"
    w.server.bump(body)
    w.at(w.delay(0.1, 1), "wake", NAME)


def offsets_action(h: History, arg: int) -> None:
    """kubectl patch spec.offsetsAction (a new nonce): two times in three with a suspend in
    the same patch and a resume a while after it; else as the job is (refused while it
    runs: the nonce is consumed)."""
    with_suspend = arg % 3 != 0

    def change(spec: dict[str, Any]) -> None:
        nonce = (spec.get("offsetsAction") or {}).get("nonce", 0) + 1
        spec["offsetsAction"] = {"nonce": nonce, **offsets.action(arg, h.world.kafka.partitions)}
        if with_suspend:
            spec["suspend"] = True

    if edit(h, change) and with_suspend:
        h.world.at(h.world.delay(20, 120), "act", later("resume", h.world.clock.t))
