"""The warm hand-over, driver side: a runner started with --wait-for-go on local Spark against
a real broker, its signals as files (--handover-dir). Warm and ready, it reads and writes
nothing until a go names it; then it runs today's path (a fresh start, and a restore)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from devbed.object_store import Storage
from devbed.polling import wait_for
from spark_app.runner.handover_signals import GO_KEY, HANDOVER_KEY, POD_NAME_ENV
from tests.integration.spark_app.test_runner import assert_exactly_once, sink_rows, wait_for_all
from tests.support.kafka_tools import group_offsets, new_topic, produce
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration

JOB, HOLD_S = "warm", 3.0


def signal_file(directory: Path, key: str) -> dict:
    try:
        return json.loads((directory / key).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def write_go(directory: Path, pod: str, attempt: int) -> None:
    """What the operator does, as a file: atomically, so a half-written go is never read."""
    go = {"pod": pod, "epoch": 1, "attempt": attempt, "time": "2026-11-25T10:00:00Z"}
    tmp = directory / "go.tmp"
    tmp.write_text(json.dumps(go))
    tmp.replace(directory / GO_KEY)


def start_waiting(runner: RunnerProcess, directory: Path, pod: str, attempt: int) -> dict:
    """Starts the runner as pod `pod` and returns its handover.json once it is ready."""
    (directory / GO_KEY).unlink(missing_ok=True)
    (directory / HANDOVER_KEY).unlink(missing_ok=True)
    runner.env = {POD_NAME_ENV: pod}
    runner.start("--attempt", str(attempt), "--wait-for-go", "--handover-dir", str(directory))
    ready = wait_for(
        lambda: signal_file(directory, HANDOVER_KEY).get("state") in ("ready", "failed"),
        timeout=120,
        what=f"{pod} ready",
        interval=0.2,
    )
    handover = signal_file(directory, HANDOVER_KEY)
    assert ready and handover["state"] == "ready", (handover, runner.tail())
    assert (handover["pod"], handover["epoch"], handover["attempt"]) == (pod, 1, attempt)
    assert handover["warmSeconds"] > 0 and handover["readySince"].endswith("Z")
    return handover


class Untouched:
    """What a waiting driver must leave as it is: the epoch's offset and commit logs, the
    sink, the group's committed offsets, report.json (the running driver's key)."""

    def __init__(self, runner: RunnerProcess, storage: Storage, bootstrap: str, topic: str):
        self.runner, self.storage = runner, storage
        self.bootstrap, self.topic = bootstrap, topic
        self.checkpoint = Path(storage.root) / "checkpoints" / "test" / JOB / "epoch-1"
        self.before = self.state()

    def state(self) -> dict:
        logs = {
            log: sorted(int(p.name) for p in (self.checkpoint / log).glob("*") if p.name.isdigit())
            for log in ("offsets", "commits")
        }
        return {
            **logs,
            "sink": len(sink_rows(self.storage)),
            "group": group_offsets(self.bootstrap, f"{JOB}-group", self.topic),
            "report": self.runner.report_path.exists(),
            "batch lines": self.runner.output().count("\nbatch "),
        }

    def hold(self, seconds: float) -> None:
        """The state stays as it was for `seconds`, looked at again and again, the runner
        alive (waiting) all along."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.runner.process is not None and self.runner.process.poll() is None, (
                self.runner.tail()
            )
            assert self.state() == self.before, self.runner.tail()
            time.sleep(0.25)


def test_a_waiting_runner_reads_nothing_until_its_own_go(kafka, tmp_path):
    """Fresh start: ready, then nothing read or written; a go for another pod changes
    nothing; its own go runs the job (every record once, goToFirstBatchSeconds reported).
    Then SIGTERM: a second attempt, stopped while it waits, exits 0 having read nothing; a
    third one's go restores from the checkpoint without reading a record twice."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    storage = Storage(tmp_path)
    produce(kafka.bootstrap, topic, range(2000))
    signals = tmp_path / "handover"
    runner = RunnerProcess(job_manifest(JOB, kafka.bootstrap, topic, tmp_path), tmp_path)

    start_waiting(runner, signals, "warm-1-1", attempt=1)
    untouched = Untouched(runner, storage, kafka.bootstrap, topic)
    assert untouched.before == {
        "offsets": [],
        "commits": [],
        "sink": 0,
        "group": {0: None, 1: None},
        "report": False,
        "batch lines": 0,
    }
    untouched.hold(HOLD_S)
    write_go(signals, "warm-1-2", attempt=2)  # another driver's go: ignored, said so
    wait_for(lambda: "ignoring a go for warm-1-2" in runner.output(), 10, "the foreign go seen")
    untouched.hold(1.0)

    write_go(signals, "warm-1-1", attempt=1)
    report = wait_for_all(runner, kafka.bootstrap, topic, timeout=90)
    assert report["startPath"] == "fresh" and report["warmSeconds"] > 0
    assert 0 < report["goToFirstBatchSeconds"] < 30, report
    assert runner.terminate() == 0
    assert_exactly_once(storage, range(2000))
    assert "the warm-up query ran its batch in" in runner.output()  # best effort, but it ran

    produce(kafka.bootstrap, topic, range(2000, 3000))
    start_waiting(runner, signals, "warm-1-2", attempt=2)
    Untouched(runner, storage, kafka.bootstrap, topic).hold(1.0)
    assert runner.terminate() == 0  # stopped while waiting: nothing read, nothing written
    assert "stopped while waiting for the go" in runner.tail()

    start_waiting(runner, signals, "warm-1-3", attempt=3)
    waiting = Untouched(runner, storage, kafka.bootstrap, topic)
    waiting.hold(1.0)  # the checkpoint is not read on, the group not moved
    write_go(signals, "warm-1-3", attempt=3)
    report = wait_for_all(runner, kafka.bootstrap, topic, timeout=90)
    assert report["startPath"] == "restored" and report["attempt"] == 3
    assert report["restoredBatch"] == waiting.before["commits"][-1]
    assert 0 < report["goToFirstBatchSeconds"] < 30, report
    assert runner.terminate() == 0
    assert_exactly_once(storage, range(3000))


def test_a_failed_warm_up_says_so_and_exits_1(kafka, tmp_path):
    """Warming fails (here: the subscribed topic does not exist): handover.json "failed"
    with the cause, the termination message, exit 1 (the operator falls back to a cold
    start); nothing is read or written. Fails before Spark starts."""
    manifest = job_manifest("coldfall", kafka.bootstrap, "no-such-topic", tmp_path)
    termination = tmp_path / "termination-log"
    termination.touch()
    signals = tmp_path / "handover"
    env = {"STREAMJOB_TERMINATION_LOG": str(termination), POD_NAME_ENV: "coldfall-1-1"}
    runner = RunnerProcess(manifest, tmp_path, env=env)
    runner.start("--wait-for-go", "--handover-dir", str(signals), "--preflight-timeout", "3")
    assert runner.wait(60) == 1, runner.tail()
    failed = signal_file(signals, HANDOVER_KEY)
    assert (failed["state"], failed["pod"], failed["attempt"]) == ("failed", "coldfall-1-1", 1)
    said = termination.read_text()
    assert said.startswith("warming for the hand-over failed: spec.job.source.subscribe: ")
    assert "no-such-topic" in said and failed["error"] == said
    assert not runner.report_path.exists() and not (tmp_path / "checkpoints").exists()
