"""MinIO on the kind bed (examples/kind/minio.yaml): checkpoints and sinks of the jobs, reached
from the tests through a `kubectl port-forward` with pyarrow's S3 filesystem.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess

from devbed.kind_cluster import REPO_ROOT, Kube

STORAGE_NAMESPACE = "storage"  # examples/kind/minio.yaml
BUCKET = "streamingjob"
MINIO_MANIFEST = REPO_ROOT / "examples" / "kind" / "minio.yaml"


class ObjectStore:
    """The in-cluster MinIO of examples/kind/minio.yaml, reached from the tests through a
    `kubectl port-forward` (loopback only) with pyarrow's S3 filesystem."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.forward: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def credentials(self) -> dict[str, str]:
        secret = self.kube.get("secret", "minio-root", STORAGE_NAMESPACE)
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        return {"accessKeyId": data["user"], "secretAccessKey": data["password"]}

    def connect(self) -> None:
        """(Re)starts the port-forward; it ends when the pod behind it restarts."""
        if self.forward is not None and self.forward.poll() is None:
            return
        self.forward, self.port = port_forward(self.kube, STORAGE_NAMESPACE, "svc/minio", 9000)

    def filesystem(self):
        from devbed.object_store import s3_filesystem

        self.connect()
        creds = self.credentials
        return s3_filesystem(
            f"http://127.0.0.1:{self.port}", creds["accessKeyId"], creds["secretAccessKey"]
        )

    def give_secret(self, namespace: str, name: str = "s3-credentials") -> None:
        """The job namespace's copy of the key pair (what spec.s3.credentialsSecret names)."""
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": self.credentials,
        }
        self.kube.apply(json.dumps(secret), namespace)

    def close(self) -> None:
        if self.forward is not None:
            self.forward.terminate()
            self.forward.wait(10)


def port_forward(
    kube: Kube, namespace: str, target: str, port: int
) -> tuple[subprocess.Popen[str], int]:
    """`kubectl port-forward` of `target`'s `port` to a free loopback port: the process and
    that port."""
    forward = subprocess.Popen(
        [*kube.base, "port-forward", "-n", namespace, target, f":{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert forward.stdout is not None
    line = forward.stdout.readline()
    match = re.search(r"127\.0\.0\.1:(\d+)", line)
    assert match, f"kubectl port-forward said: {line}"
    return forward, int(match.group(1))


def start_object_store(kube: Kube) -> ObjectStore:
    """MinIO on the control plane, bucket `streamingjob` (examples/kind/minio.yaml)."""
    kube.run("apply", "-f", str(MINIO_MANIFEST))
    kube.run(
        "rollout", "status", "deployment/minio", "-n", STORAGE_NAMESPACE, "--timeout=240s",
        timeout=270,
    )  # fmt: skip
    return ObjectStore(kube)
