"""The kind cluster of the end-to-end bed and kubectl against it: `scripts/kind/up.sh` brings
the cluster up (offline node image, the project's images loaded), `Kube` runs kubectl and
watches ConfigMaps, and the image tags and node placement every in-cluster service shares.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from devbed import polling
from devbed.kafka_jars import kafka_version

REPO_ROOT = Path(__file__).resolve().parents[1]
# The bed's image registry as the host and the nodes name it (scripts/kind/registry.sh)
REGISTRY = "localhost:5001"
T = TypeVar("T")
# A watch is re-established (after a fresh list) this often: a stalled watch stream costs at
# most this long instead of the whole wait.
WATCH_RELIST_S = 5

CLUSTER = os.environ.get("STREAMJOB_KIND_CLUSTER", "streamingjob-e2e")


def run_script(*args: str) -> str:
    """Runs a project script; its stdout is its answer, its stderr goes to the test log."""
    done = subprocess.run(
        ["bash", *args], cwd=REPO_ROOT, check=True, stdout=subprocess.PIPE, text=True
    )
    return done.stdout.strip().splitlines()[-1]


def project_version() -> str:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


@dataclass(frozen=True)
class Images:
    """The project's image tags, as images/build.sh tags them and up.sh loads them."""

    spark: str
    operator: str
    kafka: str
    orders: str  # the orders job's own image (examples/user-image), FROM spark


def project_images() -> Images:
    version = project_version()
    return Images(
        spark=f"streamingjob/spark:{version}",
        orders=f"{REGISTRY}/streamingjob/orders:{version}",
        operator=f"streamingjob/operator:{version}",
        kafka=f"streamingjob/kafka:{kafka_version()}-{version}",
    )


# The test services run on the control plane, the jobs on the workers (scripts/kind/up.sh).
ON_CONTROL_PLANE = {
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [
        {
            "key": "node-role.kubernetes.io/control-plane",
            "operator": "Exists",
            "effect": "NoSchedule",
        }
    ],
}


# How long a kubectl call waits for an API server it cannot reach before failing the test
UNREACHABLE_S = 90
RETRY_PAUSE_S = 2
# kubectl's errors for a request that was never sent (no connection, no TLS session): safe to
# send again, writes included. A timeout awaiting a reply is not among them.
_NOT_SENT = ("TLS handshake timeout", "connect: connection refused", "dial tcp")


def _never_sent(stderr: str) -> bool:
    return "Unable to connect to the server" in stderr and any(m in stderr for m in _NOT_SENT)


class Kube:
    """kubectl against the e2e cluster; every call raises on failure with kubectl's stderr."""

    def __init__(self, kubectl: str, kubeconfig: str):
        self.base = [kubectl, "--kubeconfig", kubeconfig]
        self.kubeconfig = kubeconfig
        self._core: Any = None  # a CoreV1Api once a wait needs one (kubernetes ships no types)

    def run(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        """kubectl's output; a call that never reached the API server is made again for up to
        UNREACHABLE_S (the bed's control plane shares two cores with CI's other tiers: CI
        stop 50 failed a scenario on one "TLS handshake timeout" of a read)."""
        deadline = time.monotonic() + UNREACHABLE_S
        while True:
            done = subprocess.run(
                [*self.base, *args], input=input, capture_output=True, text=True, timeout=timeout
            )
            if done.returncode == 0:
                return done.stdout
            if not _never_sent(done.stderr) or time.monotonic() > deadline:
                raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
            time.sleep(RETRY_PAUSE_S)

    def apply(self, manifest: str, namespace: str) -> None:
        self.run("apply", "-n", namespace, "-f", "-", input=manifest)

    def get(self, kind: str, name: str, namespace: str) -> dict:
        return json.loads(self.run("get", kind, name, "-n", namespace, "-o", "json"))

    def logs(self, pod: str, namespace: str) -> str:
        return self.run("logs", pod, "-n", namespace)

    def wait_pod_done(self, pod: str, namespace: str, timeout: float = 300) -> str:
        """Waits until the pod Succeeded or Failed and returns the phase."""
        deadline = time.monotonic() + timeout
        phase = "Unknown"
        while time.monotonic() < deadline:
            phase = self.get("pod", pod, namespace).get("status", {}).get("phase", "Unknown")
            if phase in ("Succeeded", "Failed"):
                return phase
            time.sleep(1)
        raise TimeoutError(
            f"pod {namespace}/{pod} still {phase} after {timeout}s:\n"
            + self.run("describe", "pod", pod, "-n", namespace)
        )

    def wait_configmap(
        self,
        name: str,
        namespace: str,
        accept: Callable[[dict], T | None],
        timeout: float,
        what: str,
    ) -> T:
        """The first truthy `accept(data)` of the ConfigMap, on a watch instead of a poll: the
        scenarios time restarts that are CPU-bound on a small machine, and a kubectl process
        per poll would compete with them (and add its own latency to the measurement)."""
        from kubernetes import client, config, watch

        if self._core is None:
            self._core = client.CoreV1Api(config.new_client_from_config(self.kubeconfig))
        selector = f"metadata.name={name}"
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while (remaining := deadline - time.monotonic()) > 0:
            listed = self._core.list_namespaced_config_map(namespace, field_selector=selector)
            for item in listed.items:
                last = item.data or {}
                if found := accept(last):
                    return found
            stream = watch.Watch().stream(
                self._core.list_namespaced_config_map, namespace, field_selector=selector,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=max(1, math.ceil(min(remaining, WATCH_RELIST_S))),
            )  # fmt: skip
            try:
                for event in stream:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        last = event["object"].data or {}
                        if found := accept(last):
                            return found
            except client.ApiException as exc:
                if exc.status != 410:  # 410: the resourceVersion expired; list again
                    raise
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last}")

    def wait_ready(self, pod: str, namespace: str, timeout: float = 240) -> None:
        try:
            self.run(
                "wait", "--for=condition=Ready", f"pod/{pod}", "-n", namespace,
                f"--timeout={int(timeout)}s", timeout=timeout + 30,
            )  # fmt: skip
        except RuntimeError as exc:
            detail = self.run("describe", "pod", pod, "-n", namespace)
            raise AssertionError(f"{exc}\n{detail}") from exc


def kind_up() -> str:
    """scripts/kind/up.sh: the cluster (reused when healthy) with the images; its kubeconfig."""
    return run_script("scripts/kind/up.sh")


def kind_down() -> None:
    subprocess.run(["bash", "scripts/kind/down.sh"], cwd=REPO_ROOT, check=False)


def kubectl_for(kubeconfig: str) -> Kube:
    bin_dir = run_script("scripts/k8s-toolchain.sh", "all")
    return Kube(str(Path(bin_dir) / "kubectl"), kubeconfig)


def wait_for(what: str, probe, timeout: float = 180, interval: float = 0.5):
    """`devbed.polling.wait_for` with the scenarios' argument order and pace."""
    return polling.wait_for(probe, timeout, what, interval)


def worker_nodes(kube: Kube) -> list[str]:
    nodes = json.loads(kube.run("get", "nodes", "-o", "json"))["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {})
    )
