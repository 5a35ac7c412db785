"""The warm hand-over analyses the new query before it says ready: in-process, on the shared
local SparkSession, against a real broker. A `job.sql` that Spark rejects makes the waiting
runner publish handover.json "failed" naming the problem (never "ready"), so the operator keeps
the running driver; a correct one is ready, having read nothing."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from spark_app.runner import handover_signals as handover
from spark_app.runner import preflight, runner
from tests.support.kafka_tools import new_topic
from tests.support.runner_process import job_manifest
from tests.support.spark_session import local_session

pytestmark = pytest.mark.integration

TYPO = "SELECT CAST(value AS STRING) AS v, offsett FROM source"
CORRECT = "SELECT CAST(value AS STRING) AS v, offset FROM source"


def run_waiting(tmp_path: Path, manifest: dict, monkeypatch) -> tuple[int, list[dict]]:
    """runner.main with --wait-for-go in this process; every handover.json it publishes is
    recorded. Once it is ready, SIGTERM (what the operator's fallback does): exit 0."""
    published: list[dict] = []
    original = handover.FileSignals.publish

    def record(self, document):
        published.append(dict(document))
        return original(self, document)

    monkeypatch.setattr(handover.FileSignals, "publish", record)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    signals = tmp_path / "handover"
    done = threading.Event()

    def stop_once_ready() -> None:
        while not done.is_set():
            if any(p["state"] == "ready" for p in published):
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.1)

    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    watcher = threading.Thread(target=stop_once_ready, daemon=True)
    watcher.start()
    try:
        code = runner.main(
            ["--manifest", str(path), "--wait-for-go", "--handover-dir", str(signals),
             "--master", "local[1]", "--report-file", str(tmp_path / "report.json")]
        )  # fmt: skip
    finally:
        done.set()
        watcher.join(5)
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
    assert json.loads((signals / handover.HANDOVER_KEY).read_text()) == published[-1]
    return code, published


def test_a_sql_typo_fails_the_warm_up_and_a_correct_query_is_ready(kafka, tmp_path, monkeypatch):
    local_session("warm-analysis")  # the shared session: the runner's build_session finds it
    topic = new_topic(kafka.bootstrap, partitions=1)

    manifest = job_manifest("warmtypo", kafka.bootstrap, topic, tmp_path / "typo")
    manifest["spec"]["job"]["sql"] = TYPO
    (tmp_path / "typo").mkdir()
    code, published = run_waiting(tmp_path / "typo", manifest, monkeypatch)
    states = [p["state"] for p in published]
    assert code == preflight.EXIT_FAILED and states == ["warming", "failed"], published
    error = published[-1]["error"]
    assert error.startswith("warming for the hand-over failed: spec.job.sql: "), error
    assert "offsett" in error and "UNRESOLVED_COLUMN" in error, error
    epoch = tmp_path / "typo" / "checkpoints" / "test" / "warmtypo" / "epoch-1"
    assert not epoch.exists()  # nothing written in the epoch's checkpoint

    manifest = job_manifest("warmok", kafka.bootstrap, topic, tmp_path / "ok")
    manifest["spec"]["job"]["sql"] = CORRECT
    (tmp_path / "ok").mkdir()
    code, published = run_waiting(tmp_path / "ok", manifest, monkeypatch)
    states = [p["state"] for p in published]
    assert code == preflight.EXIT_OK and states == ["warming", "ready"], published
    assert not (tmp_path / "ok" / "report.json").exists()  # waiting: no report, nothing read
