import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devbed.object_store import MinioServer, Storage
from tests.support.runner_process import RunnerProcess

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session", autouse=True)
def _spark_starts_from_a_class_data_sharing_archive() -> Iterator[None]:
    """Every JVM the tests start maps the local Spark's CDS archive (scripts/jvm-cds.sh, as
    the image does): a Spark start costs about 40% less. Other JVMs (the broker) quietly run
    without it (-Xshare:auto). Added to the options every test JVM gets (tests/conftest.py)."""
    archive = subprocess.run(
        ["bash", str(REPO / "scripts" / "jvm-cds.sh"), str(Path(sys.executable).parent.parent)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout.strip()
    saved = os.environ.get("JDK_JAVA_OPTIONS")
    os.environ["JDK_JAVA_OPTIONS"] = (
        f"{saved or ''} -XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off "
        "-Xlog:cds+dynamic=off"
    ).strip()
    yield
    if saved is None:
        os.environ.pop("JDK_JAVA_OPTIONS", None)
    else:
        os.environ["JDK_JAVA_OPTIONS"] = saved


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real S3-compatible server (MinIO) on loopback for the session."""
    with MinioServer(tmp_path_factory.mktemp("minio")) as server:
        yield server


@pytest.fixture(params=["file", "s3a"])
def storage(request: pytest.FixtureRequest, tmp_path) -> Storage:
    """Checkpoints and file-sink output on a local disk, or in a bucket of its own on the
    object store (s3a://)."""
    if request.param == "file":
        return Storage(tmp_path)
    store = request.getfixturevalue("minio")
    return Storage(tmp_path, store, store.create_bucket(f"t-{uuid.uuid4().hex[:12]}"))


@pytest.fixture(autouse=True)
def _no_runner_outlives_its_test() -> Iterator[None]:
    yield
    RunnerProcess.kill_all()
