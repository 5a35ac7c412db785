"""Crash safety: killing the operator at any point never yields two drivers of one job.

Two ways: deterministic crash points (the real reconcile with an API facade that dies at a
chosen call), and SIGKILL of a real `kopf run` subprocess at random moments while drivers
fail. A watch on pods records every driver's lifetime; two overlapping ones fail the test.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import signal
import threading
import time
from collections import defaultdict
from typing import Self

import pytest
from kubernetes import client, watch

from streamingjob_operator.finalizer import Finalizer
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.settings import OperatorSettings
from tests.integration.operator.kube_helpers import (
    DriverWatch,
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


class DeletedBeforeTheCreate(KubeApi):
    """The real API facade; at the launch's create, the job is deleted first and its
    finalizer runs to the end (it finds no pod: the launch's last look found none either)."""

    def __init__(self, kube: Kube, settings: OperatorSettings) -> None:
        super().__init__()
        self.kube, self.settings, self.armed = kube, settings, True

    def create_pod(self, pod: dict) -> dict | None:
        if self.armed:
            self.armed = False
            meta = pod["metadata"]
            job = self.get_job(meta["namespace"], meta["ownerReferences"][0]["name"])
            assert job is not None
            Finalizer(KubeApi(), self.settings).finalize(job)
            self.kube.delete_job(meta["namespace"], job["metadata"]["name"])
        return super().create_pod(pod)


def test_a_launch_that_raced_the_jobs_deletion_leaves_no_driver(kube: Kube, apiserver):
    """Issue 26: a reconcile step that listed the pods (none) before the job's deletion and
    finalizer ran goes on to create its driver after them. Nothing would remove that pod but
    the garbage collector (its owner is gone): the launch looks at the job once more after
    the create and removes the pod it made for a job that is gone or going."""
    ns = kube.namespace()
    kube.create_job(ns, "raced", job_spec())
    with operator_env(apiserver.kubeconfig):
        settings = OperatorSettings.from_env()
        api = DeletedBeforeTheCreate(kube, settings)
        reconciler = Reconciler(api, settings)
        assert reconciler.reconcile(ns, "raced") is not None  # retried: the launch gave up
        assert not api.armed  # the race was run
        assert reconciler.reconcile(ns, "raced") is None  # the job is gone
    assert kube.job(ns, "raced") is None
    wait_for(lambda: kube.driver_names(ns) == [], 30, "no driver left of the deleted job")


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


def test_a_warning_whose_operator_died_before_posting_it_is_posted_once_by_the_next(
    kube: Kube, apiserver
):
    """The failure is in status (status.warnings keeps its Warning under its Event's name),
    the process dies before the Event: the next process posts it, the one after that finds it
    there (409 AlreadyExists) and posts no second one (announce.py)."""
    ns = kube.namespace()
    kube.create_job(ns, "w", job_spec())
    with operator_env(apiserver.kubeconfig):
        settings = OperatorSettings.from_env()
        Reconciler(KubeApi(), settings).reconcile(ns, "w")
        assert kube.driver_names(ns) == ["w-e1-a1-driver"]
        kube.set_terminated(ns, "w-e1-a1-driver", 1)
        with pytest.raises(Crash):
            Reconciler(CrashingApi("replace_status", True), settings).reconcile(ns, "w")

        def told() -> list[client.CoreV1Event]:
            return [
                e
                for e in kube.events(ns)
                if e.reason == "DriverFailed" and "w-e1-a1-driver" in (e.message or "")
            ]

        assert told() == []
        kept = [w for w in kube.status(ns, "w")["warnings"] if w["reason"] == "DriverFailed"]
        assert len(kept) == 1
        Reconciler(KubeApi(), settings).reconcile(ns, "w")  # the next process
        Reconciler(KubeApi(), settings).reconcile(ns, "w")  # and the one after it
    events = told()
    assert [e.metadata.name for e in events] == [kept[0]["name"]]
    assert (
        events[0].type == "Warning"
        and events[0].involved_object.uid == kube.job(ns, "w")["metadata"]["uid"]
    )


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


class Poller:
    """A thread that calls `poll` every 50 ms while the `with` block runs; the first error it
    raised is raised when the block ends."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        if self.errors:
            raise self.errors[0]

    def poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as exc:
                self.errors.append(exc)
                return
            self._stop.wait(0.05)


class SlowKubelet(Poller):
    """Plays a node's kubelet (and the scheduler) for one namespace: binds new pods to a
    node, runs them, fails some drivers, and lets deleted pods linger: a pod being deleted
    stays (its process still running, as far as anyone can tell) for a random part of its
    grace period before the kubelet reports its container ended and removes it. Bound pods
    are only removed by that final delete (grace 0), as with a real kubelet."""

    NODE = "slow-node"

    def __init__(self, kube: Kube, ns: str, rng: random.Random, fail_rate: float) -> None:
        self.kube, self.ns, self.rng, self.fail_rate = kube, ns, rng, fail_rate
        self.deleting_since: dict[str, float] = {}
        self.linger: dict[str, float] = {}
        self.lingered: list[float] = []  # how long each deleted pod stayed
        super().__init__()
        with contextlib.suppress(client.ApiException):
            kube.core.create_node({"metadata": {"name": self.NODE}})

    def poll(self) -> None:
        for pod in self.kube.pods(self.ns):
            with contextlib.suppress(client.ApiException):  # gone meanwhile
                self._tend(pod)

    def _tend(self, pod: client.V1Pod) -> None:
        name = pod.metadata.name
        if pod.metadata.deletion_timestamp is not None:
            now = time.monotonic()
            since = self.deleting_since.setdefault(name, now)
            # the SIGTERM'd process takes its time; below the operator's stuck-pod grace (2 s)
            linger = self.linger.setdefault(name, self.rng.uniform(0.2, 1.5))
            if now - since >= linger:
                code = 0 if pod.metadata.labels.get("spark-role") == "driver" else 143
                self.kube.set_terminated(self.ns, name, code, "Completed" if code == 0 else "Error")
                self.kube.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
                self.lingered.append(now - since)
            return
        if not pod.spec.node_name:
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": self.NODE},
            }
            self.kube.core.create_namespaced_pod_binding(
                name, self.ns, binding, _preload_content=False
            )
            return
        if pod.status.phase == "Pending":
            self.kube.set_running(self.ns, name)
        elif pod.status.phase == "Running" and self.rng.random() < self.fail_rate:
            self.kube.set_terminated(self.ns, name, self.rng.choice([1, 137]))


def _settle(
    kube: Kube,
    apiserver,
    ns: str,
    jobs: list[str],
    kubelet: SlowKubelet,
    tend=lambda: None,
    standby: tuple[str, ...] = (),
) -> None:
    """A last operator, and no more failures: until every job has exactly one driver (two for
    the jobs in `standby`: the running one and a Ready standby), running and not being
    deleted, and says Running (`tend` plays whatever else runs meanwhile)."""
    proc = spawn_operator(apiserver.kubeconfig)
    try:

        def settled_job(job: str, pods: list[client.V1Pod]) -> bool:
            st = kube.status(ns, job)
            return (
                len(pods) == (2 if job in standby else 1)
                and all(
                    p.status.phase == "Running" and p.metadata.deletion_timestamp is None
                    for p in pods
                )
                and st.get("phase") == "Running"
                and (job not in standby or (st.get("standby") or {}).get("state") == "Ready")
            )

        def settled() -> bool:
            tend()
            per_job = defaultdict(list)
            for pod in kube.pods(ns, "driver"):
                per_job[pod.metadata.labels["sparkkafka.dev/job"]].append(pod)
            return all(settled_job(j, per_job[j]) for j in jobs)

        kubelet.fail_rate = 0.0
        wait_for(settled, 90, "every job with exactly one running driver (and its standby)")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_graceful_deletions_linger_while_the_operator_is_killed_never_two_drivers(
    kube: Kube, apiserver
):
    """Deleted pods linger for part of their grace period (the test plays a slow kubelet),
    while drivers fail, restarts are requested and running drivers are deleted by someone
    else, and the operator is SIGKILLed at random moments: a pod watch proves that no two
    drivers of one job ever exist at once (a lingering driver is still running)."""
    ns = kube.namespace()
    jobs = [f"g{i}" for i in range(4)]
    rng = random.Random(11)
    with DriverWatch(kube, ns) as w, SlowKubelet(kube, ns, rng, fail_rate=0.02) as kubelet:
        for job in jobs:
            kube.create_job(ns, job, job_spec())
        nonces = dict.fromkeys(jobs, 0)
        for _round in range(5):
            proc = spawn_operator(apiserver.kubeconfig)
            try:
                # the random moment counts from the operator's first act: starting a Python
                # process alone can take seconds on a loaded machine
                created, job = len(w.created), rng.choice(jobs)
                nonces[job] += 1
                kube.patch_spec(ns, job, {"restartNonce": nonces[job]})
                wait_for(lambda created=created: len(w.created) > created, 60, "a launch")
                deadline = time.monotonic() + rng.uniform(1.5, 4.0)
                while time.monotonic() < deadline:  # graceful deletions, from two sides
                    job = rng.choice(jobs)
                    if rng.random() < 0.5:
                        nonces[job] += 1
                        kube.patch_spec(ns, job, {"restartNonce": nonces[job]})
                    else:
                        running = [
                            p
                            for p in kube.pods(ns, "driver")
                            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                        ]
                        if running:
                            victim = rng.choice(running).metadata.name
                            with contextlib.suppress(client.ApiException):
                                kube.core.delete_namespaced_pod(victim, ns)  # graceful
                    kubelet._stop.wait(rng.uniform(0.2, 0.6))
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        _settle(kube, apiserver, ns, jobs, kubelet)
    assert all(w.max_live[j] == 1 for j in jobs), dict(w.max_live)
    assert len(kubelet.lingered) >= len(jobs)  # deleted pods did linger
    assert max(kubelet.lingered) >= 0.2
    assert len(w.created) > 2 * len(jobs)


def _waits_for_go(pod: client.V1Pod) -> bool:
    """A warm hand-over's next driver (its runner waits for its go before reading)."""
    return (pod.spec.containers[0].args or [])[-1:] == ["--wait-for-go"]


class ReadingWatch(Poller):
    """Which drivers of each job read, polled: a driver reads from its start unless it waits
    for a go (a warm hand-over's next driver), and then from the first go.json that named it
    until its container has ended, whatever later go.json names (a chained hand-over: the
    next go while it still reads is the overlap to find). Every value go.json held comes
    from a watch on the ConfigMaps (none missed between two polls); each poll takes the
    gos seen so far before listing the pods: a go seen then was in force when the pods
    were listed, so two drivers found reading were both reading at that moment."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.overlaps: list[tuple[str, list[str]]] = []
        self.went: set[str] = set()  # drivers a go was written for
        self._go_thread = threading.Thread(target=self._watch_gos, daemon=True)
        super().__init__()

    def __enter__(self) -> Self:
        self._go_thread.start()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._go_thread.join(10)

    def _watch_gos(self) -> None:
        """Watches in one-second streams, each from where the last ended, until the block
        ends (a stream left open would outlive the API server)."""
        version = None
        while not self._stop.is_set():
            gos = watch.Watch()
            list_cms = self.kube.core.list_namespaced_config_map
            for event in gos.stream(list_cms, self.ns, timeout_seconds=1, resource_version=version):
                cm = event["object"]
                go = (cm.data or {}).get("go.json")
                if go and cm.metadata.name.endswith("-go"):  # the operator's go ConfigMap
                    self.went.add(json.loads(go)["pod"])
            version = gos.resource_version

    def poll(self) -> None:
        went = set(self.went)
        reading = defaultdict(list)
        for pod in self.kube.pods(self.ns, "driver"):
            if pod.status.phase in ("Succeeded", "Failed"):
                continue
            job, name = pod.metadata.labels["sparkkafka.dev/job"], pod.metadata.name
            if not _waits_for_go(pod) or name in went:
                reading[job].append(name)
        self.overlaps += [(job, sorted(names)) for job, names in reading.items() if len(names) > 1]


def _waiting_driver(job: str, name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"spark-role": "driver", "sparkkafka.dev/job": job}},
        "spec": {"containers": [{"name": "driver", "image": "x", "args": ["--wait-for-go"]}]},
    }


def test_the_reading_watch_sees_a_go_written_while_the_last_gone_driver_reads(
    kube: Kube, apiserver
):
    """Finding 9 of issue 41: the watch above counts a go'd driver as reading after go.json
    names the next one (a chained overlap); the watch before it stopped counting the first."""
    ns = kube.namespace()
    for name in ("j-e1-a1-driver", "j-e2-a1-driver"):
        kube.core.create_namespaced_pod(ns, _waiting_driver("j", name))
    go = {"metadata": {"name": "j-go"}, "data": {"go.json": json.dumps({"pod": "j-e1-a1-driver"})}}
    with ReadingWatch(kube, ns) as reads:
        kube.core.create_namespaced_config_map(ns, go)
        wait_for(lambda: reads.went, 10, "the first go seen")
        kube.core.patch_namespaced_config_map(
            "j-go", ns, {"data": {"go.json": json.dumps({"pod": "j-e2-a1-driver"})}}
        )
        wait_for(lambda: reads.overlaps, 10, "the two go'd drivers counted as reading")
    assert reads.overlaps[0] == ("j", ["j-e1-a1-driver", "j-e2-a1-driver"])


def _play_the_waiting_runners(kube: Kube, ns: str, rng: random.Random, ready: set[str]) -> None:
    """A running waiting driver reports ready (most of them: the others time out)."""
    for pod in kube.pods(ns, "driver"):
        name = pod.metadata.name
        if not _waits_for_go(pod) or name in ready or pod.status.phase != "Running":
            continue
        ready.add(name)
        if rng.random() < 0.2:
            continue  # never ready: the hand-over falls back to the cold path
        match = re.fullmatch(r"(.+)-e(\d+)-a(\d+)-driver", name)
        assert match is not None, name
        job, epoch, attempt = match[1], int(match[2]), int(match[3])
        with contextlib.suppress(client.ApiException):
            kube.signal_ready(ns, job, name, epoch, attempt)


def _take_over_for_certain(kube: Kube, apiserver, ns: str, job: str) -> None:
    """The job's driver fails while its standby is Ready (settled): the standby is the
    job's driver next, read only after its go (the watch still polls)."""
    proc = spawn_operator(apiserver.kubeconfig)
    try:
        st = kube.status(ns, job)
        spare = st["standby"]["pod"]
        kube.set_terminated(ns, st["driverPod"], 137)
        took_over = wait_for(
            lambda: (s := kube.status(ns, job)).get("driverPod") == spare and s, 60, "takeover"
        )
        assert took_over["lastRestartReason"] == "DriverFailed", took_over
        assert took_over["handover"]["pod"] == spare, took_over
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_warm_hand_overs_while_drivers_and_the_operator_die_never_two_reading(
    kube: Kube, apiserver
):
    """Warm hand-overs (redeploys and restarts by hand; on h0 with a standby, which also takes
    over failed drivers) while the running and the waiting drivers fail at random, deleted
    pods linger, some waiting drivers never report ready, and the operator is SIGKILLed at
    random moments: at no moment do two drivers of one job read (the waiting one reads only
    once its go is written, and the go only once the running one has ended)."""
    ns = kube.namespace()
    jobs = [f"h{i}" for i in range(3)]
    rng = random.Random(25)
    warm = {"mode": "warm", "readyTimeoutSeconds": 3}
    ready: set[str] = set()
    runners = (kube, ns, rng, ready)
    with (
        ReadingWatch(kube, ns) as reads,
        SlowKubelet(kube, ns, rng, fail_rate=0.01) as kubelet,
    ):
        for job in jobs:
            spare = {"standby": {"enabled": True}} if job == "h0" else {}
            kube.create_job(ns, job, job_spec(handover=warm, **spare))
        nonces = {(job, kind): 0 for job in jobs for kind in ("redeployNonce", "restartNonce")}
        for _round in range(5):
            proc = spawn_operator(apiserver.kubeconfig)
            try:
                job, kind = rng.choice(list(nonces))
                nonces[job, kind] += 1
                kube.patch_spec(ns, job, {kind: nonces[job, kind]})
                deadline = time.monotonic() + rng.uniform(3.0, 8.0)
                while time.monotonic() < deadline:
                    _play_the_waiting_runners(*runners)
                    if rng.random() < 0.1:
                        job, kind = rng.choice(list(nonces))
                        nonces[job, kind] += 1
                        kube.patch_spec(ns, job, {kind: nonces[job, kind]})
                    kubelet._stop.wait(0.2)
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        tend = functools.partial(_play_the_waiting_runners, *runners)
        _settle(kube, apiserver, ns, jobs, kubelet, tend, standby=("h0",))
        _take_over_for_certain(kube, apiserver, ns, "h0")  # whatever the chaos did
    assert reads.overlaps == [], reads.overlaps[:5]
    assert reads.went, "no hand-over reached its go"
    handed = [kube.status(ns, j).get("handover") or {} for j in jobs]
    assert any(h.get("phase") in ("Started", "FellBack") for h in handed), handed
