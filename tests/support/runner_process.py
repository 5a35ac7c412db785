"""The job runner as a real process, the way the driver pod runs it: killable, restartable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import yaml

from devbed.object_store import Storage
from devbed.polling import PATIENCE
from devbed.process_group import reap_marked
from spark_app.api.manifest import API_GROUP, API_VERSION


def job_manifest(
    name: str,
    bootstrap: str,
    topic: str,
    workdir: Path,
    storage: Storage | None = None,
    **source: Any,
) -> dict:
    """A StreamingJob writing parquet under workdir (or to `storage`: a bucket through
    s3a://); `source` overrides source fields."""
    storage = storage or Storage(workdir)
    manifest = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "StreamingJob",
        "metadata": {"name": name, "namespace": "test"},
        "spec": {
            "job": {
                "source": {
                    "bootstrapServers": bootstrap,
                    "subscribe": [topic],
                    "groupId": f"{name}-group",
                    "maxOffsetsPerTrigger": 1500,
                    **source,
                },
                "sink": {"format": "parquet", "path": storage.output},
                "trigger": {"processingTime": "500 milliseconds"},
            },
            "checkpoint": {"location": storage.checkpoints},
            "sparkConf": {"spark.sql.shuffle.partitions": "1"},
        },
    }
    if storage.s3_spec is not None:
        manifest["spec"]["s3"] = storage.s3_spec
    return manifest


# in every process of a runner's tree (the JVM, PySpark's workers, the source's runner),
# whatever group it moved to: a test's end kills them all
MARK_ENV = "STREAMJOB_TEST_RUNNER"


class RunnerProcess:
    started: ClassVar[list[RunnerProcess]] = []  # killed by the tests' teardown

    def __init__(
        self, manifest: dict, workdir: Path, epoch: int = 1, env: dict[str, str] | None = None
    ):
        self.workdir = workdir
        self.env = env or {}  # e.g. the object store's credentials, as a Secret gives them
        self.manifest_path = workdir / f"job-epoch{epoch}.yaml"
        self.manifest_path.write_text(yaml.safe_dump(manifest))
        self.report_path = workdir / f"report-epoch{epoch}.json"
        self.log_path = workdir / f"runner-epoch{epoch}.log"
        self.epoch = epoch
        self.process: subprocess.Popen[bytes] | None = None
        self.mark = uuid.uuid4().hex

    def start(self, *extra: str) -> RunnerProcess:
        self.report_path.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "spark_app",
                    "--manifest",
                    str(self.manifest_path),
                    "--epoch",
                    str(self.epoch),
                    "--report-file",
                    str(self.report_path),
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1", MARK_ENV: self.mark},
            )
        RunnerProcess.started.append(self)
        return self

    @classmethod
    def kill_all(cls) -> None:
        """No runner outlives its test, whatever the test's outcome, nor any process of its
        tree (a Python worker outlived its killed driver once, polling on)."""
        for runner in cls.started:
            if runner.process is not None and runner.process.poll() is None:
                runner.kill()
            reap_marked(MARK_ENV, runner.mark)
        cls.started.clear()

    def report(self) -> dict:
        try:
            return json.loads(self.report_path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def wait_for(self, condition: Callable[[dict], bool], timeout: float, what: str) -> dict:
        """Polls the runner's report until `condition` holds (no fixed sleeps), for at most
        `timeout` seconds times PATIENCE (devbed/polling.py)."""
        timeout *= PATIENCE
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            report = self.report()
            if report and condition(report):
                return report
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(
                    f"runner exited ({self.process.returncode}) before {what}:\n{self.tail()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.tail()}")

    def wait_for_batch(self, batch_id: int, timeout: float = 120) -> dict:
        return self.wait_for(
            lambda r: (r.get("latestBatch") or {}).get("batchId", -1) >= batch_id,
            timeout,
            f"batch {batch_id}",
        )

    def kill(self) -> None:
        """A crash: SIGKILL to the runner and its JVM (the whole process group)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        reap_marked(MARK_ENV, self.mark)  # the tree's processes in other groups too
        self.process.wait(30)

    def terminate(self, timeout: float = 60) -> int:
        """What Kubernetes does first: SIGTERM to the runner only, then wait for it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 120) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                reap_marked(MARK_ENV, self.mark)

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")
