"""Operator benchmark against a real kube-apiserver + etcd (no kubelet: the bench plays it).

    python bench/operator_bench.py [--jobs 1000] [--samples 100] [--out bench/results/operator.json]

Measures, with the operator as a `kopf run` subprocess:
* launch: seconds from the first create of N StreamingJobs (created concurrently) until every
  job has its driver pod (target <= 60 s for 1000);
* relaunch decision latency with N jobs live: a driver is marked Failed, time until the
  relaunched driver pod exists, backoff configured to 0 so only the operator's reaction is
  measured; p50/p99 over --samples failures (target p99 <= 1 s);
* operator RSS (VmHWM and VmRSS of the process, target <= 250 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from kubernetes import watch  # noqa: E402

from devbed.kube_apiserver import KubeAPIServer  # noqa: E402
from tests.integration.operator.kube_helpers import (  # noqa: E402
    Kube,
    job_spec,
    spawn_operator,
)


def _rss_mb(pid: int) -> dict[str, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "operator.json"))
    args = parser.parse_args()

    with KubeAPIServer() as server:
        kube = Kube(server.kubeconfig)
        kube.install_crd()
        ns = kube.namespace()
        operator = spawn_operator(
            server.kubeconfig,
            stderr=open("/tmp/operator-bench.log", "wb"),  # noqa: SIM115
            settings={},  # the operator's production defaults
            STREAMINGJOB_METRICS_PORT="0",
            STREAMINGJOB_KAFKA_POLL_SECONDS="3600",  # Kafka is not what is measured here
            STREAMINGJOB_LOG_LEVEL="WARNING",
        )
        created_at: dict[str, float] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def follow() -> None:
            w = watch.Watch()
            try:
                # plain JSON events: model objects would cost CPU the operator competes for
                for event in w.stream(
                    kube.core.list_namespaced_pod,
                    ns,
                    label_selector="spark-role=driver",
                    deserialize=False,
                ):
                    if event["type"] == "ADDED":
                        name = event["object"]["metadata"]["name"]
                        with lock:
                            created_at.setdefault(name, time.monotonic())
                    if stop.is_set():
                        w.stop()
            except Exception:
                if not stop.is_set():  # the API server going away at the end is expected
                    raise

        threading.Thread(target=follow, daemon=True).start()
        try:
            time.sleep(2)  # let the operator start its watches
            spec = job_spec()
            spec["restartPolicy"] = {
                "maxRestarts": 1000,
                "backoff": {"baseSeconds": 0, "capSeconds": 0},
            }
            names = [f"job-{i:04d}" for i in range(args.jobs)]
            started = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda n: kube.create_job(ns, n, spec), names))
            created = time.monotonic() - started
            expected = {f"{n}-e1-a1-driver" for n in names}
            while True:
                with lock:
                    if expected <= created_at.keys():
                        break
                if time.monotonic() - started > 600:
                    raise SystemExit("not every job got a driver within 600 s")
                time.sleep(0.2)
            with lock:
                launch_s = max(created_at[n] for n in expected) - started

            latencies = []
            for name in names[: args.samples]:
                failed_pod, next_pod = f"{name}-e1-a1-driver", f"{name}-e1-a2-driver"
                t0 = time.monotonic()
                kube.set_terminated(ns, failed_pod, 1)
                while True:
                    with lock:
                        if next_pod in created_at:
                            latencies.append(created_at[next_pod] - t0)
                            break
                    if time.monotonic() - t0 > 60:
                        raise SystemExit(f"{name} not relaunched within 60 s")
                    time.sleep(0.005)
            rss = _rss_mb(operator.pid)
        finally:
            stop.set()
            os.killpg(operator.pid, signal.SIGTERM)
            try:  # kopf cancels 1000 daemons one by one: not what is measured
                operator.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(operator.pid, signal.SIGKILL)
                operator.wait(30)

    result = {
        "jobs": args.jobs,
        "create_seconds": round(created, 2),
        "all_drivers_seconds": round(launch_s, 2),
        "relaunch_samples": len(latencies),
        "relaunch_p50_seconds": round(statistics.median(latencies), 3),
        "relaunch_p99_seconds": round(_percentile(latencies, 0.99), 3),
        "operator_rss_mb": round(rss.get("VmRSS", 0), 1),
        "operator_peak_rss_mb": round(rss.get("VmHWM", 0), 1),
        "targets": {"all_drivers_seconds": 60, "relaunch_p99_seconds": 1, "rss_mb": 250},
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
