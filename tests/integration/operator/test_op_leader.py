"""Leader election on the real API server: replicas are real `streamingjob-operator`
processes competing for one Lease; the test kills, stops and freezes the leader.

The settings are short (Lease 3 s, renew deadline 2 s, retry 0.25 s): the same code paths as
the defaults, faster.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devbed.polling import PATIENCE
from streamingjob_operator.leadership import EXIT_LEADERSHIP_LOST
from tests.integration.operator.kube_helpers import (
    OPERATOR_ENV,
    DriverWatch,
    Kube,
    job_spec,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LEASE_SECONDS = 3.0
ELECTION_ENV = {
    "STREAMINGJOB_LEADER_ELECTION": "true",
    "STREAMINGJOB_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
    "STREAMINGJOB_RENEW_DEADLINE_SECONDS": "2",
    "STREAMINGJOB_RETRY_PERIOD_SECONDS": "0.25",
    "STREAMINGJOB_HEALTH_PORT": "0",
}


class Replica:
    """One operator replica: `python -m streamingjob_operator` in its own session."""

    def __init__(self, kubeconfig: Path, lease_ns: str, lease: str, identity: str, logs: Path):
        self.identity = identity
        self.log = logs / f"{identity}.log"
        env = {
            **os.environ,
            **OPERATOR_ENV,
            **ELECTION_ENV,
            "KUBECONFIG": str(kubeconfig),
            "STREAMINGJOB_LEASE_NAMESPACE": lease_ns,
            "STREAMINGJOB_LEASE_NAME": lease,
            "STREAMINGJOB_LEADER_IDENTITY": identity,
        }
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streamingjob_operator"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait(10)


class Election:
    """The replicas of one test and their Lease."""

    def __init__(self, kube: Kube, apiserver: Any, ns: str, tmp_path: Path) -> None:
        self.kube, self.apiserver, self.ns, self.tmp = kube, apiserver, ns, tmp_path
        self.lease = f"operator-{uuid.uuid4().hex[:6]}"
        self.coordination = client.CoordinationV1Api(kube.core.api_client)
        self.replicas: list[Replica] = []

    def start(self, identity: str) -> Replica:
        replica = Replica(self.apiserver.kubeconfig, self.ns, self.lease, identity, self.tmp)
        self.replicas.append(replica)
        return replica

    def lease_spec(self) -> client.V1LeaseSpec | None:
        try:
            return self.coordination.read_namespaced_lease(self.lease, self.ns).spec
        except client.ApiException:
            return None

    def holder(self) -> str | None:
        spec = self.lease_spec()
        return spec.holder_identity if spec else None

    def lease_events(self) -> list[tuple[str, str]]:
        """(reason, message) of the Events on the Lease, sorted (timestamps are whole seconds)."""
        return sorted(
            (e.reason, e.message)
            for e in self.kube.events(self.ns)
            if e.involved_object.kind == "Lease" and e.involved_object.name == self.lease
        )

    def wait_for_holder(self, pick: Any, timeout: float = 30) -> str:
        return wait_for(lambda: (h := self.holder()) and pick(h) and h, timeout, "a leader")

    def close(self) -> None:
        for replica in self.replicas:
            replica.stop()


@pytest.fixture
def election(kube: Kube, apiserver, tmp_path: Path):
    e = Election(kube, apiserver, kube.namespace(), tmp_path)
    try:
        yield e
    finally:
        e.close()


def test_one_replica_acts_and_a_stopped_leader_hands_over_at_once(kube: Kube, election):
    ns = election.ns
    a = election.start("replica-a")
    election.wait_for_holder(lambda h: h == "replica-a")
    b = election.start("replica-b")
    wait_for(lambda: "waits to lead" in b.text(), 30, "b waiting")
    kube.create_job(ns, "j", job_spec())
    wait_for(lambda: kube.driver_names(ns) == ["j-e1-a1-driver"], 30, "a launches")
    assert "first reconcile of" not in b.text()  # b waits and does nothing

    a.signal(signal.SIGTERM)  # a pod deletion
    assert a.proc.wait(30) == 0
    assert "released the Lease" in a.text()
    election.wait_for_holder(lambda h: h == "replica-b")
    wait_for(lambda: f"first reconcile of {ns}/j as leader" in b.text(), 30, "b reconciles")
    spec = election.lease_spec()
    assert spec is not None and spec.lease_transitions == 1
    assert election.lease_events() == [
        ("LeaderElected", "replica-a leads"),
        ("LeaderElected", "replica-b leads"),
        ("LeaderReleased", "replica-a released the Lease"),
    ]
    # b found a's driver and kept it: nothing relaunched
    kube.set_terminated(ns, "j-e1-a1-driver", 1)
    wait_for(lambda: "j-e1-a2-driver" in kube.driver_names(ns), 30, "b relaunches")


def test_a_killed_leader_is_replaced_only_after_its_lease_expired(kube: Kube, election):
    a = election.start("replica-a")
    election.wait_for_holder(lambda h: h == "replica-a")
    b = election.start("replica-b")
    wait_for(lambda: "waits to lead" in b.text(), 30, "b waiting")
    a.signal(signal.SIGKILL)  # no release: b must wait out the Lease
    killed = time.monotonic()
    election.wait_for_holder(lambda h: h == "replica-b")
    assert time.monotonic() - killed >= LEASE_SECONDS - 0.25  # b's first look may precede the kill


def test_killing_or_freezing_the_leader_at_random_never_gives_two_drivers(kube: Kube, election):
    """Two replicas always up; drivers keep failing; the leader is SIGKILLed or frozen
    (SIGSTOP, longer than its Lease: a GC pause, a stalled VM) at random moments. A frozen
    leader wakes after another took over: it must refuse its writes and exit by itself."""
    ns, rng = election.ns, random.Random(11)
    # the plan is drawn apart from the kubelet's draws, whose number depends on timing: every
    # run kills three leaders and freezes three (stop 57's CI drew six kills, froze none)
    plan = ["kill", "freeze"] * 3
    random.Random(11).shuffle(plan)
    jobs = [f"h{i}" for i in range(4)]
    counter = iter(range(1000))
    up = {r.identity: r for r in (election.start(f"r{next(counter)}") for _ in range(2))}
    frozen_exits: list[int | None] = []
    frozen: list[str] = []  # the frozen leaders
    with DriverWatch(kube, ns) as w:
        for job in jobs:
            kube.create_job(ns, job, job_spec())
        for act in plan:
            leader = up[election.wait_for_holder(lambda h: h in up)]
            created = len(w.created)
            until = time.monotonic() + rng.uniform(1.0, 3.0)
            while time.monotonic() < until or len(w.created) == created:
                for pod in kube.pods(ns, "driver"):  # play the kubelet: drivers keep failing
                    if pod.status.phase == "Pending" and rng.random() < 0.3:
                        kube.set_terminated(ns, pod.metadata.name, rng.choice([1, 137]))
                time.sleep(0.1)
                assert time.monotonic() < until + 30 * PATIENCE, "the leader launched nothing"
            del up[leader.identity]
            if act == "kill":
                leader.stop()
            else:
                leader.signal(signal.SIGSTOP)
                frozen.append(leader.identity)
                successor = up[election.wait_for_holder(lambda h: h in up)]
                wait_for(lambda r=successor: "first reconcile of" in r.text(), 30, "takes over")
                leader.signal(signal.SIGCONT)  # wakes up past its deadline
                try:
                    frozen_exits.append(leader.proc.wait(30 * PATIENCE))
                except subprocess.TimeoutExpired:
                    frozen_exits.append(None)
                    leader.stop()
                assert "leadership lost" in leader.text()
            fresh = election.start(f"r{next(counter)}")
            up[fresh.identity] = fresh
        # the last round's leader too is replaced (a SIGKILLed one only once its Lease
        # expired) before the end state is judged, under the leader that then holds it
        last = up[election.wait_for_holder(lambda h: h in up)]
        wait_for(lambda: "first reconcile of" in last.text(), 30, "the last successor takes over")

        def settled() -> bool:
            per_job: dict[str, list[client.V1Pod]] = defaultdict(list)
            for pod in kube.pods(ns, "driver"):
                if pod.status.phase == "Pending":
                    per_job[pod.metadata.labels["sparkkafka.dev/job"]].append(pod)
            return all(len(per_job[j]) == 1 for j in jobs)

        wait_for(settled, 60, "every job with exactly one live driver")
    assert all(w.max_live[j] == 1 for j in jobs), dict(w.max_live)
    assert all(code == EXIT_LEADERSHIP_LOST for code in frozen_exits), frozen_exits
    lost = [message for reason, message in election.lease_events() if reason == "LeaderLost"]
    # each frozen leader said so on waking; a live leader starved past its 2 s renew deadline
    # on a loaded host steps down and says so as well (CI run 77, beside the e2e tier)
    told = {message.split(" stopped leading")[0] for message in lost}
    assert len(frozen) == 3 and set(frozen) <= told, lost
    spec = election.lease_spec()
    assert spec is not None and spec.lease_transitions >= 6
