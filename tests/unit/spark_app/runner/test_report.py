"""The runner's report is written when it changes, and as a heartbeat, never per poll."""

from __future__ import annotations

import json

import pytest

from spark_app.runner import report as report_module
from spark_app.runner.report import Reporter, Throughput

pytestmark = pytest.mark.unit


class RecordingPublisher:
    def __init__(self) -> None:
        self.published: list[dict] = []

    def publish(self, report_json: str) -> None:
        self.published.append(json.loads(report_json))


def test_report_is_written_on_change_and_as_a_heartbeat(tmp_path, monkeypatch):
    publisher = RecordingPublisher()
    path = tmp_path / "report.json"
    reporter = Reporter({"epoch": 1, "attempt": 2}, path, publisher, None)

    reporter.update(state="running")
    reporter.update()
    reporter.update(state="running")
    assert [p["state"] for p in publisher.published] == ["running"]
    assert json.loads(path.read_text())["updated"] == publisher.published[0]["updated"]

    reporter.update(latestBatch={"batchId": 3})
    assert publisher.published[-1]["latestBatch"] == {"batchId": 3}
    assert len(publisher.published) == 2

    monkeypatch.setattr(report_module, "HEARTBEAT_S", 0.0)
    reporter.update()
    assert len(publisher.published) == 3  # unchanged, but due: "updated" says it is alive
    assert json.loads(path.read_text()) == publisher.published[-1]


def test_throughput_counts_each_batch_once_and_skips_idle_triggers():
    throughput = Throughput()

    def progress(batch, rows, trigger_ms, add_ms=None):
        durations = {"triggerExecution": trigger_ms}
        if add_ms is not None:
            durations["addBatch"] = add_ms
        return {"batchId": batch, "numInputRows": rows, "durationMs": durations}

    throughput.add([progress(7, 100, 900, 600), progress(8, 0, 20)])  # 8: an idle trigger
    throughput.add([progress(7, 100, 900, 600), progress(8, 0, 20), progress(8, 50, 400, 300)])
    assert throughput.as_report() == {
        "batches": 2,
        "rows": 150,
        "busyMs": 1300,
        "executionMs": 900,
    }
