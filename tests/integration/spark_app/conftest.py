import uuid
from collections.abc import Iterator

import pytest

from tests.support.object_store import MinioServer, Storage
from tests.support.runner_process import RunnerProcess


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
