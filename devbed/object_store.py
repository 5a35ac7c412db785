"""A real S3-compatible object store for tests: MinIO built from its Go module, on loopback.

`scripts/k8s-toolchain.sh minio` builds the server once (cached like the Kubernetes binaries).
Tests reach it through pyarrow's S3 filesystem (creating buckets, reading what Spark wrote);
Spark reaches it through its S3A connector with the credentials in the environment, as a
driver pod gets them from its Secret.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from devbed.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]

ACCESS_KEY = "streamingjob-test"
# A test store's key pair: a fixed value, so failures can be reproduced by hand.
SECRET_KEY = "streamingjob-test-secret"
REGION = "us-east-1"


def minio_binary() -> Path:
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "k8s-toolchain.sh"), "minio"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return Path(out.strip()) / "minio"


class MinioServer:
    """One MinIO process on a free loopback port, serving a directory."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.console_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def credentials_env(self) -> dict[str, str]:
        """What S3A's EnvironmentVariableCredentialsProvider reads (a pod gets it from a
        Secret)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def start(self, timeout: float = 60.0) -> MinioServer:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "MINIO_ROOT_USER": ACCESS_KEY,
            "MINIO_ROOT_PASSWORD": SECRET_KEY,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "HOME": str(self.workdir),
        }
        with open(self.workdir / "minio.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    str(minio_binary()),
                    "server",
                    str(data),
                    "--address",
                    f"127.0.0.1:{self.port}",
                    "--console-address",
                    f"127.0.0.1:{self.console_port}",
                    "--quiet",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"minio exited; see {self.workdir / 'minio.log'}")
            ready = f"{self.endpoint}/minio/health/ready"
            with contextlib.suppress(OSError), urllib.request.urlopen(ready, timeout=2):
                return self
            time.sleep(0.2)
        raise TimeoutError(f"minio on {self.endpoint} not ready after {timeout}s")

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self.process = None

    def filesystem(self):
        """pyarrow's S3 filesystem on this store (paths are bucket/key, no scheme)."""
        return s3_filesystem(self.endpoint)

    def create_bucket(self, name: str) -> str:
        self.filesystem().create_dir(name)
        return name

    def __enter__(self) -> MinioServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def s3_filesystem(endpoint: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY):
    from pyarrow import fs

    scheme, _, host = endpoint.partition("://")
    return fs.S3FileSystem(
        access_key=access_key,
        secret_key=secret_key,
        endpoint_override=host,
        scheme=scheme,
        region=REGION,
        allow_bucket_creation=True,
        allow_bucket_deletion=True,
        # The AWS SDK's 3 s for a request are too short through `kubectl port-forward` on a
        # loaded machine (the kind bed's store: a HEAD timed out three times in CI run 47)
        request_timeout=30,
        connect_timeout=10,
    )


class Storage:
    """Where a test job keeps its checkpoints and file-sink output: a local directory, or a
    bucket of a real object store reached through s3a:// (spec.s3 + credentials in the
    runner's environment, as a driver pod gets them)."""

    def __init__(self, workdir: Path, store: MinioServer | None = None, bucket: str = "") -> None:
        self.store = store
        if store is None:
            self.base, self.root = f"file://{workdir}", str(workdir)
        else:
            self.base, self.root = f"s3a://{bucket}", bucket

    @property
    def checkpoints(self) -> str:
        return f"{self.base}/checkpoints"

    @property
    def output(self) -> str:
        """The sink path as the job sees it."""
        return f"{self.base}/output"

    @property
    def output_path(self) -> str:
        """The sink path on `filesystem`."""
        return f"{self.root}/output"

    @property
    def filesystem(self):
        from pyarrow import fs

        return fs.LocalFileSystem() if self.store is None else self.store.filesystem()

    @property
    def s3_spec(self) -> dict | None:
        if self.store is None:
            return None
        return {
            "endpoint": self.store.endpoint,
            "region": REGION,
            "pathStyleAccess": True,
            "credentialsSecret": {"name": "object-store"},
        }

    @property
    def env(self) -> dict[str, str]:
        return {} if self.store is None else self.store.credentials_env
