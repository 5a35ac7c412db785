"""The autoscaler on a real API server and a real broker: the operator reads the log ends and
the lag from Kafka and the batch totals from a runner report the test writes (a job that
processes PER_EXECUTOR records per second of execution per executor and commits what it
processed), decides a scale-up, applies it as one restart in the same epoch, and undoes a
`kubectl scale` while it owns the count."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from devbed.kube_apiserver import find_bin_dir
from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for
from tests.support.kafka_tools import commit_may_retry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOPIC, GROUP, PARTITIONS = "as-in", "as-group", 4
INPUT_RATE = 150  # records/s
PER_EXECUTOR = 100  # records per second of execution, per executor
TICK = 0.5


class FakeRun:
    """Plays the producer and the driver: input at INPUT_RATE, and per TICK one batch that
    reads what one attempt's executors can process, commits it and reports the totals."""

    def __init__(self, kube: Kube, ns: str, job: str, bootstrap: str) -> None:
        self.kube, self.ns, self.job = kube, ns, job
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
        self.attempt, self.executors = 0, 1  # 0: no driver runs yet
        self.committed = dict.fromkeys(range(PARTITIONS), 0)
        self.totals = {"batches": 0, "rows": 0, "busyMs": 0, "executionMs": 0}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._produce, self._run)]

    def __enter__(self) -> FakeRun:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)
        self.consumer.close()

    def running(self, attempt: int, executors: int) -> None:
        """A new driver runs: its counters start at zero (the runner's are per run)."""
        self.attempt, self.executors = attempt, executors
        self.totals = dict.fromkeys(self.totals, 0)

    def _produce(self) -> None:
        sent, started = 0, time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * INPUT_RATE)
            for i in range(sent, due):
                self.producer.produce(TOPIC, value=b"x", partition=i % PARTITIONS)
            sent = due
            self.producer.poll(0)
            time.sleep(0.05)
        self.producer.flush(10)

    def _run(self) -> None:
        while not self.stop.wait(TICK):
            if self.attempt:
                self._batch()

    def _batch(self) -> None:
        budget = int(PER_EXECUTOR * self.executors * TICK) // PARTITIONS
        offsets, rows = [], 0
        for p in range(PARTITIONS):
            _, end = self.consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=5)
            take = min(max(end - self.committed[p], 0), budget)
            self.committed[p] += take
            rows += take
            offsets.append(TopicPartition(TOPIC, p, self.committed[p]))
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # the next tick commits further
            if not commit_may_retry(exc.args[0]):
                raise
        execution_ms = int(1000 * rows / (PER_EXECUTOR * self.executors))
        self.totals["batches"] += 1
        self.totals["rows"] += rows
        self.totals["executionMs"] += execution_ms
        self.totals["busyMs"] += execution_ms + 50
        report = {"epoch": 1, "attempt": self.attempt, "startPath": "restored",
                  "throughput": self.totals}  # fmt: skip
        self.kube.core.patch_namespaced_config_map(
            f"{self.job}-report", self.ns, {"data": {"report.json": json.dumps(report)}}
        )


def _autoscaled_spec(bootstrap: str) -> dict:
    spec = job_spec(
        autoscaler={
            "enabled": True,
            "minExecutors": 1,
            "maxExecutors": 6,
            "stabilizationSeconds": 3,
            "metricsWindowSeconds": 20,
            "scaleDownDelaySeconds": 20,
            # the lag the test's start leaves (a busy machine) must not decide the count
            "catchUpSeconds": 3600,
        }
    )
    spec["job"]["source"].update(
        {"bootstrapServers": bootstrap, "subscribe": [TOPIC], "groupId": GROUP}
    )
    return spec


def _kubectl(apiserver, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_bin_dir() / "kubectl"), "--kubeconfig", str(apiserver.kubeconfig), *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def _driver_instances(kube: Kube, ns: str, pod: str) -> str:
    args = kube.core.read_namespaced_pod(pod, ns).spec.containers[0].args
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    return confs["spark.executor.instances"]


def test_scales_up_once_in_the_epoch_and_undoes_a_foreign_scale(
    kube: Kube, ns: str, operator: object, kafka, apiserver
):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    new = NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)
    admin.create_topics([new])[TOPIC].result(30)
    kube.create_job(ns, "elastic", _autoscaled_spec(kafka.bootstrap))
    wait_for(lambda: kube.driver_names(ns) == ["elastic-e1-a1-driver"], 30, "first driver")
    with FakeRun(kube, ns, "elastic", kafka.bootstrap) as run:
        kube.set_running(ns, "elastic-e1-a1-driver")
        run.running(attempt=1, executors=1)
        # 150/s on one executor of 100/s: load max(150, 0.7 x (150 + lag/3600)) = 150/s,
        # ceil(150 / (0.7 x 100)) = 3 executors
        wait_for(lambda: "elastic-e1-a2-driver" in kube.driver_names(ns), 90, "the rescale")
        job = kube.job(ns, "elastic")
        scaler = job["status"]["autoscaler"]
        decision = scaler["lastDecision"]
        assert (decision["action"], decision["fromExecutors"], decision["toExecutors"]) == (
            "ScaledUp", 1, 3,
        )  # fmt: skip
        assert job["spec"]["executor"]["instances"] == 3 == scaler["executors"]
        # measured: the log ends on the broker (the producer runs by the clock; bursts on a busy
        # machine), the runner report's rows per execution second
        assert 100 <= scaler["inputRate"] <= 250 and 95 <= scaler["processingRate"] <= 105
        assert (job["status"]["epoch"], job["status"]["attempt"]) == (1, 2)  # a restore
        assert _driver_instances(kube, ns, "elastic-e1-a2-driver") == "3"
        events = kube.wait_for_events(ns, "elastic", {"ScaledUp"})
        scaled = [e.message for e in events if e.reason == "ScaledUp"]
        assert len(scaled) == 1 and scaled[0].startswith("1 -> 3 executors: input ")

        wait_for(lambda: kube.driver_names(ns) == ["elastic-e1-a2-driver"], 30, "a1 gone")
        kube.set_running(ns, "elastic-e1-a2-driver")
        run.running(attempt=2, executors=3)
        wait_for(lambda: kube.status(ns, "elastic").get("executors") == 3, 20, "3 running")
        listed = _kubectl(apiserver, "get", "sj", "-n", ns)
        header, row = listed.stdout.splitlines()[:2]
        assert listed.returncode == 0 and "EXECUTORS" in header
        # by the column's place: a column before it may still be empty (no lag read yet)
        assert row[header.index("EXECUTORS") :].split()[0] == "3", listed.stdout

        # an HPA's or a person's scale while the autoscaler owns the count: undone, reported
        done = _kubectl(apiserver, "scale", "-n", ns, "sj/elastic", "--replicas=1")
        assert done.returncode == 0, done.stderr

        def conflict():
            st = kube.status(ns, "elastic")
            cond = next(
                (c for c in st.get("conditions", []) if c["type"] == "AutoscalerConflict"), {}
            )
            return cond.get("status") == "True" and cond

        cond = wait_for(conflict, 20, "AutoscalerConflict")
        assert cond["reason"] == "ForeignScale"
        assert "spec.executor.instances was set to 1 by kubectl" in cond["message"]
        assert "set back to 3" in cond["message"]
        wait_for(
            lambda: kube.job(ns, "elastic")["spec"]["executor"]["instances"] == 3, 20, "undone"
        )
        kube.wait_for_events(ns, "elastic", {"ScaleRefused"})
        # the load now fits 3 executors (utilization 0.5): no second rescale, no restart
        settle = time.monotonic() + 15
        while time.monotonic() < settle:
            assert kube.driver_names(ns) == ["elastic-e1-a2-driver"]
            time.sleep(1)
        assert kube.status(ns, "elastic")["autoscaler"]["action"] in ("none", "hold")
