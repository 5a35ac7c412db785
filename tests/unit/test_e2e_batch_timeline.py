"""The broker scenario's batch timeline (pure part): one entry per new batch, and read rates
from the cumulative end offsets, also across batches the watch never showed."""

from __future__ import annotations

import pytest

from tests.e2e.batch_timeline import BatchTimeline

pytestmark = pytest.mark.unit


def report(batch_id: int, offsets: list[int], lag: int = 0, topic: str = "orders") -> dict:
    return {
        "latestBatch": {
            "batchId": batch_id,
            "timestamp": "2026-11-24T14:00:00.500Z",
            "endOffsets": {topic: {str(p): o for p, o in enumerate(offsets)}, "other": {"0": 99}},
            "lag": lag,
        }
    }


def test_each_batch_is_recorded_once_with_its_topic_offsets_and_trigger_time():
    timeline = BatchTimeline(None, "ns", "orders", "orders")  # type: ignore[arg-type]
    timeline._record({})  # before the first batch
    timeline._record(report(3, [10, 20]))
    timeline._record(report(3, [10, 20]))  # the same report again (a group commit, a relist)
    timeline._record(report(5, [40, 60], lag=7))  # batch 4 was never shown
    assert [(e.batch_id, e.offsets, e.lag) for e in timeline.seen] == [(3, 30, 0), (5, 100, 7)]
    assert timeline.seen[0].planned == pytest.approx(1795528800.5)


def test_the_rate_counts_records_committed_between_two_moments():
    timeline = BatchTimeline(None, "ns", "orders", "orders")  # type: ignore[arg-type]
    for batch_id, offsets in enumerate([[0], [100], [300]]):
        timeline._record(report(batch_id, offsets))
    for entry, at in zip(timeline.seen, (10.0, 11.0, 14.0), strict=True):
        object.__setattr__(entry, "at", at)
    assert timeline.rate(10.5, 15.5) == pytest.approx(300 / 5)  # 0 by 10.5, 300 by 15.5
    assert timeline.rate(11.0, 12.0) == 0  # nothing committed in between
    with pytest.raises(AssertionError, match="no batch seen"):
        timeline.rate(9.0, 12.0)
