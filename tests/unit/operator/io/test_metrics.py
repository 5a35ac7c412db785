"""Per-job metrics: bounded labels, values from status, readings and the driver's report,
series gone with the job (the real scrape and the alert rules: test_op_kafka.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import generate_latest

from streamingjob_operator.api.models import Condition, StreamingJobStatus
from streamingjob_operator.io.metrics import RESTART_REASONS, Metrics
from streamingjob_operator.rules.observed import iso, parse_report
from streamingjob_operator.rules.status import KafkaView

pytestmark = pytest.mark.unit
KEY = ("team", "orders")


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("job") == "orders"
    }


def running(**kw) -> StreamingJobStatus:
    now = datetime.now(UTC)
    fields = {
        "phase": "Running",
        "epoch": 2,
        "attempt": 1,
        "start_path": "fresh",
        "running_since": iso(now - timedelta(seconds=100)),
        "last_progress_time": iso(now - timedelta(seconds=30)),
        "conditions": [Condition(type="Degraded", status="False")],
    }
    return StreamingJobStatus(**{**fields, **kw})


def test_job_series_from_status_readings_and_report():
    metrics = Metrics()
    view = KafkaView(
        committed={"orders": {"0": 4}},
        end={"orders": {"0": 10, "1": 5}},
        read_at=datetime.now(UTC),
    )
    report = parse_report(
        {"data": {"report.json": json.dumps({"epoch": 2, "attempt": 1, "commits": {"failed": 3}})}}
    )
    metrics.jobs.update(KEY, running(), view, report)
    metrics.jobs.restarted(KEY, "OOMKilled")
    got = samples(metrics)
    base = (("job", "orders"), ("namespace", "team"))

    def at(name, **labels):
        return got[(name, tuple(sorted((*base, *labels.items()))))]

    assert at("streamingjob_consumer_lag", topic="orders", partition="0") == 6
    assert at("streamingjob_consumer_lag", topic="orders", partition="1") == 5  # no commit
    assert (
        "streamingjob_consumer_committed_offset",
        tuple(sorted((*base, ("partition", "1"), ("topic", "orders")))),
    ) not in got
    assert at("streamingjob_consumer_log_end_offset", topic="orders", partition="1") == 5
    assert 29 <= at("streamingjob_seconds_since_progress") < 60
    assert at("streamingjob_job_restarts_total", reason="OOMKilled") == 1
    assert {dict(ls)["reason"] for n, ls in got if n == "streamingjob_job_restarts_total"} == set(
        RESTART_REASONS
    )  # every reason from 0: increase() sees the first restart
    assert at("streamingjob_job_phase", phase="Running") == 1
    assert at("streamingjob_job_degraded") == 0
    assert at("streamingjob_job_start_path", path="fresh") == 1
    assert at("streamingjob_offset_commit_failures") == 3
    assert at("streamingjob_data_loss_skipped_offsets") == 0
    metrics.jobs.update(KEY, running(data_loss_skipped_offsets=40), view, report)
    assert samples(metrics)[("streamingjob_data_loss_skipped_offsets", base)] == 40
    assert not any(n == "streamingjob_dead_letter_records" for n, _ in got)  # none: no series
    dead = {"truncated": 2, "bad-magic-byte": 1}
    metrics.jobs.update(KEY, running(dead_letter_records=dead), view, report)
    got = samples(metrics)
    assert at("streamingjob_dead_letter_records", reason="truncated") == 2
    assert at("streamingjob_dead_letter_records", reason="bad-magic-byte") == 1
    assert not any(n == "streamingjob_sink_transactions" for n, _ in got)  # no such sink
    sink = {"transactions": 8, "replaysSkipped": 2, "records": 900, "batchesAborted": 0}
    metrics.jobs.update(KEY, running(sink_transactions=sink), view, report)
    got = samples(metrics)
    assert at("streamingjob_sink_transactions", result="committed") == 8
    assert at("streamingjob_sink_transactions", result="replay_skipped") == 2
    assert at("streamingjob_sink_transactions", result="batch_aborted") == 0

    # a report of an earlier run is not this run's; suspended: no offsets series
    metrics.jobs.update(KEY, running(suspended=True, attempt=2), view, report)
    got = samples(metrics)
    assert not any(n.startswith("streamingjob_consumer_") for n, _ in got)
    assert not any(n == "streamingjob_offset_commit_failures" for n, _ in got)

    metrics.jobs.forget(KEY)
    assert samples(metrics) == {}
    # a reconcile that was in flight when the job was deleted finishes after the forget
    metrics.jobs.update(KEY, running(), view, report)
    metrics.jobs.restarted(KEY, "OOMKilled")
    assert samples(metrics) == {}
    metrics.jobs.track(KEY)  # a job of that name again
    metrics.jobs.update(KEY, running(), view, report)
    assert ("streamingjob_job_degraded", base) in samples(metrics)
