"""The operator on a real cluster: one `helm install` of the chart, the broker of
examples/kind/kafka.yaml, the object store of examples/kind/minio.yaml and one StreamingJob
(examples/kind/orders-job.yaml: s3a:// checkpoints and sink, two executors) on a control plane
and two workers, walked through install → executors on both workers → driver kills → drains
→ node losses → redeploy → operator upgrade → kubectl scale → suspend/resume/delete, a
second job with Avro values (the bed's schema registry) and a dead-letter topic through a
driver kill, a Kafka-to-Kafka job (the exactly-once Kafka sink) through a driver kill and a
warm redeploy, the autoscaler under a step load, then invalid manifests.
The tests share the job and run in file order; each reads real output (the parquet sink in
the object store, through its `_spark_metadata` log) and the group's offsets.

Writes bench/results/e2e.json: driver killed / node drained / node lost → first restored batch
committed, scale request → first batch with the new executor count, and the cluster create
times that scripts/kind/up.sh logged.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from devbed.kind_bed import RESTRICTED, committed_batch, job_namespace
from devbed.kind_cluster import REPO_ROOT, Kube, T, wait_for, worker_nodes
from devbed.kind_iceberg import ICEBERG_REST_URI, ICEBERG_WAREHOUSE, IcebergReader
from devbed.kind_kafka import BROKER_PODS, KAFKA_NAMESPACE, SECURED_BOOTSTRAP, KafkaLogin
from devbed.kind_kafka_client import KafkaClient, ProducerLoop
from devbed.kind_kafka_tool import AvroOrders, typed_order
from devbed.kind_operator import OPERATOR_NAMESPACE, OPERATOR_VALUES, RELEASE, Helm
from devbed.kind_storage import BUCKET, ObjectStore
from devbed.polling import Unmet
from spark_app.runner.supervise import STOP_GRACE_S
from tests.e2e.batch_timeline import BatchTimeline
from tests.e2e.results import RUN_RESULTS
from tests.support.delta_output import s3_options, table_rows
from tests.support.file_sink import committed_rows

pytestmark = pytest.mark.e2e

EXAMPLE = REPO_ROOT / "examples" / "kind" / "orders-job.yaml"
JOB_LABEL = "sparkkafka.dev/job"
KILLS = ["delete", "process"]  # each way once: CI time pays for the step-load scenario
DRAINS = 2
DEFAULT_GRACE, SHORT_GRACE = 40.0, 35.0  # the chart's nodeLostGraceSeconds, the least one
LOSSES_DEFAULT_GRACE, LOSSES_SHORT_GRACE = 1, 1


@dataclass
class Job:
    """The scenarios' StreamingJob and what the tests know about it."""

    kube: Kube
    kafka: KafkaClient
    namespace: str
    store: ObjectStore
    name: str = "orders"
    topic: str = ""
    group: str = ""
    manifest: dict = field(default_factory=dict)
    next_id: int = 0  # ids 0 .. next_id-1 were produced (and must be in the sink once)
    login: KafkaLogin | None = None
    kill_samples: list[dict] = field(default_factory=list)
    sink_columns: tuple[str, ...] = ("order_id",)  # what its transform adds to each row
    delta: bool = False  # writes a Delta table at sink_path (else parquet files per epoch)
    table: Callable[[], list[dict]] | None = None  # reads its table's rows (Iceberg's)

    @property
    def sink_path(self) -> str:
        """In the bucket (the job writes s3a://<this>)."""
        return f"{BUCKET}/output/{self.namespace}/{self.name}"

    @property
    def checkpoints(self) -> str:
        """The job's checkpoint base in the bucket: one directory per epoch below."""
        return f"{BUCKET}/checkpoints/{self.namespace}/{self.name}"

    def apply(self) -> None:
        self.kube.run("apply", "-n", self.namespace, "-f", "-", input=yaml.safe_dump(self.manifest))

    def uid(self) -> str:
        return self.kube.run(
            "get", "sj", self.name, "-n", self.namespace, "-o", "jsonpath={.metadata.uid}"
        ).strip()

    def patch(self, spec: dict) -> None:
        self.kube.run(
            "patch", "streamingjob", self.name, "-n", self.namespace, "--type", "merge",
            "-p", json.dumps({"spec": spec}),
        )  # fmt: skip

    def status(self) -> dict:
        return self.kube.get("streamingjob", self.name, self.namespace).get("status") or {}

    def wait_report(self, what: str, accept: Callable[[dict], T | None], timeout: float = 180) -> T:
        """The first truthy `accept(report)` of the runner's report (ConfigMap <job>-report;
        {} before the first one), watched."""

        def accept_data(data: dict) -> T | None:
            raw = data.get("report.json")
            return accept(json.loads(raw) if raw else {})

        return self.kube.wait_configmap(
            f"{self.name}-report", self.namespace, accept_data, timeout, what
        )

    def wait_batch(self, epoch: int, attempt: int, timeout: float = 180, what: str = "") -> dict:
        """The report once the run (epoch, attempt) committed a batch after its start."""
        return self.wait_report(
            what or f"epoch {epoch} attempt {attempt} committing batches",
            lambda report: committed_batch(report, epoch, attempt),
            timeout,
        )

    def pods(self, selector: str = "") -> list[dict]:
        labels = f"{JOB_LABEL}={self.name}" + (f",{selector}" if selector else "")
        out = self.kube.run("get", "pods", "-n", self.namespace, "-l", labels, "-o", "json")
        return json.loads(out)["items"]

    def sink_rows(self) -> list[dict]:
        """Committed rows of every epoch, read from the object store through the log: the
        file sink's, the Delta table's (through delta-rs, as any Delta reader) or the one
        `table` reads."""
        if self.table is not None:
            return self.table()
        if self.delta:
            self.store.connect()
            creds = self.store.credentials
            options = s3_options(
                f"http://127.0.0.1:{self.store.port}",
                creds["accessKeyId"],
                creds["secretAccessKey"],
            )
            return table_rows(f"s3a://{self.sink_path}", options)
        fs = self.store.filesystem()  # order_id: the example's transform (examples/user-image)
        return committed_rows(self.sink_path, filesystem=fs, extra=self.sink_columns)

    def wait_sink_has_all(self, timeout: float = 180) -> list[dict]:
        expected = set(range(self.next_id))

        def complete() -> list[dict] | None:
            rows = self.sink_rows()
            return rows if {r["id"] for r in rows} >= expected else None

        return wait_for(f"ids 0..{self.next_id - 1} in the sink", complete, timeout, 2)

    def assert_exactly_once(self, rows: list[dict]) -> None:
        """Every produced id in the sink, and every record of the topic once: no offset twice,
        no id more often than the topic holds it (its producer, librdkafka, can write one
        twice when a leader moves: its issue #4953; a source can only read each offset once)."""
        counts = Counter(r["id"] for r in rows)
        assert set(counts) == set(range(self.next_id)), "records lost or unexpected ids"
        offsets = Counter((r["partition"], r["offset"]) for r in rows)
        twice = sorted(at for at, n in offsets.items() if n > 1)
        assert not twice, f"{len(twice)} offsets written more than once: {twice[:20]}"
        if twice_by_id := [i for i, n in counts.items() if n > 1]:  # only then read the topic
            in_topic = self.kafka.keys_counted(self.topic)
            more = sorted(i for i in twice_by_id if counts[i] > in_topic[str(i)])
            assert not more, f"{len(more)} ids in the sink more often than in the topic: {more}"
            print(f"ids the producer wrote twice: {sorted(twice_by_id)}")

    def wait_caught_up(self, timeout: float = 120) -> dict[int, int]:
        """Waits until the group's committed offsets reach the log end; returns them."""

        def caught_up() -> dict[int, int] | None:
            group, end = self.kafka.offsets(self.topic, self.group)
            return dict(end) if group == end else None

        return wait_for("group offsets at the log end", caught_up, timeout, 1)


@pytest.fixture(scope="module")
def job(
    kube: Kube,
    operator_release: str,
    kafka_client: KafkaClient,
    object_store: ObjectStore,
    kafka_login: KafkaLogin,
) -> Iterator[Job]:
    """The orders job as examples/kind/orders-job.yaml has it: SASL_SSL with the Secrets
    kafka-login and kafka-ca, in a namespace that enforces the `restricted` Pod Security
    Standard (the API server refuses any pod of the job that does not comply)."""
    namespace = job_namespace(kube, object_store, kafka_login, f"e2e-{uuid.uuid4().hex[:8]}")
    suffix = uuid.uuid4().hex[:6]
    state = Job(kube, kafka_client, namespace, object_store, topic=f"orders-{suffix}")
    state.login = kafka_login
    state.group = f"orders-{suffix}"
    manifest = yaml.safe_load(EXAMPLE.read_text())
    source = manifest["spec"]["job"]["source"]
    source["subscribe"], source["groupId"] = [state.topic], state.group
    manifest["spec"]["job"]["sink"]["path"] = f"s3a://{state.sink_path}"
    state.manifest = manifest
    kafka_client.create_topic(state.topic, 3)
    yield state
    if os.environ.get("STREAMJOB_E2E_KEEP") != "1":  # kept for a look after a failure
        kube.run("delete", "namespace", namespace, "--wait=false")


def _spark_ui_applications(job: Job) -> list[dict]:
    """The current driver's Spark UI as a user reaches it: `kubectl port-forward` to the
    Service that status.sparkUIService names, then its REST API. kubectl ends a forward whose
    connection the pod refused (the UI not listening yet): it is started again. While the
    SparkContext starts, the UI answers 200 with a plain-text "Spark is starting up": not yet."""
    service = job.status()["sparkUIService"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = [f"svc/{service}", f"{port}:4040"]
    command = [*job.kube.base, "port-forward", "-n", job.namespace, *target]
    forwards: list[subprocess.Popen] = []

    def applications() -> list[dict] | None:
        if not forwards or forwards[-1].poll() is not None:
            forwards.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        try:
            url = f"http://127.0.0.1:{port}/api/v1/applications"
            with urllib.request.urlopen(url, timeout=5) as answer:
                return json.loads(answer.read()) or None
        except (OSError, json.JSONDecodeError):
            return None

    try:
        return wait_for(f"the Spark UI through port-forward to svc/{service}", applications, 90, 1)
    finally:
        for forward in forwards:
            forward.terminate()
            forward.wait(10)


def _phase(job: Job, *phases: str) -> dict | None:
    status = job.status()
    return status if status.get("phase") in phases else None


def test_install_apply_and_records_flow_to_the_sink(job: Job, kube: Kube, helm: Helm) -> None:
    """Scenario 1: helm install (fixture) → Running/Ready → records in the sink → kubectl get."""
    assert RELEASE in helm.run("list", "-n", OPERATOR_NAMESPACE, "-q")
    kube.run(
        "rollout", "status", f"deployment/{RELEASE}-streamingjob-operator", "-n",
        OPERATOR_NAMESPACE, "--timeout=120s", timeout=150,
    )  # fmt: skip
    job.apply()
    status = wait_for("phase Running", lambda: _phase(job, "Running"), 300, 1)
    assert status["epoch"] == 1 and status["attempt"] == 1
    ready = {c["type"]: c["status"] for c in status.get("conditions", [])}
    assert ready.get("Ready") == "True", status
    job.kube.run(
        "get", "pod", status["driverPod"], "-n", job.namespace
    )  # the driver exists under the recorded name

    job.kafka.produce(job.topic, 0, 200)
    job.next_id = 200
    rows = job.wait_sink_has_all(240)
    job.assert_exactly_once(rows)
    # the sink holds what the topic does (the reading assert_exactly_once falls back on)
    assert job.kafka.keys_counted(job.topic) == Counter(str(r["id"]) for r in rows)
    assert {r["topic"] for r in rows} == {job.topic}
    # the job's own code ran: its image's transform parsed each order (examples/user-image)
    assert [r["order_id"] for r in rows] == [r["id"] for r in rows]

    end_offsets = job.kafka.offsets(job.topic, job.group)[1]
    assert sum(end_offsets.values()) == 200

    def columns() -> dict | None:
        # The operator's Kafka view (every kafkaPollSeconds) has caught up with the output.
        committed = job.status().get("committedOffsets", {}).get(job.topic, {})
        if {int(p): o for p, o in committed.items()} != end_offsets:
            return None
        values = _columns(job)
        ok = values.get("PHASE") == "Running" and values.get("START") == "fresh"
        return values if ok and values.get("LAG") == "0" else None

    values = wait_for("kubectl get sj: Running, fresh, lag 0", columns, 90, 1)
    assert values["RESTARTS"] == "0" and values["EPOCH"] == "1"
    assert job.status()["startPath"] == "fresh"


def test_executors_on_both_workers_read_partitions(job: Job, kube: Kube) -> None:
    """Several nodes: the two executors run on different workers and both read partitions
    (tasks each completed, from the runner's report of Spark's status store)."""
    workers = worker_nodes(kube)
    assert len(workers) == 2, workers
    status = job.status()
    first, job.next_id = job.next_id, job.next_id + 300
    job.kafka.produce(job.topic, first, job.next_id)

    def both_working() -> dict[str, int] | None:
        report = job.wait_batch(status["epoch"], status["attempt"], 120)
        by_ip = {e["hostPort"].rsplit(":", 1)[0]: e["completedTasks"] for e in report["executors"]}
        nodes: dict[str, int] = {}
        for pod in job.pods("spark-role=executor"):
            ip = pod["status"].get("podIP")
            if ip in by_ip:
                node = pod["spec"]["nodeName"]
                nodes[node] = nodes.get(node, 0) + by_ip[ip]
        return nodes if sorted(n for n, tasks in nodes.items() if tasks) == workers else None

    tasks = wait_for("executors on both workers completing tasks", both_working, 180, 2)
    assert all(tasks[w] > 0 for w in workers), tasks
    job.assert_exactly_once(job.wait_sink_has_all(240))


def _columns(job: Job) -> dict[str, str]:
    """`kubectl get sj <job>` as {column: value} (NAME PHASE EPOCH RESTARTS START LAG EXECUTORS
    STANDBY AGE; an unset value reads <none>)."""
    out = job.kube.run("get", "sj", job.name, "-n", job.namespace)
    header, row = out.splitlines()[:2]
    return dict(zip(header.split(), row.split(), strict=False))


def _wait_standby_ready(job: Job) -> None:
    """Until `kubectl get sj` shows the standby Ready; a timeout shows the standby's status
    and the job's last history entries (why it is not). The bound fits a standby that fails
    its warm-up (readyTimeoutSeconds, 180 s) on a loaded machine and a second one's."""

    def ready() -> bool | Unmet:
        if _columns(job).get("STANDBY") == "Ready":
            return True
        status = job.status()
        history = status.get("history", [])[-6:]
        recent = [f"{h['time']} {h['reason']}: {h['message']}" for h in history]
        return Unmet(phase=status.get("phase"), standby=status.get("standby"), history=recent)

    wait_for("the standby Ready", ready, 420, 1)


def _kill(job: Job, pod: str, method: str) -> None:
    if method == "delete":
        job.kube.run(
            "delete", "pod", pod, "-n", job.namespace, "--force", "--grace-period=0",
            "--wait=false",
        )  # fmt: skip
    else:  # SIGKILL the job's Python process; spark-submit's JVM then exits non-zero
        job.kube.run(
            "exec", pod, "-n", job.namespace, "--", "sh", "-c",
            "kill -9 $(pgrep -f '^/opt/venv/bin/python.*run_job.py')",
        )  # fmt: skip


def test_driver_kills_restore_from_the_checkpoint_exactly_once(
    job: Job, caused_restarts: set[str]
) -> None:
    """Scenario 2: force-deleted drivers and a SIGKILLed job process → attempt+1 in the same
    epoch, restored from the checkpoint; every record in the sink exactly once."""
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    try:
        for method in KILLS:
            status = job.status()
            epoch, attempt = status["epoch"], status["attempt"]
            job.wait_batch(epoch, attempt, 240)
            pod = job.status()["driverPod"]
            started = time.monotonic()
            caused_restarts.update(_pods_of_attempt(job))
            _kill(job, pod, method)
            report = job.wait_batch(
                epoch, attempt + 1, 240, f"attempt {attempt + 1}: first restored batch committed"
            )
            seconds = round(time.monotonic() - started, 2)
            assert report["startPath"] == "restored", report
            job.kill_samples.append(
                {"method": method, "seconds": seconds, "restoredBatch": report["restoredBatch"]}
            )
            status = wait_for(
                "status shows the restored attempt",
                lambda a=attempt: (
                    (s := job.status()).get("attempt") == a + 1
                    and s.get("startPath") == "restored"
                    and s
                ),
                60,
            )
            assert status["epoch"] == epoch
            assert status["driverPod"] != pod
        graceful = _graceful_delete_stops_between_batches(job)
    finally:
        job.next_id = producer.stop()
    _write_results(
        KILLED,
        "kill (kubectl delete pod --force --grace-period=0, or SIGKILL of the job's Python "
        "process in the driver) until the runner's report shows a committed batch of the next "
        "attempt, restored from the checkpoint (s3a:// on the object store)",
        job.kill_samples,
        15,
    )
    rows = job.wait_sink_has_all(240)
    job.assert_exactly_once(rows)
    assert {r["epoch"] for r in rows} == {"epoch-1"}
    status = job.status()
    assert status["restarts"] == len(KILLS) + graceful
    assert status["lastRestartReason"] == "DriverDeleted"
    values = _columns(job)
    assert (values["PHASE"], values["RESTARTS"], values["START"]) == (
        "Running",
        str(len(KILLS) + graceful),
        "restored",
    ), values


GRACEFUL_TRIES = 3  # a loaded host may run one batch past the runner's 25 s deadline


def _graceful_delete_stops_between_batches(job: Job) -> int:
    """`kubectl delete pod` (a drain does the same): the kubelet's SIGTERM reaches the job's
    runner, which stops the query between batches and reports "stopped"; then the operator
    relaunches, restoring from the checkpoint. A batch still running at the runner's deadline
    is interrupted, as designed, and re-run by the restore: the report must say so, and the
    stop is tried again. Returns the number of graceful deletions."""
    interrupted = []
    for tries in range(1, GRACEFUL_TRIES + 1):
        stopped, report = _graceful_delete(job)
        assert report["startPath"] == "restored", report
        # The last batch the stopped run reported is the checkpoint's newest commit.
        assert report["restoredBatch"] == stopped["latestBatch"]["batchId"], (stopped, report)
        if stopped["stop"]["betweenBatches"]:
            assert report["rerunBatch"] is None, report  # no batch planned after it
            return tries
        assert stopped["stop"]["waitedSeconds"] > STOP_GRACE_S, stopped
        assert report["rerunBatch"] in (None, report["restoredBatch"] + 1), report
        interrupted.append(stopped["stop"])
    raise AssertionError(f"no graceful stop landed between batches: {interrupted}")


def _graceful_delete(job: Job) -> tuple[dict, dict]:
    """The stopped run's last report and the restored run's first batch report."""
    status = job.status()
    epoch, attempt = status["epoch"], status["attempt"]
    job.wait_batch(epoch, attempt, 240)
    job.kube.run("delete", "pod", status["driverPod"], "-n", job.namespace, "--wait=false")
    stopped = job.wait_report(
        "the runner stopped the query on SIGTERM",
        lambda r: r if r.get("attempt") == attempt and r.get("state") == "stopped" else None,
        60,
    )
    report = job.wait_batch(
        epoch, attempt + 1, 240, f"attempt {attempt + 1}: restored after the graceful stop"
    )
    return stopped, report


def _timings() -> dict:
    """The newest cluster create and up.sh totals of each temperature from timings.log."""
    cache = Path(os.environ.get("STREAMJOB_CACHE", Path.home() / ".cache" / "streamingjob"))
    found: dict = {}
    log = cache / "kind" / "timings.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        match = re.fullmatch(
            r"(\S+) \S+ (cluster-create|up-total|node-image)-(cold|warm) (\d+)s", line
        )
        if match:
            found[f"{match.group(2)}-{match.group(3)}"] = {
                "seconds": int(match.group(4)),
                "at": match.group(1),
            }
    return found


def _write_results(key: str, description: str, samples: list[dict], target: float) -> None:
    """Adds one measurement to this run's results (bench/results/e2e.json once the run ends:
    the scenarios of one run together)."""
    seconds = [s["seconds"] for s in samples]
    timings = _timings()
    fresh = key == KILLED or not RUN_RESULTS.exists()
    result = {} if fresh else json.loads(RUN_RESULTS.read_text())
    result[key] = {
        "description": description,
        "samples": samples,
        "p50_seconds": statistics.median(seconds),
        "max_seconds": max(seconds),
        "target_p50_seconds": target,
    }
    result.update(
        {
            "cluster_create_seconds": {
                "cold": (timings.get("cluster-create-cold") or {}).get("seconds"),
                "warm": (timings.get("cluster-create-warm") or {}).get("seconds"),
            },
            "up_total_seconds": {
                "cold": (timings.get("up-total-cold") or {}).get("seconds"),
                "warm": (timings.get("up-total-warm") or {}).get("seconds"),
            },
            "timings_source": "$STREAMJOB_CACHE/kind/timings.log (scripts/kind/up.sh)",
            "timings": timings,
        }
    )
    RUN_RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RUN_RESULTS.write_text(json.dumps(result, indent=2) + "\n")


def test_a_secured_job_in_a_restricted_namespace_shows_its_password_nowhere(
    job: Job, kube: Kube
) -> None:
    """After install and the kills: the job reads over SASL_SSL in a namespace that enforces
    the restricted Pod Security Standard, and the SCRAM password is in no pod log (drivers,
    executors, the operator), Event, status, ConfigMap (the job's manifest, the executor
    template, the runner's report) or pod spec. Reads only: costs a few seconds."""
    assert job.login is not None
    namespace = json.loads(kube.run("get", "namespace", job.namespace, "-o", "json"))
    assert namespace["metadata"]["labels"].get(RESTRICTED) == "restricted"
    assert job.manifest["spec"]["job"]["source"]["bootstrapServers"] == SECURED_BOOTSTRAP
    pods = job.pods()
    assert {p["metadata"]["labels"].get("spark-role") for p in pods} == {"driver", "executor"}
    for pod in pods:  # admitted under `restricted`: the securityContext is what it checks
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, pod
    places = {
        "status": json.dumps(job.status()),
        "events": kube.run("get", "events", "-n", job.namespace, "-o", "json"),
        "configmaps": kube.run("get", "configmaps", "-n", job.namespace, "-o", "json"),
        "pods": json.dumps(pods),
        "operator log": kube.run(
            "logs",
            "-n",
            OPERATOR_NAMESPACE,
            "-l",
            f"app.kubernetes.io/instance={RELEASE}",
            "--tail=-1",
            "--all-containers",
        ),
    }
    for pod in pods:
        name = pod["metadata"]["name"]
        places[f"log of {name}"] = kube.run("logs", name, "-n", job.namespace, "--tail=-1")
    report = json.loads(
        kube.get("configmap", f"{job.name}-report", job.namespace)["data"]["report.json"]
    )
    assert report["commits"].get("lastCommitted"), report  # the group commits over SASL_SSL
    leaked = [where for where, text in places.items() if job.login.password in text]
    assert not leaked, f"the Kafka password appears in: {leaked}"


KILLED = "driver_killed_to_first_restored_batch_committed"


def _pods_of_attempt(job: Job) -> set[str]:
    """The driver and executors a test is about to kill, drain or lose."""
    return {p["metadata"]["name"] for p in job.pods()}


def _node_of(job: Job, pod: str) -> str:
    return job.kube.get("pod", pod, job.namespace)["spec"].get("nodeName", "")


def _restored_on_another_node(job: Job, attempt: int, old_node: str) -> dict:
    status = wait_for(
        f"status of attempt {attempt}",
        lambda: (s := job.status()).get("attempt") == attempt and s.get("driverPod") and s,
        60,
    )
    node = _node_of(job, status["driverPod"])
    assert node and node != old_node, (node, old_node)
    return status


# The broker scenario: a rolling restart of the whole cluster, one broker pod deleted at a
# time, each time the one leading most of the job's partitions among those not restarted yet:
# a kubectl delete (SIGTERM: a controlled shutdown moves the leaders first, as a rolling
# restart does), a forced one (SIGKILL: the controller waits out the broker's session before
# electing new leaders, as after a crash), and the last broker gracefully. Each round starts
# with a backlog the job reads at its own pace (maxOffsetsPerTrigger per batch), so the read
# rates compare the job's pace with and without the broker, not the producer's.
BROKER_DELETES = ("graceful", "force", "graceful")
BROKER_BACKLOG = 100_000
STEADY_S = 8.0


def _broker_leading_most(job: Job, restarted: set[str]) -> tuple[str, int]:
    """The pod of the broker leading most of the topic's partitions among those not in
    `restarted`, and how many it leads."""
    partitions = job.kafka.wait_in_sync(job.topic)["partitions"].values()
    led = Counter(dict.fromkeys(BROKER_PODS, 0))
    led.update(f"kafka-{m['leader']}" for m in partitions)
    pod, count = max(
        ((p, c) for p, c in led.items() if p not in restarted), key=lambda pc: (pc[1], pc[0])
    )
    return pod, count


def _delete_broker(job: Job, pod: str, method: str) -> None:
    force = ["--grace-period=0", "--force"] if method == "force" else []
    job.kube.run("delete", "pod", pod, "-n", KAFKA_NAMESPACE, "--wait=false", *force)


def _replacement_ready(job: Job, pod: str, deleted_uid: str) -> None:
    """Until the StatefulSet's new pod of that name is Ready (not the deleted one, which may
    still be Ready while it shuts down)."""

    def ready() -> bool:
        try:
            found = job.kube.get("pod", pod, KAFKA_NAMESPACE)
        except RuntimeError:  # between the old pod and the new one
            return False
        conditions = (found.get("status") or {}).get("conditions") or []
        is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return found["metadata"]["uid"] != deleted_uid and is_ready

    wait_for(f"the replacement of {pod} Ready", ready, 240, 1)


def _broker_round(job: Job, method: str, caused: set[str], restarted: set[str]) -> dict:
    """A backlog, a steady window of reading it, the delete, then until the replacement
    broker is back in every partition's ISR: the churn window."""
    attempt = job.status()["attempt"]
    first, job.next_id = job.next_id, job.next_id + BROKER_BACKLOG
    produced = time.time()
    job.kafka.produce(job.topic, first, job.next_id)
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    try:
        with BatchTimeline(job.kube, job.namespace, job.name, job.topic) as timeline:
            reading = timeline.wait_until(
                "a batch of the backlog", lambda e: e.planned >= produced, 120
            ).at
            pod, led = _broker_leading_most(job, restarted)
            restarted.add(pod)
            timeline.wait_until(
                f"{STEADY_S:g} s of steady reading", lambda e: e.at >= reading + STEADY_S, 120
            )
            caused.add(f"{KAFKA_NAMESPACE}/{pod}")
            deleted_uid = job.kube.get("pod", pod, KAFKA_NAMESPACE)["metadata"]["uid"]
            killed = time.time()
            _delete_broker(job, pod, method)
            after = timeline.wait_until(
                "the first batch planned after the delete committed",
                lambda e: e.planned >= killed,
                180,
            )
            _replacement_ready(job, pod, deleted_uid)
            job.kafka.wait_in_sync(job.topic)
            whole = time.time()
            return {
                "method": method,
                "broker": pod,
                "partitions_led": led,
                "seconds": round(after.at - killed, 2),
                "churn_seconds": round(whole - killed, 2),
                "steady_records_per_second": round(timeline.rate(reading, killed)),
                "churn_records_per_second": round(timeline.rate(killed, whole)),
                # 0: the job had read the whole backlog before the broker was back, so the churn
                # rate is bounded by what there was to read
                "lag_at_churn_end": timeline.last_before(whole).lag,
                "driver_restarts": job.status()["attempt"] - attempt,
            }
    finally:
        job.next_id = producer.stop()


def test_deleting_the_leading_broker_costs_a_pause_not_a_restart(
    job: Job, caused_restarts: set[str]
) -> None:
    """Scenario: a rolling restart of the replicated cluster (3 brokers, RF 3,
    min.insync.replicas 2) mid-stream, one broker pod deleted at a time, first the one leading
    most of the job's partitions (gracefully, forced, gracefully): the same driver reads on
    from the new leaders, every record exactly once, and condition Degraded never turns True
    (the operator's lag reader rides the churn out too). Measured: delete → first batch
    planned after it committed, and the read rate while the broker is away (until its
    replacement is back in every ISR) against the steady rate before."""
    status = job.status()
    epoch, attempt, restarts = status["epoch"], status["attempt"], status["restarts"]
    job.wait_batch(epoch, attempt, 240, "a batch before the broker is deleted")
    before = job.status()  # Degraded may still be True: the kills' count resets after a stable run
    began = datetime.now(UTC).replace(microsecond=0)
    restarted: set[str] = set()
    samples = [_broker_round(job, method, caused_restarts, restarted) for method in BROKER_DELETES]
    _write_results(
        "broker_leader_deleted_to_next_batch_committed",
        "a rolling restart of the 3 brokers, one kubectl delete at a time (graceful: controlled "
        "shutdown; force: --grace-period=0 --force) of the pod of the broker leading most of the "
        "job's partitions among those not restarted yet, while the job reads a backlog, until "
        "the runner's report shows a committed batch planned after the delete; read rates "
        "in records/s: steady = the 8 s before the delete, churn = from the delete until the "
        "replacement broker is back in every partition's ISR",
        samples,
        15,
    )
    job.assert_exactly_once(job.wait_sink_has_all(240))
    status = job.status()
    assert status["epoch"] == epoch and status["phase"] == "Running", status
    # A broker restart costs the job a pause, never its driver (semantics rule 15).
    assert (status["attempt"], status["restarts"]) == (attempt, restarts), (
        f"the driver restarted under the broker churn ({status.get('lastRestartReason')})"
    )
    assert restarted == set(BROKER_PODS)  # the whole cluster restarted
    turned = _degraded_turned_true_since(before, status, began)
    if turned:
        raise AssertionError(f"{turned}\noperator log:\n" + _operator_log_since(job, began))


def _degraded_turned_true_since(before: dict, after: dict, began: datetime) -> str:
    """Why condition Degraded may have turned True since `began` ("" if it cannot have): it
    is False now and as it was in `before` (read just before `began`) or last changed before
    `began`, or its one change since was the reset of the earlier kills' failure count (True
    at `began`, False at the job's StableRun)."""
    degraded = next(c for c in after["conditions"] if c["type"] == "Degraded")
    if degraded["status"] != "False":
        return f"Degraded is True after the rolling restart: {degraded}"
    changed = degraded["lastTransitionTime"]
    was = next(c for c in before["conditions"] if c["type"] == "Degraded")
    # `began` is cut to the second: a change in that second, seen already in `before`, is
    # one from before it (CI run 75: the StableRun reset landed in it)
    if _utc(changed) < began or was == degraded:
        return ""
    stable_runs = [h["time"] for h in after["history"] if h["reason"] == "StableRun"]
    if was["status"] == "True" and changed in stable_runs:
        return ""
    return f"Degraded turned during the rolling restart (was {was}): {degraded}"


def _utc(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _operator_log_since(job: Job, since: datetime) -> str:
    """The operator's log lines since `since` (why a condition turned)."""
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return job.kube.run(
        "logs", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}",
        f"--since-time={stamp}", "--tail=200", "--prefix",
    )  # fmt: skip


def test_drains_move_the_job_between_batches_and_complete(
    job: Job, caused_restarts: set[str]
) -> None:
    """Scenario: `kubectl drain` of the driver's node. The operator sees the cordon and stops
    the driver between batches (the job's PodDisruptionBudget holds the executors' eviction
    until then); the next attempt restores on the other worker; the drain completes; every
    record exactly once."""
    samples = []
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    try:
        for _ in range(DRAINS):
            status = job.status()
            epoch, attempt = status["epoch"], status["attempt"]
            job.wait_batch(epoch, attempt, 240)
            node = _node_of(job, status["driverPod"])
            caused_restarts.update(_pods_of_attempt(job))
            started = time.monotonic()
            drain = subprocess.Popen(
                [
                    *job.kube.base, "drain", node, "--ignore-daemonsets",
                    "--delete-emptydir-data", "--timeout=180s",
                ],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            try:
                report = job.wait_batch(
                    epoch, attempt + 1, 240, f"attempt {attempt + 1} restored after the drain"
                )
                seconds = round(time.monotonic() - started, 2)
                out, _ = drain.communicate(timeout=200)
            finally:
                if drain.poll() is None:
                    drain.kill()
                job.kube.run("uncordon", node)
            assert drain.returncode == 0, f"kubectl drain {node} failed:\n{out}"
            assert report["startPath"] == "restored" and report["rerunBatch"] is None, report
            status = _restored_on_another_node(job, attempt + 1, node)
            assert status["lastRestartReason"] == "NodeDrained", status
            assert status["epoch"] == epoch
            samples.append(
                {"node": node, "seconds": seconds, "restoredBatch": report["restoredBatch"]}
            )
    finally:
        job.next_id = producer.stop()
    _write_results(
        "node_drained_to_first_restored_batch_committed",
        "kubectl drain of the driver's node (start) until the runner's report shows a committed "
        "batch of the next attempt, restored from the checkpoint on the other worker",
        samples,
        20,
    )
    job.assert_exactly_once(job.wait_sink_has_all(240))


def _freeze(node: str, tries: int = 3) -> None:
    """docker pause, tried again when the cgroup freezer gives up ("unable to freeze": runc
    thaws the node again when its tasks do not all stop in time, as on a loaded machine)."""
    for left in reversed(range(tries)):
        done = subprocess.run(["docker", "pause", node], capture_output=True, text=True)
        if done.returncode == 0:
            return
        if "unable to freeze" not in done.stderr or not left:
            raise RuntimeError(f"docker pause {node}: {done.stderr.strip()}")
        time.sleep(1)


def _lose_node(job: Job, grace: float, caused: set[str]) -> dict:
    """docker pause of the worker that runs the driver (its kubelet and pods freeze: a node
    cut off); measured until the first restored batch on the other worker (by the standby
    there, when one is kept); then the node comes back (its kubelet removes the pods the
    operator force-deleted meanwhile)."""
    status = job.status()
    epoch, attempt = status["epoch"], status["attempt"]
    job.wait_batch(epoch, attempt, 240)
    node = _node_of(job, status["driverPod"])
    standby = status.get("standby") or {}
    by_standby = standby.get("state") == "Ready"
    following = attempt + 1
    if by_standby:
        assert _node_of(job, standby["pod"]) != node, "the standby beside the driver"
        following = standby["attempt"]  # it takes over
    caused.update(_pods_of_attempt(job))
    _freeze(node)
    started = time.monotonic()
    try:
        report = job.wait_batch(
            epoch, following, 240, f"attempt {following} restored after losing {node}"
        )
        seconds = round(time.monotonic() - started, 2)
    finally:
        subprocess.run(["docker", "unpause", node], check=True)
    assert report["startPath"] == "restored", report
    status = _restored_on_another_node(job, following, node)
    assert status["lastRestartReason"] == "NodeLost", status
    assert status["epoch"] == epoch
    job.kube.run("wait", "--for=condition=Ready", f"node/{node}", "--timeout=120s", timeout=150)
    return {
        "node": node,
        "grace": grace,
        "seconds": seconds,
        "restoredBatch": report["restoredBatch"],
        "standby": by_standby,
    }


def test_lost_nodes_restore_on_the_surviving_worker_exactly_once(
    job: Job, helm: Helm, caused_restarts: set[str]
) -> None:
    """Scenario: the driver's worker stops answering (docker pause). After the node-lost
    grace, counted from the node's last lease renewal the operator saw, the driver counts as
    lost; the next attempt restores from the object-storage checkpoint on the other worker
    (the lost node avoided, though the scheduler still thinks it Ready); every record exactly
    once, also after the node comes back. The loss at the short grace is one with a
    standby (spec.standby, warmed during the operator's upgrade, on the other worker): it
    takes over once the grace has passed (issue 25: the grace plus ≤ 5 s)."""
    samples = []
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    try:
        for _ in range(LOSSES_DEFAULT_GRACE):
            samples.append(_lose_node(job, DEFAULT_GRACE, caused_restarts))
        job.patch({"standby": {"enabled": True}})  # of no class: restarts nothing
        helm.run(
            "upgrade", RELEASE, str(REPO_ROOT / "charts" / "streamingjob-operator"),
            "-n", OPERATOR_NAMESPACE, "--reuse-values",
            "--set", f"config.nodeLostGraceSeconds={SHORT_GRACE}", "--wait", "--timeout", "180s",
        )  # fmt: skip
        _wait_standby_ready(job)
        for _ in range(LOSSES_SHORT_GRACE):
            samples.append(_lose_node(job, SHORT_GRACE, caused_restarts))
    finally:
        job.next_id = producer.stop()
        job.patch({"standby": {"enabled": False}})
    for grace, key in ((DEFAULT_GRACE, "default_grace"), (SHORT_GRACE, "grace_20s_standby")):
        _write_results(
            f"node_lost_to_first_restored_batch_committed_{key}",
            f"docker pause of the driver's worker until the runner's report shows a committed "
            f"batch of the next attempt, restored on the other worker; nodeLostGraceSeconds="
            f"{grace:g} of it" + ("; by the standby kept there" if grace == SHORT_GRACE else ""),
            [x for x in samples if x["grace"] == grace],
            60 if grace == DEFAULT_GRACE else SHORT_GRACE + 5,
        )
    assert [x["standby"] for x in samples] == [False] * LOSSES_DEFAULT_GRACE + [True] * (
        LOSSES_SHORT_GRACE
    )
    job.assert_exactly_once(job.wait_sink_has_all(240))


WARM = "warm_redeploy_gap_seconds"


def _batch_time(batch: dict) -> datetime:
    return datetime.fromisoformat(batch["timestamp"].replace("Z", "+00:00"))


def test_a_warm_redeploy_hands_over_between_two_batches_exactly_once(job: Job) -> None:
    """Scenario 3 (and issue 25): spec.handover.mode warm, then a redeploy (redeployNonce) while
    orders arrive. The next epoch's driver starts beside the running one and warms up (its
    executors, Python workers, Kafka and the object store) reading nothing; once it is
    ready, the running driver stops between batches and, once it is gone, the next one is
    told to start: fresh from the group's committed offsets. Measured: the gap between the
    old driver's last batch and the new one's first (Spark's trigger times, from the runner's
    report as watched), which cold is the whole start of a driver. Every order exactly once."""
    status = job.status()
    epoch, attempt = status["epoch"], status["attempt"]
    job.patch({"handover": {"mode": "warm"}})  # of no class: restarts nothing
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    old_last: dict = {}

    def new_first(report: dict) -> dict | None:
        if report.get("epoch") == epoch and report.get("latestBatch"):
            old_last.update(report["latestBatch"])
        return committed_batch(report, epoch + 1, 1)

    try:
        job.wait_batch(epoch, attempt, 240, "a batch before the hand-over")
        started = time.monotonic()
        job.patch({"redeployNonce": int(status.get("deployedRedeployNonce") or 0) + 1})
        report = job.wait_report("the next epoch's first batch", new_first, 300)
        seconds = round(time.monotonic() - started, 2)
    finally:
        job.next_id = producer.stop()
        job.patch({"handover": {"mode": "cold"}})  # the later scenarios measure cold paths
    gap = round((_batch_time(report["latestBatch"]) - _batch_time(old_last)).total_seconds(), 2)
    assert report["startPath"] == "fresh", report  # a redeploy: epoch + 1, a new checkpoint
    starts = report["startOffsets"][job.topic]  # where the old driver's final commit left them
    assert {e["from"] for e in starts.values()} == {"committed"}, starts
    handover = job.status().get("handover") or {}
    assert (handover.get("phase"), handover.get("epoch")) == ("Started", epoch + 1), handover
    rows = job.wait_sink_has_all(240)
    job.assert_exactly_once(rows)  # the new driver read nothing before the old one was gone
    _write_results(
        WARM,
        "a redeploy (redeployNonce) with spec.handover.mode warm while orders arrive at 20/s: "
        "seconds between the trigger times of the old driver's last batch and the new "
        "driver's first (both from Spark's progress in the runner's report); redeploySeconds: "
        "from the patch until that first batch, mostly the next driver's warm-up beside the "
        "running one",
        [
            {
                "seconds": gap,
                "redeploySeconds": seconds,
                "warmSeconds": report.get("warmSeconds"),
                "goToFirstBatchSeconds": report.get("goToFirstBatchSeconds"),
            }
        ],
        3,
    )


def _standby_of(job: Job, epoch: int) -> dict | None:
    """The standby kept now (Warming or Ready) in `epoch`; status keeps a removed one too."""
    standby = job.status().get("standby") or {}
    wanted = standby.get("epoch") == epoch and standby.get("state") in ("Warming", "Ready")
    return standby if wanted else None


LEADER_HANDOVERS = 2
LEASE = f"{RELEASE}-streamingjob-operator"


def _operator_pods(kube: Kube) -> list[str]:
    """Running operator pods, not those being deleted (a deleted one stays Running while it
    terminates)."""
    out = kube.run(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "json",
        "-l", "app.kubernetes.io/instance=" + RELEASE, "--field-selector=status.phase=Running",
    )  # fmt: skip
    return [
        pod["metadata"]["name"]
        for pod in json.loads(out)["items"]
        if not pod["metadata"].get("deletionTimestamp")
    ]


def _log_time(kube: Kube, pod: str, needle: str, after: float = 0.0) -> float | None:
    """When the pod first logged a line containing `needle` (the runtime's timestamp), not
    before `after`."""
    try:
        text = kube.run("logs", pod, "-n", OPERATOR_NAMESPACE, "--timestamps", "--tail=-1")
    except RuntimeError:  # just started: no log yet
        return None
    for line in text.splitlines():
        stamp, _, message = line.partition(" ")
        if needle in message:
            # RFC 3339 with nanoseconds: keep microseconds for fromisoformat
            head, _, frac = stamp.rstrip("Z").partition(".")
            when = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
            if when >= after:
                return when
    return None


def _hand_over(job: Job, kube: Kube, caused: set[str]) -> dict:
    """Deletes the leading operator pod once another waits on the Lease; the time from the
    delete to the first reconcile of the job by another replica (its own log line). That is
    the waiting one, or the deleted pod's replacement when it starts and looks first."""
    holder = kube.get("lease", LEASE, OPERATOR_NAMESPACE)["spec"]["holderIdentity"]
    wait_for(
        "a replica waiting on the Lease",
        lambda: [
            p for p in _operator_pods(kube) if p != holder and _log_time(kube, p, "waits to lead")
        ],
        180,
        1,
    )
    caused.add(f"{OPERATOR_NAMESPACE}/{holder}")
    deleted = time.time()
    kube.run("delete", "pod", holder, "-n", OPERATOR_NAMESPACE, "--wait=false")
    needle = f"first reconcile of {job.namespace}/{job.name} as leader"

    def first_reconcile() -> float | None:
        others = (p for p in _operator_pods(kube) if p != holder)
        return min((t for p in others if (t := _log_time(kube, p, needle, deleted))), default=None)

    took_over = wait_for("another replica's first reconcile", first_reconcile, 120, 0.5)

    def lease_events() -> list[str]:
        events = kube.run(
            "get", "events", "-n", OPERATOR_NAMESPACE, "-o", "json", "--field-selector",
            f"involvedObject.kind=Lease,involvedObject.name={LEASE}",
        )  # fmt: skip
        return [f"{e['reason']}: {e['message']}" for e in json.loads(events)["items"]]

    released = f"LeaderReleased: {holder} released the Lease"
    try:  # the Event the deleted leader posts on the Lease
        wait_for("a LeaderReleased Event on the Lease", lambda: released in lease_events(), 30, 1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the Lease's Events: {lease_events()}") from None
    return {"seconds": round(took_over - deleted, 2), "from": holder}


def test_leader_loss_and_helm_upgrade_mid_stream_keep_the_driver_and_its_standby(
    job: Job, kube: Kube, helm: Helm, caused_restarts: set[str]
) -> None:
    """Scenario 5: the leading operator pod deleted (LEADER_HANDOVERS times), then an
    operator upgrade that replaces every replica → the job keeps running, with the standby
    the next test kills its driver with (spec.standby, warming meanwhile): every operator
    adopts both, and no other driver ever exists (pods watched throughout)."""
    status = job.status()
    epoch, attempt, driver = status["epoch"], status["attempt"], status["driverPod"]
    job.patch({"standby": {"enabled": True}})  # of no class: restarts nothing
    spare = wait_for("the standby recorded", lambda: _standby_of(job, epoch), 60, 1)
    restarts = status["restarts"]
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    watch = subprocess.Popen(
        [
            *kube.base, "get", "pods", "-n", job.namespace, "-l",
            f"{JOB_LABEL}={job.name},spark-role=driver", "--watch", "--no-headers",
            "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        job.wait_batch(epoch, attempt, what="a batch before the leader is lost")
        handovers = [_hand_over(job, kube, caused_restarts) for _ in range(LEADER_HANDOVERS)]
        _write_results(
            "leader_pod_deleted_to_first_reconcile_by_the_other_replica",
            "kubectl delete of the pod holding the operator's Lease until the other replica "
            "logs its first reconcile of the job (the bed's Lease 30 s and renew 20 s, "
            "retry 2 s; the leader releases the Lease on SIGTERM)",
            handovers,
            15,
        )
        before = job.wait_batch(epoch, attempt, what="a batch before the upgrade")
        operator_pods = _operator_pods(kube)
        helm.run(
            "upgrade", RELEASE, str(REPO_ROOT / "charts" / "streamingjob-operator"),
            "-n", OPERATOR_NAMESPACE, "--reuse-values", *OPERATOR_VALUES,
            "--set", "config.resyncSeconds=6", "--wait", "--timeout", "180s",
        )  # fmt: skip
        upgraded = time.time()
        after_pods = _operator_pods(kube)
        assert after_pods and not set(after_pods) & set(operator_pods), "operator not restarted"

        # The new operator has observed the job (it refreshed the Kafka view) ...
        def observed_by_new_operator() -> dict | None:
            s = job.status()
            when = s.get("offsetsTime") or ""
            stamp = time.mktime(time.strptime(when[:19], "%Y-%m-%dT%H:%M:%S")) if when else 0
            return s if stamp - time.timezone > upgraded else None

        wait_for("the new operator's status update", observed_by_new_operator, 120, 1)
        # ... and batches keep coming from the same driver.
        job.wait_report(
            "batches after the upgrade",
            lambda r: (
                committed_batch(r, epoch, attempt)
                and r["latestBatch"]["batchId"] >= before["latestBatch"]["batchId"] + 3
            ),
            120,
        )
    finally:
        job.next_id = producer.stop()
        watch.terminate()
        seen, _ = watch.communicate(timeout=30)
    status = job.status()
    assert (status["epoch"], status["attempt"], status["driverPod"]) == (epoch, attempt, driver)
    assert status["restarts"] == restarts and status["phase"] == "Running"
    names = {line.split()[0] for line in seen.splitlines() if line.strip()}
    assert names == {driver, spare["pod"]}, f"driver pods seen during the upgrade: {seen}"
    drivers = {p["metadata"]["name"] for p in job.pods("spark-role=driver")}
    assert drivers == {driver, spare["pod"]}
    assert status["standby"]["pod"] == spare["pod"], status["standby"]  # adopted, not replaced
    job.assert_exactly_once(job.wait_sink_has_all(240))


STANDBY = "standby_failover_seconds"


def _driver_pods(job: Job, driver: str) -> set[str]:
    """A driver's pod and its executors' (named after it)."""
    return {n for p in job.pods() if (n := p["metadata"]["name"]).startswith(driver)}


def test_a_killed_driver_with_a_ready_standby_restores_in_seconds_exactly_once(
    job: Job, caused_restarts: set[str]
) -> None:
    """Issue 25: spec.standby.enabled keeps a warm driver of the next attempt beside the
    running one (another node where it can); `kubectl get sj` shows it Ready. A force-deleted
    driver is replaced by it: the go once the killed driver's pods are gone, then a restore
    from the checkpoint, and a new standby behind it. Measured: the kill → the standby's first
    restored batch committed (cold: driver_killed_to_first_restored_batch_committed). Every
    order exactly once."""
    job.patch({"standby": {"enabled": True}})  # on since the test before (warmed there)
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    try:
        _wait_standby_ready(job)
        status = job.status()
        epoch, attempt, driver = status["epoch"], status["attempt"], status["driverPod"]
        spare = status["standby"]
        job.wait_batch(epoch, attempt, 240, "a batch before the kill")
        nodes = {_node_of(job, driver), _node_of(job, spare["pod"])}
        caused_restarts.update(_driver_pods(job, driver))
        started = time.monotonic()
        _kill(job, driver, "delete")
        report = job.wait_batch(
            epoch, spare["attempt"], 120, "the standby's first restored batch committed"
        )
        seconds = round(time.monotonic() - started, 2)
    finally:
        job.next_id = producer.stop()
    assert report["startPath"] == "restored", report
    status = job.status()
    assert (status["driverPod"], status["lastRestartReason"]) == (spare["pod"], "DriverDeleted")
    behind = status.get("standby") or {}
    assert behind.get("attempt", 0) > spare["attempt"], behind  # a new one, a new name
    job.patch({"standby": {"enabled": False}})
    wait_for("the standby removed", lambda: _driver_pods(job, behind["pod"]) == set(), 120, 1)
    job.assert_exactly_once(job.wait_sink_has_all(240))
    _write_results(
        STANDBY,
        "a driver force-deleted (kubectl delete pod --force --grace-period=0) with "
        "spec.standby.enabled and the standby Ready, while orders arrive at 20/s: seconds "
        "from the kill until the runner's report shows the standby's first batch committed, "
        "restored from the checkpoint (s3a:// on the object store)",
        [
            {
                "seconds": seconds,
                "restoredBatch": report["restoredBatch"],
                "goToFirstBatchSeconds": report.get("goToFirstBatchSeconds"),
                "standbyOnAnotherNode": len(nodes) == 2,
            }
        ],
        5,
    )


SCALED = "scale_to_first_batch_seconds"
ATTEMPT_LABEL = "sparkkafka.dev/attempt"


def _running_executors(job: Job, attempt: int) -> list[str]:
    pods = job.pods(f"spark-role=executor,{ATTEMPT_LABEL}={attempt}")
    return [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]


def test_kubectl_scale_restarts_in_the_epoch_with_one_more_executor(
    job: Job, caused_restarts: set[str]
) -> None:
    """Scenario: `kubectl scale streamingjob --replicas=N+1` (the scale subresource sets
    spec.executor.instances) mid-stream → the driver stops between batches and the next
    attempt restores in the same epoch with N+1 executors. Measured from the scale request
    until the first batch committed after all N+1 executor pods run (and Spark counts them);
    no batch re-run, every record exactly once across the scale. One restore: ~20 s."""
    status = job.status()
    epoch, attempt = status["epoch"], status["attempt"]
    replicas = job.kube.get("streamingjob", job.name, job.namespace)["spec"]["executor"][
        "instances"
    ]
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=20)
    try:
        job.wait_batch(epoch, attempt, 240, "a batch before the scale")
        assert job.status().get("executors") == replicas
        caused_restarts.update(_pods_of_attempt(job))
        started = time.monotonic()
        job.kube.run(
            "scale", "streamingjob", job.name, "-n", job.namespace, f"--replicas={replicas + 1}"
        )
        # the epoch's next attempt: above a standby's too, whose names are never reused
        following = wait_for(
            "the next attempt recorded",
            lambda: (a := job.status()["attempt"]) > attempt and a,
            60,
            0.5,
        )
        executors = wait_for(
            f"{replicas + 1} executor pods of attempt {following} running",
            lambda: len(names := _running_executors(job, following)) == replicas + 1 and names,
            240,
            0.5,
        )
        raw = job.kube.get("configmap", f"{job.name}-report", job.namespace)["data"]
        before = committed_batch(json.loads(raw.get("report.json") or "{}"), epoch, following)
        mark = before["latestBatch"]["batchId"] if before else -1
        report = job.wait_report(
            f"a batch of attempt {following} committed with {replicas + 1} executors",
            lambda r: (
                committed_batch(r, epoch, following)
                and r["latestBatch"]["batchId"] > mark
                and len(r.get("executors") or []) == replicas + 1
                and r
            ),
            240,
        )
        seconds = round(time.monotonic() - started, 2)
    finally:
        job.next_id = producer.stop()
    assert report["startPath"] == "restored" and report["rerunBatch"] is None, report
    status = wait_for(  # the start path reaches status with the operator's next report read
        "status of the scaled attempt with its start path",
        lambda: (
            (s := job.status()).get("attempt") == following
            and s.get("startPath")
            and s.get("executors")
            and s
        ),
        60,
    )
    assert (status["epoch"], status["startPath"]) == (epoch, "restored"), status
    assert status["executors"] == replicas + 1, status
    assert sorted(_running_executors(job, following)) == sorted(executors)
    _write_results(
        SCALED,
        f"kubectl scale streamingjob --replicas={replicas + 1} (from {replicas}) until the "
        "runner's report shows a batch committed after all executor pods of the next attempt "
        "run and Spark counts them; same epoch, restored from the checkpoint",
        [
            {
                "from": replicas,
                "to": replicas + 1,
                "seconds": seconds,
                "restoredBatch": report["restoredBatch"],
            }
        ],
        30,
    )
    rows = job.wait_sink_has_all(240)
    job.assert_exactly_once(rows)
    assert f"epoch-{epoch}" in {r["epoch"] for r in rows}


CHILDREN = "services,configmaps,serviceaccounts,roles,rolebindings,poddisruptionbudgets"


def test_suspend_resume_and_delete_keep_the_checkpoint(job: Job, kube: Kube) -> None:
    """Scenario 4: suspend → no driver, epoch kept; resume → running; delete with
    deleteOnJobDeletion → children gone, checkpoints deleted from the object store."""
    epoch = job.status()["epoch"]
    job.patch({"suspend": True})
    status = wait_for("phase Suspended", lambda: _phase(job, "Suspended"), 180, 1)
    wait_for("job pods gone", lambda: not job.pods(), 120, 1)
    assert status["epoch"] == epoch and status.get("suspended")
    assert kube.run("get", "configmap", f"{job.name}-job", "-n", job.namespace)

    # stateless: a new epoch from the committed offsets; with the Spark UI on from here (on
    # from the start, it slows every driver start the kill and drain figures time)
    job.patch({"suspend": False, "sparkUI": {"enabled": True}})
    status = wait_for("phase Running again", lambda: _phase(job, "Running"), 240, 1)
    assert status["epoch"] == epoch + 1
    assert status["sparkUIService"] == f"{job.name}-ui"
    assert _spark_ui_applications(job)  # the driver's UI, as a user reaches it
    first, job.next_id = job.next_id, job.next_id + 10
    job.kafka.produce(job.topic, first, job.next_id)
    job.wait_batch(epoch + 1, 1, 240, "a batch after the resume")

    # Both epochs' commit logs are in the object store ...
    for e in (epoch, epoch + 1):
        own = f"{job.checkpoints}/{job.uid()}"  # the job's own directory (its uid)
        assert _listing(job, f"{own}/epoch-{e}/commits"), f"epoch {e}: no commits"
    # ... and go with the job when it asks for it (a cleanup Job with Hadoop's FsShell).
    job.patch({"checkpoint": {"deleteOnJobDeletion": True}})
    kube.run("delete", "sj", job.name, "-n", job.namespace, "--timeout=180s", timeout=200)
    left = kube.run(
        "get", CHILDREN, "-n", job.namespace, "-l", f"{JOB_LABEL}={job.name}", "-o", "name"
    )
    assert not left.strip(), f"children left after deletion: {left}"
    executors = kube.run(
        "get", "pods", "-n", job.namespace, "-o", "name", "-l", "spark-role"
    )  # fmt: skip
    assert not executors.strip(), executors
    wait_for("the checkpoints deleted", lambda: not _listing(job, job.checkpoints), 180, 2)
    assert job.sink_rows(), "the output is the user's: never deleted"


def _listing(job: Job, path: str) -> list[str]:
    from pyarrow import fs

    selector = fs.FileSelector(path, allow_not_found=True, recursive=True)
    return [i.path for i in job.store.filesystem().get_file_info(selector)]


POISON_EVERY = 10  # every 10th order cannot be decoded: alternately truncated, bad magic byte
TYPED_FIRST = 200  # orders produced before the typed job starts


def _typed_job(job: Job, registry: str, name: str = "orders-avro") -> tuple[Job, str]:
    """A second job in the orders job's namespace: the example manifest with Avro values
    (schemas from the bed's registry), a dead-letter topic, no transform, one executor, and
    a Delta table on the object store as its sink."""
    suffix = uuid.uuid4().hex[:6]
    typed = Job(
        job.kube, job.kafka, job.namespace, job.store, name=name,
        topic=f"{name}-{suffix}", group=f"{name}-{suffix}", sink_columns=(), delta=True,
    )  # fmt: skip
    dead = f"{typed.topic}-dead"
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = typed.name
    spec = manifest["spec"]
    spec["job"]["source"].update(
        subscribe=[typed.topic],
        groupId=typed.group,
        value={"format": "avro", "schemaRegistry": {"url": registry}},  # subject <topic>-value
    )
    spec["job"]["deadLetter"] = {"topic": dead}
    del spec["job"]["transform"]
    spec["job"]["sink"] = {"format": "delta", "path": f"s3a://{typed.sink_path}"}  # issue 23
    spec["executor"]["instances"] = 1
    del spec["podTemplate"]  # its spread constraint is for the orders job's two executors
    typed.manifest = manifest
    return typed, dead


def _typed_sink_has(typed: Job, good: set[int]) -> list[dict]:
    def complete() -> list[dict] | None:
        rows = typed.sink_rows()
        return rows if {r["id"] for r in rows} >= good else None

    return wait_for(f"{len(good)} good orders in the sink", complete, 180, 2)


def _dead_letters_have(typed: Job, dead: str, poison: set[int]) -> list[dict]:
    def complete() -> list[dict] | None:
        try:
            copies = typed.kafka.dead_letters(dead)
        except RuntimeError:  # an open transaction of the killed attempt not yet aborted
            return None
        return copies if {int(c["key"]) for c in copies} >= poison else None

    return wait_for(f"{len(poison)} poison orders in {dead}", complete, 120, 2)


def _dead_lettered(typed: Job, counts: dict[str, int]) -> dict | None:
    """A Warning Event DeadLettered on the job whose "(<reason> <n>, ... in this run)" are
    `counts`."""
    events = typed.kube.run(
        "get", "events", "-n", typed.namespace, "-o", "json", "--field-selector",
        f"involvedObject.name={typed.name},reason=DeadLettered",
    )  # fmt: skip
    for event in json.loads(events)["items"]:
        named = re.search(r"\(([^()]*) in this run\)", event["message"])
        pairs = [p.rsplit(" ", 1) for p in named.group(1).split(", ")] if named else []
        if event["type"] == "Warning" and {r: int(n) for r, n in pairs} == counts:
            return event
    return None


def _assert_typed_once(
    rows: list[dict], copies: list[dict], orders: AvroOrders, end: int, job: str = "orders-avro"
) -> None:
    counts = Counter(r["id"] for r in rows)
    good = {n for n in range(end) if not orders.is_poison(n)}
    assert set(counts) == good, "good orders lost, or poison ones in the sink"
    twice = sorted(n for n, c in counts.items() if c > 1)
    assert not twice, f"{len(twice)} orders written more than once: {twice[:20]}"
    for row in rows:  # typed columns: the decoded record, every field
        assert row["value"] == typed_order(row["id"]), row
    dead = Counter(int(c["key"]) for c in copies)
    assert set(dead) == set(range(end)) - good, "poison orders missing from the dead letters"
    twice = sorted(n for n, c in dead.items() if c > 1)
    assert not twice, f"{len(twice)} poison orders dead-lettered more than once: {twice[:20]}"
    for copy in copies:
        headers = copy["headers"]
        assert headers["streamingjob.error.reason"] == orders.reason(int(copy["key"])), copy
        assert headers["streamingjob.job"] == job, copy


def _deleted_and_created_again(typed: Job, orders: AvroOrders, end: int) -> int:
    """Finding 1 of issue 41: the job deleted with deleteOnJobDeletion and applied again
    under the same name at once, its cleanup Job running beside the new job. The new one
    starts fresh in checkpoints of its own (its uid), from the group's committed offsets;
    its Delta app ids are not the old job's, so none of its batches is skipped as already
    in the table. Returns the orders produced so far."""
    typed.patch({"checkpoint": {"deleteOnJobDeletion": True}})
    old = typed.status()["checkpointLocation"]
    typed.kube.run("delete", "sj", typed.name, "-n", typed.namespace, "--timeout=180s", timeout=200)
    typed.apply()
    typed.kafka.produce_avro(typed.topic, orders, end, end + 100)
    report = typed.wait_batch(1, 1, 240, "the job created again: its first batch")
    assert report["startPath"] == "fresh", report
    assert typed.status()["checkpointLocation"] != old
    return end + 100


def test_typed_job_sends_poison_to_the_dead_letter_topic_once_across_a_driver_kill(
    job: Job, schema_registry: str, caused_restarts: set[str]
) -> None:
    """Scenario (issues 22 and 23): a StreamingJob with Avro values (value.format avro,
    schemas from the bed's Apicurio Registry), a dead-letter topic and a Delta table on the
    object store (s3a://) as its sink. The client pod registers the schema
    and writes orders in the Confluent wire format, every 10th one poison. The first run's
    dead letters show in status.deadLetterRecords by reason and a DeadLettered Event; then,
    while orders keep coming, the driver is force-deleted; after the restore every good order
    is in the Delta table exactly once as typed columns and every poison one in the dead-letter
    topic exactly once (read_committed). Runs after the orders job is deleted: the workers
    are its own."""
    began = time.monotonic()
    typed, dead = _typed_job(job, schema_registry)
    orders = AvroOrders(schema_registry, POISON_EVERY)
    typed.kafka.create_topic(typed.topic, 3)
    typed.kafka.create_topic(dead, 1)
    typed.kafka.produce_avro(typed.topic, orders, 0, TYPED_FIRST)  # registers the schema
    typed.apply()
    phases = {"setup": round(time.monotonic() - began, 2)}  # where the scenario's time goes
    try:
        typed.wait_batch(1, 1, 240, "the typed job's first batch")
        phases["first_batch"] = round(time.monotonic() - began - sum(phases.values()), 2)
        first_good = {n for n in range(TYPED_FIRST) if not orders.is_poison(n)}
        _typed_sink_has(typed, first_good)
        # Counted where people look: the first run wrote every copy so far (the topic was
        # empty at its start), by reason, and said so in a Warning Event.
        poisoned = [orders.reason(n) for n in range(TYPED_FIRST) if n not in first_good]
        expected = dict(Counter(poisoned))
        wait_for(
            f"status.deadLetterRecords {expected}",
            lambda: typed.status().get("deadLetterRecords") == expected,
            60,
            1,
        )
        wait_for(
            f"a DeadLettered Event naming {expected}",
            lambda: _dead_lettered(typed, expected),
            30,
            1,
        )
        mark = typed.wait_batch(1, 1)["latestBatch"]["batchId"]
        phases["counted"] = round(time.monotonic() - began - sum(phases.values()), 2)

        producer = ProducerLoop(typed.kafka, typed.topic, TYPED_FIRST, rate=20, avro=orders)
        try:
            typed.wait_report(  # Spark plans no batch without new records
                "a batch of orders produced while the job runs",
                lambda r: committed_batch(r, 1, 1) and r["latestBatch"]["batchId"] > mark and r,
            )
            pod = typed.status()["driverPod"]
            caused_restarts.update(_pods_of_attempt(typed))
            killed = time.monotonic()
            _kill(typed, pod, "delete")
            report = typed.wait_batch(1, 2, 240, "the typed job restored after the kill")
            restored = round(time.monotonic() - killed, 2)
            phases["killed_and_restored"] = round(
                time.monotonic() - began - sum(phases.values()), 2
            )
            assert report["startPath"] == "restored", report
        finally:
            end = producer.stop()
        good = {n for n in range(end) if not orders.is_poison(n)}
        rows = _typed_sink_has(typed, good)
        poison = set(range(end)) - good
        _assert_typed_once(rows, _dead_letters_have(typed, dead, poison), orders, end)
        end = _deleted_and_created_again(typed, orders, end)
        good = {n for n in range(end) if not orders.is_poison(n)}
        rows = _typed_sink_has(typed, good)
        poison = set(range(end)) - good
        _assert_typed_once(rows, _dead_letters_have(typed, dead, poison), orders, end)
        phases["created_again"] = round(time.monotonic() - began - sum(phases.values()), 2)
    finally:
        typed.kube.run("delete", "sj", typed.name, "-n", typed.namespace, "--wait=false")
    seconds = round(time.monotonic() - began, 2)
    _write_results(
        "typed_job_driver_killed_to_first_restored_batch_committed",
        "an Avro job with a dead-letter topic (schemas from the bed's Apicurio Registry): "
        "kubectl delete pod --force of its driver while orders with poison ones arrive, until "
        "the runner's report shows a committed batch of the next attempt; scenario_seconds: "
        "the whole scenario (topics, the job's first start, the kill, every check); "
        "phases_seconds: setup (topics, the first orders, apply), first_batch, counted (the "
        "first run's dead letters in status and an Event), killed_and_restored (from the "
        "producer's start), the rest: the final checks",
        [{"seconds": restored, "scenario_seconds": seconds, "phases_seconds": phases,
          "records": end, "poison": len(poison)}],
        15,
    )  # fmt: skip


def test_a_typed_job_writes_an_iceberg_table_through_the_rest_catalog_once_across_a_kill(
    job: Job, schema_registry: str, iceberg_catalog: IcebergReader, caused_restarts: set[str]
) -> None:
    """Scenario (issue 44): the typed orders job (Avro values, a dead-letter topic) writing
    an Iceberg table through the bed's REST catalog (Apache Iceberg's own server, the table's
    files in MinIO: its metadata written by the server, its data by the driver). While orders
    keep coming the driver is force-deleted; after the restore every good order is in the
    table exactly once as PyIceberg reads it through the catalog, and every poison one in the
    dead-letter topic once."""
    typed, dead = _typed_job(job, schema_registry, "orders-iceberg")
    identifier = f"lake.{typed.topic.replace('-', '_')}"
    catalog = {"type": "rest", "uri": ICEBERG_REST_URI, "warehouse": ICEBERG_WAREHOUSE}
    typed.manifest["spec"]["job"]["sink"] = {
        "format": "iceberg",
        "table": identifier,
        "catalog": catalog,
    }
    typed.table = lambda: [
        {**row, "id": row["value"]["id"]} for row in iceberg_catalog.rows(identifier)
    ]
    orders = AvroOrders(schema_registry, POISON_EVERY)
    typed.kafka.create_topic(typed.topic, 3)
    typed.kafka.create_topic(dead, 1)
    typed.kafka.produce_avro(typed.topic, orders, 0, TYPED_FIRST)  # registers the schema
    typed.apply()
    try:
        mark = typed.wait_batch(1, 1, 240, "the Iceberg job's first batch")["latestBatch"]
        producer = ProducerLoop(typed.kafka, typed.topic, TYPED_FIRST, rate=20, avro=orders)
        try:
            typed.wait_report(  # a batch of the orders produced while the job runs
                "a batch of orders produced while the job runs",
                lambda r: (
                    committed_batch(r, 1, 1) and r["latestBatch"]["batchId"] > mark["batchId"] and r
                ),
            )
            caused_restarts.update(_pods_of_attempt(typed))
            _kill(typed, typed.status()["driverPod"], "delete")
            report = typed.wait_batch(1, 2, 240, "the Iceberg job restored after the kill")
            assert report["startPath"] == "restored", report
        finally:
            end = producer.stop()
        good = {n for n in range(end) if not orders.is_poison(n)}
        rows = _typed_sink_has(typed, good)
        copies = _dead_letters_have(typed, dead, set(range(end)) - good)
        _assert_typed_once(rows, copies, orders, end, typed.name)
    finally:
        typed.kube.run("delete", "sj", typed.name, "-n", typed.namespace, "--wait=false")


def _relay_job(job: Job) -> tuple[Job, str]:
    """A job in the orders job's namespace that reads orders and writes them to another topic
    of the same brokers (SASL_SSL, the orders job's credentials) through the Kafka sink,
    exactly once (its default): the example manifest without a transform, one executor."""
    suffix = uuid.uuid4().hex[:6]
    relay = Job(
        job.kube, job.kafka, job.namespace, job.store, name="orders-relay",
        topic=f"orders-relay-{suffix}", group=f"orders-relay-{suffix}",
    )  # fmt: skip
    out = f"{relay.topic}-out"
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = relay.name
    spec = manifest["spec"]
    spec["job"]["source"].update(subscribe=[relay.topic], groupId=relay.group)
    del spec["job"]["transform"]  # the record's key and value go out as they came
    spec["job"]["sink"] = {"format": "kafka", "topic": out}
    spec["executor"]["instances"] = 1
    del spec["podTemplate"]  # its spread constraint is for the orders job's two executors
    relay.manifest = manifest
    return relay, out


def _relayed_once(relay: Job, out: str, end: int) -> None:
    """Every order 0..end-1 in `out` exactly once for a read_committed reader (the topic's
    records carry the order's key and value)."""

    def complete() -> Counter[int] | None:
        try:
            copies = relay.kafka.dead_letters(out)  # read_committed, start to end
        except RuntimeError:  # a killed writer's open transaction not yet aborted
            return None
        ids = Counter(json.loads(bytes.fromhex(c["value"]))["id"] for c in copies)
        return ids if set(ids) >= set(range(end)) else None

    ids = wait_for(f"orders 0..{end - 1} in {out}", complete, 180, 2)
    assert set(ids) == set(range(end)), "orders the source never had"
    twice = sorted(i for i, n in ids.items() if n > 1)
    if twice:  # only the producer's own duplicates (librdkafka #4953) may repeat
        in_topic = relay.kafka.keys_counted(relay.topic)
        more = sorted(i for i in twice if ids[i] > in_topic[str(i)])
        assert not more, f"{len(more)} orders written more often than the source has them: {more}"


def test_a_kafka_to_kafka_job_relays_each_order_once_across_a_kill_and_a_warm_redeploy(
    job: Job, caused_restarts: set[str]
) -> None:
    """Issue 43 on the cluster: the orders job's Kafka-to-Kafka variant (sink.format kafka,
    exactly once) while orders arrive: its driver force-deleted (a restore in the epoch: the
    killed writers' open transactions are aborted by their successors), then a warm redeploy
    (the next epoch warms up beside it and starts from the group's offsets after the old
    driver's final commit). A read_committed reader of the output topic sees every order
    once, and the group ends at the log end. Runs after the orders job is deleted."""
    relay, out = _relay_job(job)
    relay.kafka.create_topic(relay.topic, 3)
    relay.kafka.create_topic(out, 3)
    producer = ProducerLoop(relay.kafka, relay.topic, 0, rate=20)
    relay.apply()
    try:
        try:
            relay.wait_batch(1, 1, 240, "the relay's first batch")
            caused_restarts.update(_pods_of_attempt(relay))
            _kill(relay, relay.status()["driverPod"], "delete")
            report = relay.wait_batch(1, 2, 240, "the relay restored after the kill")
            assert report["startPath"] == "restored", report
            relay.patch({"handover": {"mode": "warm"}})  # of no class: restarts nothing
            relay.patch({"redeployNonce": 1})
            report = relay.wait_batch(2, 1, 300, "the relay's next epoch after a warm hand-over")
            assert report["startPath"] == "fresh", report
            assert {e["from"] for e in report["startOffsets"][relay.topic].values()} == {
                "committed"
            }, report
        finally:
            relay.next_id = producer.stop()
        relay.wait_caught_up(180)
        _relayed_once(relay, out, relay.next_id)
        wait_for(  # this run's transactions, where people look
            "status.sinkTransactions counting the new epoch's transactions",
            lambda: (c := relay.status().get("sinkTransactions") or {}).get("transactions") and c,
            60,
            1,
        )
    finally:
        relay.kube.run("delete", "sj", relay.name, "-n", relay.namespace, "--wait=false")


# The step-load scenario (issue 24): records that each take 20 ms of an executor's time
# (orders_transform:paced), at R and then 3R. Each of the 3 tasks of a batch also has ~0.3 s
# of fixed work, so the rate per executor grows with the batch: ~40/s at R with a 7 s
# trigger (~60 records a task), at most ~47/s. One executor keeps up with R (utilization
# ~0.6), 3R needs three (the partitions' cap: 3R / (0.7 x 47) > 2), R again one
# (R / (0.7 x 40) < 1). A batch holds at most 800 records: 114/s with 3 executors, and one
# executor behind at 3R runs ~17 s batches, 3 of them in the 55 s window (a rate needs 3),
# and a rescale's graceful stop waits at most that long for the batch in flight. Short
# windows, so that the scenario takes minutes.
ELASTIC_RATE = 25
ELASTIC_POLICY = {
    "enabled": True,
    "minExecutors": 1,
    "maxExecutors": 3,
    "stabilizationSeconds": 30,
    "metricsWindowSeconds": 55,
    "scaleDownDelaySeconds": 40,
    "catchUpSeconds": 60,
}
ELASTIC_TRIGGER = 7  # seconds


def _elastic_job(job: Job) -> Job:
    """A third job in the orders job's namespace: the example manifest with the paced
    transform, one executor to start with, the autoscaler on and warm hand-overs."""
    suffix = uuid.uuid4().hex[:6]
    elastic = Job(
        job.kube, job.kafka, job.namespace, job.store, name="orders-elastic",
        topic=f"orders-elastic-{suffix}", group=f"orders-elastic-{suffix}",
    )  # fmt: skip
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = elastic.name
    spec = manifest["spec"]
    spec["job"]["source"].update(
        subscribe=[elastic.topic], groupId=elastic.group, maxOffsetsPerTrigger=800
    )
    spec["job"]["transform"] = "orders_transform:paced"
    spec["job"]["trigger"] = {"processingTime": f"{ELASTIC_TRIGGER} seconds"}
    spec["job"]["sink"]["path"] = f"s3a://{elastic.sink_path}"
    spec["executor"]["instances"] = 1
    spec["autoscaler"] = ELASTIC_POLICY
    # each rescale hands over warm: the next driver and its executors start while the
    # running one keeps reading, so the backlog a step builds up is the decision's alone
    spec["handover"] = {"mode": "warm"}
    spread = spec["podTemplate"]["spec"]["topologySpreadConstraints"][0]
    spread["labelSelector"]["matchLabels"][JOB_LABEL] = elastic.name
    elastic.manifest = manifest
    return elastic


def _decided(job: Job, action: str, after: str) -> dict:
    """status.autoscaler.lastDecision once it is `action` (ScaledUp, ScaledDown) made after
    `after` (RFC 3339)."""
    return wait_for(
        f"the autoscaler's {action}",
        lambda: (
            (d := (job.status().get("autoscaler") or {}).get("lastDecision") or {}).get("action")
            == action
            and d["time"] > after
            and d
        ),
        240,
        1,
    )


def _scaled_events(job: Job) -> list[str]:
    events = json.loads(
        job.kube.run(
            "get", "events", "-n", job.namespace, "-o", "json", "--field-selector",
            f"involvedObject.name={job.name}",
        )
    )["items"]  # fmt: skip
    return sorted(e["reason"] for e in events if e["reason"] in ("ScaledUp", "ScaledDown"))


def _step(job: Job, producer: ProducerLoop, rate: float, target: int) -> tuple[ProducerLoop, dict]:
    """Steps the producer to `rate` and follows the autoscaler to `target` executors: seconds
    from the step to the decision, to a batch committed by the new executors, and to the lag
    back at its steady level (at most three trigger intervals of input)."""
    status = job.status()
    epoch, attempt = status["epoch"], status["attempt"]
    action = "ScaledUp" if target > status["executors"] else "ScaledDown"
    job.next_id = producer.stop()
    producer = ProducerLoop(job.kafka, job.topic, job.next_id, rate=rate)
    stepped, since = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    decision = _decided(job, action, since)
    decided = time.monotonic()
    assert (decision["fromExecutors"], decision["toExecutors"]) == (status["executors"], target)
    job.wait_report(
        f"a batch of attempt {attempt + 1} committed by {target} executors",
        lambda r: (
            committed_batch(r, epoch, attempt + 1) and len(r.get("executors") or []) == target and r
        ),
        240,
    )
    reading = time.monotonic()
    steady = rate * 3 * ELASTIC_TRIGGER

    def steady_lag() -> bool | Unmet:
        status = job.status()
        seen = {"attempt": status.get("attempt"), "lag": status.get("lag")}
        return (seen["attempt"] == attempt + 1 and (seen["lag"] or 0) <= steady) or Unmet(**seen)

    # The backlog of the minutes before the new executors read drains at what 3 executors
    # read beyond 3R: 183 s of a 240 s bound in a green run (CI run of 0b062e4, the bed
    # beside the Spark tier), over it in the next; over 480 s in loaded runs on this week's
    # slower hosts (docs/ci.md, runs 58 and 60), within it in stop 47's and 48's CI. A job
    # that cannot keep up only grows its lag, so a longer bound passes nothing that does not
    # drain.
    wait_for(f"lag at most {steady:.0f} in attempt {attempt + 1}", steady_lag, 900, 1)
    sample = {
        "action": action,
        "from": status["executors"],
        "to": target,
        "rate": rate,
        "decisionSeconds": round(decided - stepped, 1),
        "newExecutorsReadingSeconds": round(reading - stepped, 1),
        "lagSteadySeconds": round(time.monotonic() - stepped, 1),
        "seconds": round(decided - stepped, 1),
        "reason": decision["reason"],
    }
    return producer, sample


# Two steps of up to 240 s to decide, 240 s to read and 900 s to drain each, then the sink's
# 240 s: pytest's 600 s default (592 s in a green run) is not this scenario's bound.
@pytest.mark.timeout(3000)
def test_the_autoscaler_follows_a_step_load_once_per_step_exactly_once(
    job: Job, caused_restarts: set[str]
) -> None:
    """Scenario (issue 24): a job on the bed's replicated brokers whose records each take
    20 ms of an executor (orders_transform:paced), autoscaled within [1, 3] executors. One
    executor keeps up with R; the producer steps to 3R: one ScaledUp 1 -> 3 (a restore in the
    epoch, handed over warm), the lag back at steady; back to R: one ScaledDown 3 -> 1 after
    the delay. Every record exactly once over the whole run. Runs after the other jobs are
    deleted: the workers are its own."""
    elastic = _elastic_job(job)
    elastic.kafka.create_topic(elastic.topic, 3)
    producer = ProducerLoop(elastic.kafka, elastic.topic, 0, rate=ELASTIC_RATE)
    elastic.apply()
    samples = []
    try:
        elastic.wait_batch(1, 1, 240, "the elastic job's first batch")
        steady = wait_for(
            "the autoscaler holding one executor at R",
            lambda: (a := elastic.status().get("autoscaler") or {}).get("action") == "hold" and a,
            180,
            1,
        )
        caused_restarts.update(_pods_of_attempt(elastic))
        producer, up = _step(elastic, producer, 3 * ELASTIC_RATE, 3)
        caused_restarts.update(_pods_of_attempt(elastic))
        producer, down = _step(elastic, producer, ELASTIC_RATE, 1)
        samples = [{**up, "steadyAtR": steady}, down]
    finally:
        elastic.next_id = producer.stop()
    rows = elastic.wait_sink_has_all(240)
    elastic.assert_exactly_once(rows)
    status = elastic.status()
    assert (status["epoch"], status["attempt"]) == (1, 3), status  # one rescale per step
    handover = status.get("handover") or {}
    assert (handover.get("phase"), handover.get("attempt")) == ("Started", 3), handover
    assert _scaled_events(elastic) == ["ScaledDown", "ScaledUp"]
    elastic.kube.run("delete", "sj", elastic.name, "-n", elastic.namespace, "--wait=false")
    _write_results(
        "autoscaler_step_seconds",
        f"a job of 20 ms per record (orders_transform:paced), autoscaled within [1, 3] "
        f"executors ({json.dumps(ELASTIC_POLICY)}), each rescale a warm hand-over, the "
        f"producer stepped from {ELASTIC_RATE}/s to {3 * ELASTIC_RATE}/s and back: seconds "
        "from each step to the "
        "autoscaler's decision (seconds), to the first batch the new executors committed, and "
        f"to the lag back at three trigger intervals ({ELASTIC_TRIGGER} s) of input",
        samples,
        180,
    )


INVALID = {
    "both subscribe and subscribePattern": (
        {"subscribe": ["a"], "subscribePattern": "a.*"},
        ["spec.job.source", "subscribePattern"],
    ),
    "maxOffsetsPerTrigger 0": ({"maxOffsetsPerTrigger": 0}, ["maxOffsetsPerTrigger"]),
}


@pytest.mark.parametrize("case", list(INVALID), ids=list(INVALID))
def test_invalid_manifests_are_rejected_naming_the_field(
    case: str, kube: Kube, operator_release: str
) -> None:
    """Scenario 6: the API server rejects the manifest and names the field."""
    source_change, fields = INVALID[case]
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["name"] = "invalid"
    manifest["spec"]["job"]["source"].update(source_change)
    with pytest.raises(RuntimeError) as rejected:
        kube.run("apply", "-n", "default", "-f", "-", input=yaml.safe_dump(manifest))
    message = str(rejected.value)
    assert 'StreamingJob "invalid" is invalid' in message, message
    for name in fields:
        assert name in message, message
    with pytest.raises(RuntimeError, match=r"NotFound|not found"):
        kube.run("get", "sj", "invalid", "-n", "default")
