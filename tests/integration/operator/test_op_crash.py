"""Crash safety: killing the operator at any point never yields two drivers of one job.

Two ways: deterministic crash points (the real reconcile with an API facade that dies at a
chosen call), and SIGKILL of a real `kopf run` subprocess at random moments while drivers
fail. A watch on pods records every driver's lifetime; two overlapping ones fail the test.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import defaultdict

import pytest
from kubernetes import watch

from streamingjob_operator.k8s import KubeApi
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.settings import OperatorSettings
from tests.integration.operator.kube_helpers import (
    Kube,
    job_spec,
    operator_env,
    running_operator,
    spawn_operator,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class Crash(BaseException):
    """The operator process dies here (BaseException: nothing may catch it)."""


class DriverWatch:
    """Follows driver pods of a namespace through a watch; records the max overlap per job."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.live: dict[str, set[str]] = defaultdict(set)
        self.max_live: dict[str, int] = defaultdict(int)
        self.created: list[str] = []
        self._watch = watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DriverWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._watch.stop()

    def _run(self) -> None:
        try:
            self._follow()
        except Exception:  # the stream ends when the watch is stopped
            if not self._stopped:
                raise

    def _follow(self) -> None:
        stream = self._watch.stream(
            self.kube.core.list_namespaced_pod,
            self.ns,
            label_selector="spark-role=driver",
            timeout_seconds=600,
        )
        for event in stream:
            pod = event["object"]
            job = pod.metadata.labels["sparkkafka.dev/job"]
            name = pod.metadata.name
            if event["type"] == "ADDED":
                self.live[job].add(name)
                self.created.append(name)
                self.max_live[job] = max(self.max_live[job], len(self.live[job]))
            elif event["type"] == "DELETED":
                self.live[job].discard(name)


class CrashingApi(KubeApi):
    """The real API facade, dying at the n-th call of one method (before or after it)."""

    def __init__(self, method: str, after: bool, nth: int = 1) -> None:
        super().__init__()
        self._method, self._after, self._left = method, after, nth
        original = getattr(self, method)

        def wrapper(*args, **kwargs):
            self._left -= 1
            if self._left == 0 and not self._after:
                raise Crash(f"before {method}")
            result = original(*args, **kwargs)
            if self._left == 0 and self._after:
                raise Crash(f"after {method}")
            return result

        setattr(self, method, wrapper)


CRASH_POINTS = [
    ("replace_status", True, 1),  # launch recorded (write-ahead), nothing created yet
    ("apply", True, 2),  # some children created
    ("create_pod", False, 1),  # about to create the pod
    ("create_pod", True, 1),  # pod created, status still says Pending
]


@pytest.mark.parametrize(("method", "after", "nth"), CRASH_POINTS)
def test_crash_during_first_launch(kube: Kube, apiserver, method, after, nth):
    ns = kube.namespace()
    kube.create_job(ns, "c", job_spec())
    with DriverWatch(kube, ns) as w, operator_env(apiserver.kubeconfig):
        reconciler = Reconciler(CrashingApi(method, after, nth), OperatorSettings.from_env())
        with pytest.raises(Crash):
            reconciler.reconcile(ns, "c")
        with running_operator(apiserver.kubeconfig):
            wait_for(lambda: kube.driver_names(ns) == ["c-e1-a1-driver"], 30, "one driver")
            st = wait_for(
                lambda: (
                    kube.status(ns, "c").get("launchState") == "Created" and kube.status(ns, "c")
                ),
                20,
                "Created",
            )
            assert (st["epoch"], st["attempt"]) == (1, 1)
    assert w.max_live["c"] == 1 and w.created == ["c-e1-a1-driver"]


@pytest.mark.parametrize(("method", "after"), [("delete_pod", True), ("replace_status", True)])
def test_crash_during_relaunch(kube: Kube, apiserver, method, after):
    ns = kube.namespace()
    kube.create_job(ns, "r", job_spec())
    with DriverWatch(kube, ns) as w, operator_env(apiserver.kubeconfig):
        Reconciler(KubeApi(), OperatorSettings.from_env()).reconcile(ns, "r")
        assert kube.driver_names(ns) == ["r-e1-a1-driver"]
        kube.set_terminated(ns, "r-e1-a1-driver", 1)
        reconciler = Reconciler(CrashingApi(method, after), OperatorSettings.from_env())
        with pytest.raises(Crash):  # the failure is recorded, then the old pod is deleted
            for _ in range(5):
                reconciler.reconcile(ns, "r")
        with running_operator(apiserver.kubeconfig):
            wait_for(lambda: kube.driver_names(ns) == ["r-e1-a2-driver"], 30, "relaunch")
    assert w.max_live["r"] == 1
    assert w.created == ["r-e1-a1-driver", "r-e1-a2-driver"]


def test_sigkill_at_random_moments_never_two_drivers(kube: Kube, apiserver):
    ns = kube.namespace()
    jobs = [f"k{i}" for i in range(6)]
    rng = random.Random(7)
    with DriverWatch(kube, ns) as w:
        for job in jobs:
            kube.create_job(ns, job, job_spec())
        for _round in range(6):
            proc = spawn_operator(apiserver.kubeconfig)
            try:
                # The random moment counts from the operator's first launch: starting a Python
                # process alone can take seconds on a loaded machine.
                created, started = len(w.created), time.monotonic()
                while len(w.created) == created and time.monotonic() - started < 30:
                    time.sleep(0.05)
                deadline = time.monotonic() + rng.uniform(1.5, 4.0)
                while time.monotonic() < deadline:  # play the kubelet: drivers keep failing
                    for pod in kube.pods(ns, "driver"):
                        if pod.status.phase == "Pending" and rng.random() < 0.5:
                            kube.set_terminated(ns, pod.metadata.name, rng.choice([1, 137, 0]))
                    time.sleep(0.1)
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc = spawn_operator(apiserver.kubeconfig)
        try:

            def settled() -> bool:
                drivers = kube.pods(ns, "driver")
                per_job = defaultdict(list)
                for pod in drivers:
                    per_job[pod.metadata.labels["sparkkafka.dev/job"]].append(pod)
                return all(
                    len(per_job[j]) == 1 and per_job[j][0].status.phase == "Pending" for j in jobs
                )

            wait_for(settled, 60, "every job with exactly one live driver")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert all(w.max_live[j] == 1 for j in jobs), dict(w.max_live)
    assert len(w.created) > len(jobs)  # restarts did happen across the kills
