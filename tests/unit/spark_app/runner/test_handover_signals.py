"""The waiting driver's go.json: only a well-formed go naming this driver is obeyed; anything
else is ignored with one log line, never a crash (spark_app/runner/handover_signals.py)."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from spark_app.runner import handover_signals as handover
from spark_app.runner.handover_signals import (
    GO_KEY,
    HANDOVER_KEY,
    FileSignals,
    GoInvalid,
    GoWatcher,
    Identity,
    await_go,
    parse_go,
    readiness,
)
from spark_app.runner.runner import parse_args
from spark_app.runner.supervise import batch_end_time

pytestmark = pytest.mark.unit

ME = Identity("orders-driver-2-1", 2, 1)
GO = {"pod": ME.pod, "epoch": 2, "attempt": 1, "time": "2026-11-25T10:00:00Z"}


def test_a_go_names_a_driver():
    assert parse_go(json.dumps(GO)) == ME
    assert parse_go(json.dumps({k: v for k, v in GO.items() if k != "time"})) == ME


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{not json", "not JSON"),
        ("[]", "JSON object"),
        ("null", "JSON object"),
        (json.dumps({**GO, "pod": ""}), '"pod"'),
        (json.dumps({k: v for k, v in GO.items() if k != "pod"}), '"pod"'),
        (json.dumps({k: v for k, v in GO.items() if k != "epoch"}), '"epoch"'),
        (json.dumps({**GO, "epoch": "2"}), '"epoch"'),
        (json.dumps({**GO, "epoch": True}), '"epoch"'),
        (json.dumps({**GO, "attempt": 0}), '"attempt"'),
        (json.dumps({k: v for k, v in GO.items() if k != "attempt"}), '"attempt"'),
        (json.dumps({**GO, "time": 5}), '"time"'),
    ],
)
def test_a_malformed_go_is_refused_naming_what_is_wrong(text, named):
    with pytest.raises(GoInvalid, match=named):
        parse_go(text)


def test_only_this_drivers_go_counts_and_the_rest_is_logged_once(caplog):
    watcher = GoWatcher(ME)
    caplog.set_level(logging.INFO, logger="spark_app.runner.handover_signals")
    others = [
        "{not json",
        json.dumps({**GO, "pod": "orders-driver-1-1"}),
        json.dumps({**GO, "epoch": 1}),
        json.dumps({**GO, "attempt": 2}),
        json.dumps({k: v for k, v in GO.items() if k != "epoch"}),
    ]
    for text in [None, *others]:
        assert not watcher.is_mine(text)
        assert not watcher.is_mine(text)  # polled again: no second line
    assert len(caplog.records) == len(others)
    assert "not JSON" in caplog.records[0].message
    assert "ignoring a go for orders-driver-1-1" in caplog.records[1].message
    assert watcher.is_mine(json.dumps(GO))


def test_file_signals_publish_ready_and_take_this_drivers_go(tmp_path):
    signals = FileSignals(tmp_path / "handover")
    stop = threading.Event()
    (tmp_path / "handover" / GO_KEY).write_text(json.dumps({**GO, "pod": "another"}))
    found: list[bool] = []
    waiting = threading.Thread(target=lambda: found.append(await_go(signals, ME, 4.5, stop, 0.01)))
    waiting.start()
    ready = _wait_for_state(tmp_path / "handover" / HANDOVER_KEY, "ready")
    assert ready["pod"] == ME.pod and ready["warmSeconds"] == 4.5
    assert (ready["epoch"], ready["attempt"]) == (2, 1) and ready["readySince"].endswith("Z")
    assert waiting.is_alive()  # another driver's go: still waiting
    (tmp_path / "handover" / GO_KEY).write_text(json.dumps(GO))
    waiting.join(10)
    assert found == [True]


def test_a_stop_ends_the_wait_without_a_go(tmp_path):
    stop = threading.Event()
    stop.set()
    assert not await_go(FileSignals(tmp_path), ME, 1.0, stop, 0.01)


def test_readiness_states():
    failed = readiness(ME, "failed", error="warming for the hand-over failed: no Kafka")
    assert failed == {
        "pod": ME.pod,
        "epoch": 2,
        "attempt": 1,
        "state": "failed",
        "error": "warming for the hand-over failed: no Kafka",
    }


def test_waiting_needs_a_place_for_the_signals(capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--manifest", "job.yaml", "--wait-for-go"])
    assert exited.value.code == 2
    assert "--wait-for-go needs --report-configmap" in capsys.readouterr().err
    args = parse_args(["--manifest", "job.yaml", "--wait-for-go", "--handover-dir", "/tmp/h"])
    assert args.wait_for_go and str(args.handover_dir) == "/tmp/h"


def test_a_batch_ends_at_its_trigger_start_plus_its_duration():
    progress = {"timestamp": "2026-11-25T10:00:00.500Z", "durationMs": {"triggerExecution": 750}}
    assert batch_end_time(progress) == pytest.approx(1795600801.25)
    assert batch_end_time({"timestamp": "yesterday"}) is None


def _wait_for_state(path, state: str) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and (found := json.loads(path.read_text())).get("state") == state:
            return found
        time.sleep(0.01)
    raise AssertionError(f"{path} never {state}")


class RefusingSignals:
    """A transport whose handover.json does not arrive until `accept_after` tries."""

    def __init__(self, accept_after: int, go: str | None):
        self.tries, self.accept_after, self.go = 0, accept_after, go
        self.published: list[dict] = []

    def publish(self, handover: dict) -> bool:
        self.tries += 1
        if self.tries < self.accept_after:
            return False
        self.published.append(handover)
        return True

    def go_text(self) -> str | None:
        return self.go


def test_ready_is_sent_again_until_it_arrives_and_only_then_a_go_counts(monkeypatch):
    monkeypatch.setattr(handover, "REPUBLISH_S", 0.0)
    signals = RefusingSignals(accept_after=3, go=json.dumps(GO))
    assert await_go(signals, ME, 1.0, threading.Event(), 0.001)
    assert signals.tries == 3 and [h["state"] for h in signals.published] == ["ready"]


def test_a_go_file_that_is_not_text_is_ignored(tmp_path, caplog):
    signals = FileSignals(tmp_path)
    (tmp_path / GO_KEY).write_bytes(b"\xff\xfe{")
    caplog.set_level(logging.INFO, logger="spark_app.runner.handover_signals")
    assert not GoWatcher(ME).is_mine(signals.go_text())
    assert "is not JSON" in caplog.records[0].message


class _Access:
    """The API as the driver calls it (report.ApiAccess): ConfigMaps by URL, in memory."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, str]] = []

    def configmap_url(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{namespace}/configmaps/{name}"

    def call(self, method: str, url: str, merge_patch=None) -> bytes:
        self.calls.append((method, url.rsplit("/", 1)[1]))
        if method == "PATCH":
            self.data.setdefault(url, {}).update(merge_patch["data"])
            return b"{}"
        return json.dumps({"data": self.data.get(url, {})}).encode()


def test_the_go_is_read_from_its_own_configmap_and_readiness_written_to_the_report():
    """The operator writes the go to `--go-configmap`, which drivers may read but not write
    (builders.build_role): a go.json in the report ConfigMap, which they do write, is none."""
    access = _Access()
    signals = handover.ConfigMapSignals("orders-report", "ns", access, go_configmap="orders-go")
    assert signals.publish(readiness(ME, "ready"))
    assert access.calls == [("PATCH", "orders-report")]
    forged = access.configmap_url("ns", "orders-report")
    access.data[forged][GO_KEY] = json.dumps(GO)  # a driver's own "go": not read
    assert signals.go_text() is None
    access.data[access.configmap_url("ns", "orders-go")] = {GO_KEY: json.dumps(GO)}
    assert GoWatcher(ME).is_mine(signals.go_text())
    assert access.calls[-1] == ("GET", "orders-go")


def test_the_go_configmap_is_an_option_of_the_waiting_runner():
    args = parse_args(
        ["--manifest", "m", "--report-configmap", "r", "--go-configmap", "g", "--wait-for-go"]
    )
    assert (args.report_configmap, args.go_configmap) == ("r", "g")
    # an operator of an earlier release names no go ConfigMap: the go is in the report's
    older = handover.ConfigMapSignals("orders-report", "ns", _Access())
    assert older.go_url == older.url
