"""Where the seconds of a driver restart go: kills the running driver of a StreamingJob on the
kind cluster and prints a timeline (seconds after the kill) of what the API server, the pods'
logs and the runner's report show, until the first restored batch is committed.

    PYTHONPATH=.:operator python -m tests.e2e.restart_timeline --kubeconfig K \
        --namespace NS [--job orders] [--method delete|process] [--kills 1]

Sources: a `kubectl get pods --watch` (times of arrival here), `kubectl logs --timestamps` of
the new driver and its executors (kubelet timestamps, same clock: the kind node is a container
on this host) and the report ConfigMap polled every 0.1 s. A development tool; the e2e tier
measures the same interval in test_driver_kills_restore_from_the_checkpoint_exactly_once.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from devbed.kind_bed import committed_batch
from devbed.kind_cluster import Kube

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB_LABEL = "sparkkafka.dev/job"

# Driver / executor log lines worth a row (regex → label); the first match of each counts.
DRIVER_MARKS = [
    (r".", "driver: first log line"),
    (r"Running Spark version", "driver: SparkContext starting"),
    (r"Successfully started service 'sparkDriver'", "driver: RPC up"),
    (r"Requesting \d+ executor|Going to request \d+ executors", "driver: executors requested"),
    (r"SchedulerBackend is ready for scheduling", "driver: scheduler ready"),
    (r"restored from checkpoint batch|fresh start", "driver: checkpoint read"),
    (r"Starting \[id =|Starting new streaming query", "driver: query starting"),
    (r"^batch \d+:", "driver: first batch line"),
]
EXECUTOR_MARKS = [
    (r".", "executor: first log line"),
    (r"Connecting to driver", "executor: connecting to driver"),
    (r"Successfully registered with driver", "executor: registered"),
    (r"Got assigned task", "executor: first task"),
    (r"Finished task", "executor: first task finished"),
]


def parse_ts(stamp: str) -> float:
    stamp = stamp.rstrip("Z")
    if "." in stamp:
        main, frac = stamp.split(".", 1)
        stamp = f"{main}.{frac[:6]}"
        fmt = "%Y-%m-%dT%H:%M:%S.%f"
    else:
        fmt = "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(stamp, fmt).replace(tzinfo=UTC).timestamp()


class Timeline:
    def __init__(self, kube: Kube, namespace: str, job: str):
        self.kube, self.kubectl, self.namespace, self.job = kube, kube.base, namespace, job
        self.rows: list[tuple[float, str]] = []
        self.lock = threading.Lock()

    def add(self, when: float, what: str) -> None:
        with self.lock:
            self.rows.append((when, what))

    def run(self, *args: str) -> str:
        return subprocess.run(
            [*self.kubectl, *args], capture_output=True, text=True, check=True
        ).stdout

    def cpu_seconds(self) -> dict[str, float | None]:
        pods = json.loads(
            self.run(
                "get", "pods", "-n", self.namespace, "-l", f"{JOB_LABEL}={self.job}", "-o", "json"
            )
        )["items"]
        return {
            p["metadata"].get("labels", {}).get("spark-role", "?"): _cpu_of(p["metadata"]["uid"])
            for p in pods
            if "deletionTimestamp" not in p["metadata"]
        }

    def wait_restored_batch(self, epoch: int, attempt: int) -> dict:
        """Watches the report (a poll would compete for the CPU the restart needs) until the
        run (epoch, attempt) committed a batch; rows for its first report and that batch."""
        seen = False

        def accept(data: dict) -> dict | None:
            nonlocal seen
            report = json.loads(data.get("report.json") or "{}")
            if (report.get("epoch"), report.get("attempt")) == (epoch, attempt) and not seen:
                seen = True
                self.add(time.time(), f"report: attempt {attempt} {report.get('state')}")
            return committed_batch(report, epoch, attempt)

        return self.kube.wait_configmap(
            f"{self.job}-report", self.namespace, accept, 240, f"attempt {attempt} committing"
        )

    def watch_pods(self, stop: threading.Event) -> None:
        proc = subprocess.Popen(
            [
                *self.kubectl, "get", "pods", "-n", self.namespace, "-l",
                f"{JOB_LABEL}={self.job}", "--watch", "--output-watch-events", "-o", "json",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.watch = proc
        seen: dict[str, str] = {}
        decoder = json.JSONDecoder()
        buffer = ""
        while not stop.is_set():
            line = proc.stdout.readline()
            if not line:
                break
            buffer += line
            try:
                event, _ = decoder.raw_decode(buffer.strip())
            except json.JSONDecodeError:
                continue
            buffer = ""
            now = time.time()
            pod = event["object"]
            name = pod["metadata"]["name"]
            role = pod["metadata"].get("labels", {}).get("spark-role", "?")
            phase = pod.get("status", {}).get("phase", "")
            statuses = pod.get("status", {}).get("containerStatuses") or []
            running = any("running" in (s.get("state") or {}) for s in statuses)
            ready = all(s.get("ready") for s in statuses) if statuses else False
            deleting = "deletionTimestamp" in pod["metadata"]
            state = f"{event['type']} {phase}{' running' if running else ''}" + (
                " ready" if ready else ""
            )
            state += " deleting" if deleting else ""
            if event["type"] == "DELETED":
                state = "DELETED"
            if seen.get(name) != state:
                seen[name] = state
                self.add(now, f"pod {role} {name[-28:]}: {state}")
        proc.terminate()

    def logs(self, pod: str, marks: list[tuple[str, str]]) -> None:
        try:
            out = self.run("logs", pod, "-n", self.namespace, "--timestamps")
        except subprocess.CalledProcessError:
            return
        pending = list(marks)
        for line in out.splitlines():
            stamp, _, text = line.partition(" ")
            for pattern, label in list(pending):
                if re.search(pattern, text):
                    self.add(parse_ts(stamp), f"{label}  | {text[:110]}")
                    pending.remove((pattern, label))


NODE = "streamingjob-e2e-control-plane"
CPUACCT = "/sys/fs/cgroup/cpuacct/kubelet.slice/kubelet-kubepods.slice"


def _cpu_of(uid: str) -> float | None:
    """CPU seconds the pod used so far (cgroup v1 cpuacct of the kind node), None if unknown."""
    pattern = f"*pod{uid.replace('-', '_')}.slice"
    done = subprocess.run(
        ["docker", "exec", NODE, "sh", "-c",
         f"cat $(find {CPUACCT} -maxdepth 2 -type d -name '{pattern}')/cpuacct.usage"],
        capture_output=True, text=True,
    )  # fmt: skip
    return (
        round(int(done.stdout) / 1e9, 2) if done.returncode == 0 and done.stdout.strip() else None
    )


def kill_once(t: Timeline, method: str) -> float:
    status = json.loads(t.run("get", "streamingjob", t.job, "-n", t.namespace, "-o", "json"))[
        "status"
    ]
    epoch, attempt, pod = status["epoch"], status["attempt"], status["driverPod"]
    t.rows.clear()
    stop = threading.Event()
    watcher = threading.Thread(target=t.watch_pods, args=(stop,), daemon=True)
    watcher.start()
    time.sleep(1.0)
    with t.lock:
        t.rows.clear()
    started = time.time()
    if method == "delete":
        t.run(
            "delete", "pod", pod, "-n", t.namespace, "--force", "--grace-period=0", "--wait=false"
        )
    else:
        t.run(
            "exec", pod, "-n", t.namespace, "--", "sh", "-c",
            "kill -9 $(pgrep -f '^/opt/venv/bin/python.*run_job.py')",
        )  # fmt: skip
    t.add(started, f"KILL ({method}) {pod}")
    report = t.wait_restored_batch(epoch, attempt + 1)
    done = time.time()
    cpu = t.cpu_seconds()
    t.add(done, f"report: batch {report.get('latestBatch', {}).get('batchId')} committed "
          f"(restored {report.get('restoredBatch')})")  # fmt: skip
    time.sleep(0.5)
    stop.set()
    t.watch.terminate()
    status = json.loads(t.run("get", "streamingjob", t.job, "-n", t.namespace, "-o", "json"))[
        "status"
    ]
    driver = status["driverPod"]
    t.logs(driver, DRIVER_MARKS)
    pods = json.loads(
        t.run("get", "pods", "-n", t.namespace, "-l", f"{JOB_LABEL}={t.job}", "-o", "json")
    )["items"]
    for p in pods:
        labels = p["metadata"].get("labels", {})
        if labels.get("spark-role") == "executor" and p["metadata"]["name"].startswith(driver):
            t.logs(p["metadata"]["name"], EXECUTOR_MARKS)
    for ev in json.loads(t.run("get", "events", "-n", t.namespace, "-o", "json"))["items"]:
        when = ev.get("eventTime") or ev.get("lastTimestamp") or ev.get("firstTimestamp")
        if when and parse_ts(when) >= started - 1:
            involved = ev["involvedObject"].get("name", "")[-20:]
            t.add(parse_ts(when), f"event {ev['reason']} {involved}: {ev['message'][:80]}")
    for when, what in sorted(t.rows):
        print(f"{when - started:7.2f}  {what}")
    total = done - started
    print(f"TOTAL {total:.2f}s  CPU seconds at that point: {cpu}")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--kubectl", default="")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--job", default="orders")
    parser.add_argument("--method", default="delete", choices=["delete", "process"])
    parser.add_argument("--kills", type=int, default=1)
    args = parser.parse_args()
    kubectl = args.kubectl or (
        subprocess.run(
            ["bash", "scripts/k8s-toolchain.sh", "all"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip().splitlines()[-1]
        + "/kubectl"
    )  # fmt: skip
    t = Timeline(Kube(kubectl, args.kubeconfig), args.namespace, args.job)
    totals = []
    for n in range(args.kills):
        if n:
            time.sleep(8)  # let the new attempt settle (a few batches)
        print(f"--- kill {n + 1}/{args.kills}")
        totals.append(kill_once(t, args.method))
    print("totals:", [round(x, 2) for x in totals])


if __name__ == "__main__":
    main()
