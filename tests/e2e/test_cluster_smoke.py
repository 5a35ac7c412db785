"""The kind bed works: the workers pull the job image from the bed's registry, as pushed, and
it runs as the Spark user. Services, the Kafka image, Spark's driver and executor pods are the
scenarios' first steps (test_scenarios.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from devbed.kind_cluster import REGISTRY, Images, Kube, worker_nodes

pytestmark = pytest.mark.e2e


def _pod(name: str, image: str, command: list[str], pull: str = "Never", **extra: object) -> str:
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": image, "imagePullPolicy": pull, "command": command}
        ],
    }
    spec.update(extra)
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def _assert_succeeded(kube: Kube, pod: str, namespace: str, timeout: float = 300) -> str:
    phase = kube.wait_pod_done(pod, namespace, timeout)
    logs = kube.logs(pod, namespace)
    assert phase == "Succeeded", f"pod {pod} {phase}:\n{logs}"
    return logs


def _pushed_digest(image: str) -> str:
    """The digest `docker push` gave the image in the bed's registry (repository@sha256:...)."""
    inspect = ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", image]
    digests = json.loads(subprocess.run(inspect, capture_output=True, check=True).stdout)
    repository = image.rsplit(":", 1)[0]
    [digest] = [d for d in digests if d.startswith(f"{repository}@")]
    return digest


def test_workers_pull_the_job_image_from_the_beds_registry(
    kube: Kube, namespace: str, images: Images
) -> None:
    # images/push.sh (make push) sent it; each worker's kubelet pulls it (Always) through
    # containerd's hosts.toml for the registry, and runs what was pushed: the same digest,
    # as the Spark image's user (185)
    assert images.orders.startswith(f"{REGISTRY}/")
    script = "import os, orders_transform as t; print('uid', os.getuid(), 'transform', t.typed)"
    check = ["python", "-c", script]
    pods = {f"pull-{i}": worker for i, worker in enumerate(worker_nodes(kube))}
    for name, worker in pods.items():  # side by side, then each checked
        kube.apply(_pod(name, images.orders, check, pull="Always", nodeName=worker), namespace)
    for name in pods:
        assert "uid 185 transform <function typed" in _assert_succeeded(kube, name, namespace)
        pod = kube.get("pod", name, namespace)
        assert pod["status"]["containerStatuses"][0]["imageID"] == _pushed_digest(images.orders)
