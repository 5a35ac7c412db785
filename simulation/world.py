"""The simulated cluster around the operator: nodes whose kubelets renew their leases and run
pods, driver processes (driver.py), the job's data (data.py), a cleanup Job runner, and the
API server (cluster.py) they all go through. One discrete-event queue orders everything;
every delay comes from the history's seeded random stream, so a seed replays exactly."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_app.api.exit_codes import EXIT_INVALID, REFUSED_MARK, RUNNER_EXIT_REASONS
from streamingjob_operator.api.naming import (
    LABEL_JOB,
    LABEL_ROLE,
    job_configmap_name,
    report_configmap_name,
)
from streamingjob_operator.rules.observed import iso

from .cluster import LOST_WHEN_CREATED, Server
from .data import DeadLetterTopic, Files, FileSink, Kafka, Table
from .driver import Driver
from .driver_world import Failing, Sinks
from .driver_world import World as DriverWorld
from .nodes import Node, Nodes

NAMESPACE = "team"
OOM = "OOMKilled"
WARM_UPS = (2.0, 45.0)  # seconds a driver waiting for a go takes to report ready


@dataclass
class Failure:
    """A driver failure the world caused: its pod, the job's uid, the cause the operator
    must name (status and an Event), and when."""

    pod: str
    uid: str
    cause: str
    at: float
    status_seen: bool = False
    event_seen: bool = False


class World(Nodes):
    def __init__(self, seed: int, partitions: int = 2) -> None:
        super().__init__(seed)
        self.server = Server(self.clock)
        self.server.delete_pod = self._delete_pod
        poison = random.Random(f"poison-{seed}")  # its own stream: the others draw as before
        self.kafka = Kafka(partitions, poison.choice([0, 3, 5, 8]), poison.randrange(1000))
        self.dead_letter = DeadLetterTopic()
        self.files = Files()
        self.sinks = Sinks(FileSink(), Table())
        self.nodes: dict[str, Node] = {}
        self.drivers: dict[str, Driver] = {}  # by pod uid: every process ever started
        self.pull_fail_until = -1.0  # image pulls fail until then (a registry outage)
        self.commit_failures = 0  # the next group commits that fail (a coordinator away)
        self.crash_at_stage = ""  # the next driver to reach this stage crashes there
        self.crash_exit: tuple[int, str, str] = (1, "", "")  # with this code, reason, message
        self.failures: list[Failure] = []  # driver failures the world caused (reported.py)
        self.refused: set[str] = set()  # jobs (uids) the runner refused, no new target since
        self.data_loss_held: set[str] = set()  # jobs (uids) failing on data loss (driver.py)
        # an offsets action moved a group (offsets.py): the checker hears of it
        self.offsets_moved: Callable[[str, dict[Any, int]], None] = lambda group, moved: None
        self.watch_stalled_until = -1.0
        self.unfenced: list[str] = []  # reading drivers on live nodes force-deleted
        # driver pods the scheduler placed on a node their operator counted lost when it
        # created them (invariants: "doomed placement")
        self.doomed: list[str] = []
        self.api_back_at = 0.0  # when the last control-plane outage ended
        self.api_down_at = 0.0  # and when it began
        # A driver that waits for a go (a hand-over's, a standby) reports ready once its
        # Spark session and executors are up: seconds on a quiet cluster, minutes on a busy
        # one, across the operator's readings (its own stream: the others draw as before)
        self.warm_up = random.Random(f"warm-up-{seed}").choice(WARM_UPS)
        for _ in range(3):
            self.add_node()

    # --- pods: scheduling, starting, deleting ----------------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        return self.server.of_kind("Pod")

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.server.get("Pod", NAMESPACE, name)

    def pod_changed(self, pod: dict[str, Any]) -> None:
        self.server.bump(pod)
        self.at(self.delay(0.1, 1.0), "wake", pod["metadata"]["labels"].get(LABEL_JOB, ""))

    def kubelet(self, name: str) -> None:
        """The next step of a pod's life on its node: scheduled, started, or its process's
        exit recorded."""
        pod = self.pod(name)
        if pod is None:
            return
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            self.schedule(pod)
            return
        if self._until_thawed(node_name, "kubelet", name):
            return
        if not self.nodes[node_name].alive or self.server.down():
            if self.nodes[node_name].alive:
                self.at(1.0, "kubelet", name)  # the status update waits for the API server
            return
        if self.clock.t < self.pull_fail_until and pod["metadata"]["uid"] not in self.drivers:
            if not pod["status"].get("containerStatuses"):
                waiting = {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}
                pod["status"]["containerStatuses"] = [
                    {"name": "driver", "state": {"waiting": waiting}}
                ]
                self.pod_changed(pod)
            self.at(10.0, "kubelet", name)  # the kubelet's next pull
            return
        driver = self.drivers.get(pod["metadata"]["uid"])
        if driver is None:
            self.start_process(pod, node_name)
        elif not driver.alive:
            self.record_exit(pod, driver)

    def schedule(self, pod: dict[str, Any]) -> None:
        """The scheduler: any node its node affinity allows and the node lifecycle controller
        has not tainted yet (a node that stopped renewing still takes pods for its
        node-monitor grace); none fits: it tries again."""
        name = pod["metadata"]["name"]
        fits = sorted(set(self.nodes) - self.tainted() - _kept_off(pod))
        if not fits:
            self.at(2.0, "kubelet", name)
            return
        chosen = self.rng.choice(fits)
        pod["spec"]["nodeName"] = chosen
        lost = pod["metadata"].get("annotations", {}).get(LOST_WHEN_CREATED, "").split(",")
        if pod["metadata"]["labels"].get(LABEL_ROLE) == "driver" and chosen in lost:
            self.doomed.append(f"{name} placed on {chosen}, counted lost when it was created")
        self.pod_changed(pod)
        self.at(self.delay(1, 4), "kubelet", name)

    def start_process(self, pod: dict[str, Any], node: str) -> None:
        job = pod["metadata"]["labels"][LABEL_JOB]
        cm = self.server.get("ConfigMap", NAMESPACE, job_configmap_name(job))
        owner = pod["metadata"]["ownerReferences"][0]["uid"]
        driver = Driver.of_pod(pod, (cm or {}).get("data", {}).get("job.yaml", ""), owner, node)
        driver.job = job
        spec = (self.server.get("StreamingJob", NAMESPACE, job) or {}).get("spec") or {}
        driver.executors = (spec.get("executor") or {}).get("instances", 1)
        if pod["metadata"].get("deletionTimestamp"):
            driver.stop_requested = True
        self.drivers[driver.uid_of_pod] = driver
        pod["status"]["phase"] = "Running"
        pod["status"]["containerStatuses"] = [{"name": "driver", "state": {"running": {}}}]
        self.pod_changed(pod)
        launch = " ".join(driver.argv[driver.argv.index("--epoch") :])
        self.log(f"{driver.pod} started on {node} ({launch})")
        warm_up = self.warm_up if driver.wait_for_go else 0.0
        self.at(self.delay(0.5, 3) + warm_up, "driver", driver.uid_of_pod)

    def record_exit(self, pod: dict[str, Any], driver: Driver) -> None:
        code = driver.exit_code or 0
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        term = {
            "exitCode": code,
            "reason": driver.term_reason or ("Error" if code else "Completed"),
        }
        if driver.term_message:
            term["message"] = driver.term_message
        pod["status"]["containerStatuses"] = [{"name": "driver", "state": {"terminated": term}}]
        if pod["metadata"].get("deletionTimestamp"):
            self.server.remove("Pod", NAMESPACE, driver.pod)  # the graceful deletion completes
            self.at(self.delay(0.1, 1.0), "wake", driver.job)
            # the operators' pod watch delivers its last state (handlers.driver_pod_event)
            stalled = max(self.watch_stalled_until - self.clock.t, 0)
            self.at(stalled + 0.5, "pod-deleted", copy.deepcopy(pod))  # no draw: seeds keep
            return
        self.pod_changed(pod)

    def _delete_pod(self, namespace: str, name: str, force: bool) -> bool:
        """The API server's side of a pod deletion, with its kubelet's to follow."""
        pod = self.pod(name)
        if pod is None:
            return True
        uid = pod["metadata"]["uid"]
        driver = self.drivers.get(uid)
        node = self.nodes.get(pod["spec"].get("nodeName") or "")
        started = driver is not None and driver.alive
        grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        if not force and driver is not None and not started and node is not None and node.alive:
            # its process ended before its kubelet told: the kubelet records the exit on the
            # deleted pod, then removes it (the watch shows that last state)
            pod["metadata"]["deletionTimestamp"] = iso(self.clock())
            self.record_exit(pod, driver)
            return True
        if force or node is None or (node.alive and not started):
            self.server.remove("Pod", namespace, name)
            live = node is not None and node.alive and not self.silent_for_a_grace(node)
            if force and started and live and driver and node and driver.reading:
                self.unfenced.append(f"{name} force-deleted while reading on live {node.name}")
            if started:
                # its kubelet (if alive) stops the container as for any deletion: SIGTERM at
                # its next sync, SIGKILL after the pod's grace period
                self.at(self.delay(0.5, 3), "sigterm", uid)
                self.at(grace, "kill", uid)
            self.at(self.delay(0.1, 1.0), "wake", pod["metadata"]["labels"].get(LABEL_JOB, ""))
            return True
        if not pod["metadata"].get("deletionTimestamp"):
            pod["metadata"]["deletionTimestamp"] = iso(self.clock())
            self.pod_changed(pod)
            self.at(self.delay(0.1, 1), "sigterm", uid)
            self.at(grace, "kill", uid)  # the kubelet's SIGKILL after the grace period
        return False

    def sigterm(self, uid: str) -> None:
        driver = self.drivers.get(uid)
        if driver is None or not driver.alive or not self.nodes[driver.node].alive:
            return
        if self._until_thawed(driver.node, "sigterm", uid):
            return
        if driver.stage in ("start", "catch-up", "resolve", "restore"):
            driver.exit(143)  # the runner's SIGTERM handler comes with the query (runner.run)
            self.log(f"{driver.pod} terminated at its start")
            if self.pod(driver.pod) is not None:
                self.at(0.5, "kubelet", driver.pod)
            return
        driver.stop_requested = True

    def kill(self, uid: str) -> None:
        driver = self.drivers.get(uid)
        if driver is not None and driver.alive and self.nodes[driver.node].alive:
            if self._until_thawed(driver.node, "kill", uid):
                return
            driver.exit(137)
            self.log(f"{driver.pod} killed")
            if self.pod(driver.pod) is not None:
                self.at(0.5, "kubelet", driver.pod)

    # --- drivers ---------------------------------------------------------------------------

    def driver_world(self) -> DriverWorld:
        return DriverWorld(
            kafka=self.kafka,
            files=self.files,
            sinks=self.sinks,
            report=self._report,
            read_go=self._read_go,
            commit_fails=self._commit_fails,
            log=self.log,
            dead_letter=self.dead_letter,
            failed=self.failed,
            data_loss_held=self.data_loss_held,
            now=self.clock.t,
        )

    def _commit_fails(self) -> bool:
        if self.commit_failures:
            self.commit_failures -= 1
            return True
        return False

    def driver(self, uid: str) -> None:
        driver = self.drivers[uid]
        name = driver.pod
        if not driver.alive or self._until_thawed(driver.node, "driver", uid):
            return
        if self._crashes_now(driver) and self.nodes[driver.node].alive:
            where, self.crash_at_stage = self.crash_at_stage, ""
            code, driver.term_reason, driver.term_message = self.crash_exit
            self.log(f"{name} crashed at {where} (armed): exit {code} {driver.term_reason}")
            driver.exit(code)
            self.failed(driver, cause_of(code, driver.term_reason, driver.term_message))
            self.at(self.delay(0.2, 1), "kubelet", name)
            return
        before = driver.stage
        driver.step(self.driver_world())
        if driver.stage != before:
            self.log(f"{name}: {before} -> {driver.stage}")
        if driver.exit_code:  # the runner's own failure (a catch-up that could not commit)
            self.failed(driver, cause_of(driver.exit_code, "", ""))
        if driver.alive:
            self.at(self.delay(0.3, 2.5), "driver", uid)
        elif self.pod(name) is not None:
            self.at(self.delay(0.2, 1), "kubelet", name)

    def _crashes_now(self, driver: Driver) -> bool:
        """At the armed stage; "dead-letter+1": after the batch's first dead-letter
        transaction, before the next (its stage stays dead-letter until all are done);
        "sink+1" likewise between the exactly-once Kafka sink's transactions."""
        if self.crash_at_stage == "dead-letter+1":
            return driver.stage == "dead-letter" and bool(driver.dead_done)
        if self.crash_at_stage == "sink+1":  # between two of the Kafka sink's transactions
            return driver.stage == "sink" and driver.sink_tasks > 0
        return driver.stage == self.crash_at_stage

    def _report(self, job: str, key: str, value: dict[str, Any]) -> bool:
        cm = self.server.get("ConfigMap", NAMESPACE, report_configmap_name(job))
        if cm is None or self.server.down():
            return False
        cm.setdefault("data", {})[key] = json.dumps(value)
        self.server.bump(cm)  # no wake: the operator reads the report when it looks
        return True

    def _read_go(self, configmap: str) -> dict[str, Any] | None:
        if self.server.down():
            return None
        cm = self.server.get("ConfigMap", NAMESPACE, configmap)
        raw = ((cm or {}).get("data") or {}).get("go.json")
        return json.loads(raw) if raw else None

    def failed(self, driver: Failing, cause: str) -> None:
        """Noted for the reporting invariant, unless the pod was on its way out anyway."""
        pod = self.pod(driver.pod)
        if (
            pod is not None
            and not pod["metadata"].get("deletionTimestamp")
            and not driver.counted_lost
        ):
            self.failures.append(Failure(driver.pod, driver.uid, cause, self.clock.t))
        if cause == "InvalidSpec":  # held Invalid until a change sets a new target
            self.refused.add(driver.uid)

    def readers(self, job: str) -> list[Driver]:
        """The job's drivers reading now. Not one halted on a frozen node, nor one whose pod
        the operator force-deleted as lost (an orphan until its node's kubelet kills it: what it
        writes, the checkpoint's logs arbitrate, and the exactly-once checks see)."""
        return [
            d
            for d in self.drivers.values()
            if d.job == job
            and d.alive
            and d.reading
            and not self.frozen(d.node)
            and not self.orphaned(d)
        ]

    # --- the cleanup Job (deleteOnJobDeletion) -------------------------------------------

    def run_cleanup_jobs(self) -> None:
        for job in self.server.of_kind("Job"):
            command = job["spec"]["template"]["spec"]["containers"][0]["command"]
            path = next(a for a in reversed(command) if "://" in a)
            self.files.delete_tree(path)
            self.log(f"cleanup Job deleted {path}")
            self.server.remove("Job", NAMESPACE, job["metadata"]["name"])


def cause_of(code: int, reason: str, message: str) -> str:
    """What the runner's exit says (spark_app/kafka/config.py): its own causes by code, its
    refusal by the mark leading the message; any other exit is a failure of the query."""
    if reason == OOM:
        return OOM
    if code == EXIT_INVALID:
        return "InvalidSpec" if message.startswith(REFUSED_MARK) else "DriverFailed"
    return RUNNER_EXIT_REASONS.get(code, "DriverFailed")


def _kept_off(pod: dict[str, Any]) -> set[str]:
    """The nodes a pod's required node affinity excludes (hostname NotIn, ANDed into every
    term: the only form the operator writes)."""
    affinity = pod["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return {
        value
        for term in required.get("nodeSelectorTerms") or []
        for expr in term.get("matchExpressions") or []
        if expr.get("key") == "kubernetes.io/hostname" and expr.get("operator") == "NotIn"
        for value in expr.get("values") or []
    }
