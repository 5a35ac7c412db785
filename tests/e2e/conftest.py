"""Fixtures of the end-to-end tier: a kind cluster and kubectl against it.

The cluster comes from `scripts/kind/up.sh` (offline node image, project images loaded).
`make e2e` runs up.sh itself and passes the kubeconfig in STREAMJOB_E2E_KUBECONFIG; without that
variable the session brings the cluster up on its own and deletes it at the end (set
STREAMJOB_E2E_KEEP=1 to keep it for the next run).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _script(*args: str) -> str:
    """Runs a project script; its stdout is its answer, its stderr goes to the test log."""
    done = subprocess.run(
        ["bash", *args], cwd=REPO_ROOT, check=True, stdout=subprocess.PIPE, text=True
    )
    return done.stdout.strip().splitlines()[-1]


def project_version() -> str:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def kafka_version() -> str:
    pom = (REPO_ROOT / "scripts" / "kafka" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert match, "no <kafka.version> in scripts/kafka/pom.xml"
    return match.group(1)


@dataclass(frozen=True)
class Images:
    """The project's image tags, as images/build.sh tags them and up.sh loads them."""

    spark: str
    operator: str
    kafka: str


@pytest.fixture(scope="session")
def images() -> Images:
    version = project_version()
    return Images(
        spark=f"streamingjob/spark:{version}",
        operator=f"streamingjob/operator:{version}",
        kafka=f"streamingjob/kafka:{kafka_version()}-{version}",
    )


class Kube:
    """kubectl against the e2e cluster; every call raises on failure with kubectl's stderr."""

    def __init__(self, kubectl: str, kubeconfig: str):
        self.base = [kubectl, "--kubeconfig", kubeconfig]
        self.kubeconfig = kubeconfig

    def run(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        done = subprocess.run(
            [*self.base, *args], input=input, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

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

    def wait_ready(self, pod: str, namespace: str, timeout: float = 240) -> None:
        try:
            self.run(
                "wait", "--for=condition=Ready", f"pod/{pod}", "-n", namespace,
                f"--timeout={int(timeout)}s", timeout=timeout + 30,
            )  # fmt: skip
        except RuntimeError as exc:
            detail = self.run("describe", "pod", pod, "-n", namespace)
            raise AssertionError(f"{exc}\n{detail}") from exc


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    given = os.environ.get("STREAMJOB_E2E_KUBECONFIG")
    if given:
        yield given
        return
    path = _script("scripts/kind/up.sh")
    yield path
    if os.environ.get("STREAMJOB_E2E_KEEP") != "1":
        subprocess.run(["bash", "scripts/kind/down.sh"], cwd=REPO_ROOT, check=False)


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> Kube:
    bin_dir = _script("scripts/k8s-toolchain.sh", "all")
    return Kube(str(Path(bin_dir) / "kubectl"), kubeconfig)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (without waiting)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false")
