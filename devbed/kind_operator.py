"""The operator on the kind bed: its chart installed by `helm install` with the e2e tier's
values (the image up.sh loaded, short polls, the operator on the control plane).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from devbed.kind_cluster import ON_CONTROL_PLANE, REPO_ROOT, Images, Kube, run_script

OPERATOR_NAMESPACE = "streamingjob-system"
RELEASE = "streamingjob"
CHART = REPO_ROOT / "charts" / "streamingjob-operator"


class Helm:
    def __init__(self, helm: str, kubeconfig: str):
        self.base = [helm, "--kubeconfig", kubeconfig]

    def run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout


def helm_for(kubeconfig: str) -> Helm:
    bin_dir = run_script("scripts/k8s-toolchain.sh", "helm")
    return Helm(str(Path(bin_dir) / "helm"), kubeconfig)


# Values of the e2e install: the image loaded by up.sh, never pulled, short polls, and the
# operator on the control plane (a worker it runs on may be drained or lost by a test).
OPERATOR_VALUES = [
    "--set", "image.pullPolicy=Never",
    # a lag reading at each resync (the reading in flight at the one before may take over a
    # second): the autoscaler scenario's 40 s window holds eight of them
    "--set", "config.kafkaPollSeconds=2",
    "--set", "config.resyncSeconds=5",
    "--set", "config.fencingPollSeconds=1",
    # a Lease that outlasts the bed's API server under CI's load (2 cores: renewals took over
    # 10 s and both replicas stopped, CI run 23; none within 20 s at the e2e tier's start, run
    # 43, its first job beside the chaos test and the rest); a release on SIGTERM still hands
    # it over at once
    "--set", "leaderElection.leaseDurationSeconds=45",
    "--set", "leaderElection.renewDeadlineSeconds=30",
    # every test makes a namespace of its own (e2e-<hex>), unknown at install: the operator
    # reads Secrets in all of them (the chart's documented opt-in; secretNamespaces otherwise)
    "--set", "rbac.clusterWideSecrets=true",
    "--set-json", f"nodeSelector={json.dumps(ON_CONTROL_PLANE['nodeSelector'])}",
    "--set-json", f"tolerations={json.dumps(ON_CONTROL_PLANE['tolerations'])}",
]  # fmt: skip


def install_operator(kube: Kube, helm: Helm, images: Images) -> str:
    """`helm install` of the chart (a release left by a kept cluster is uninstalled first);
    the release name."""
    if RELEASE in helm.run("list", "-n", OPERATOR_NAMESPACE, "-q"):
        helm.run("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")
    # Helm never upgrades crds/: a CRD left by an older run is replaced like the README says.
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    tag = images.operator.rsplit(":", 1)[1]
    helm.run(
        "install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--create-namespace",
        "--set", f"image.tag={tag}", *OPERATOR_VALUES, "--wait", "--timeout", "180s",
    )  # fmt: skip
    return RELEASE


def uninstall_operator(helm: Helm) -> None:
    helm.run("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")
