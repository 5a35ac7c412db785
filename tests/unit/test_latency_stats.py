"""The latency benchmark's pure helpers (bench/latency_stats.py): the value that carries a
record's produce time, the producer's pace, nearest-rank percentiles and batch rates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("latency_stats", ROOT / "bench" / "latency_stats.py")
assert _spec is not None and _spec.loader is not None
stats = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stats
_spec.loader.exec_module(stats)


def test_a_value_carries_its_produce_time_and_is_the_benchmarks_size():
    value = stats.stamped(1_764_390_000_123_456_789)
    assert len(value) == stats.VALUE_BYTES
    assert stats.stamp_of(value) == 1_764_390_000_123_456_789
    assert stats.stamp_of(value.decode()) == 1_764_390_000_123_456_789  # as a text sink has it


def test_due_counts_the_first_record_at_the_start_and_stops_at_the_total():
    assert stats.due(1000, -0.001, 10_000) == 0
    assert stats.due(1000, 0.0, 10_000) == 1
    assert stats.due(1000, 0.0005, 10_000) == 1
    assert stats.due(1000, 0.001, 10_000) == 2
    assert stats.due(1000, 0.5, 10_000) == 501
    assert stats.due(1000, 60.0, 10_000) == 10_000


def test_a_paced_loop_on_a_virtual_clock_sends_the_rate_evenly_and_catches_up_a_stall():
    rate, seconds = 10_000, 2.0
    total = int(rate * seconds)
    now, sent, sends = 0.0, 0, []
    while sent < total:
        target = stats.due(rate, now, total)
        sends += [now] * (target - sent)
        sent = target
        # the loop sleeps until the next record is due; once, it stalls 50 ms instead
        now = 0.5 + 0.05 if abs(now - 0.5) < 1e-4 else stats.next_due_s(rate, sent)
    assert sent == total
    assert sends[-1] < seconds
    assert sum(1 for t in sends if t < 1.0) == pytest.approx(rate, abs=1)
    burst = sum(1 for t in sends if abs(t - 0.55) < 1e-9)
    assert burst == pytest.approx(0.05 * rate, abs=2)  # the stall's records, sent at once


def test_nearest_rank_is_a_measured_value():
    values = list(range(1, 101))
    assert stats.nearest_rank(values, 0.5) == 50
    assert stats.nearest_rank(values, 0.99) == 99
    assert stats.nearest_rank(values, 1.0) == 100
    assert stats.nearest_rank([7, 9], 0.5) == 7  # never 8
    with pytest.raises(ValueError, match="no values"):
        stats.nearest_rank([], 0.5)
    with pytest.raises(ValueError, match="q=0"):
        stats.nearest_rank(values, 0)


def test_summary_is_in_milliseconds_from_nanoseconds():
    latencies = sorted([5_000_000] * 98 + [40_000_000, 900_000_000])
    assert stats.summary_ms(latencies) == {
        "n": 100,
        "p50_ms": 5.0,
        "p99_ms": 40.0,
        "max_ms": 900.0,
    }
    assert stats.summary_ms([]) == {"n": 0}


def test_batches_per_second_counts_batches_with_input_that_began_in_the_window():
    batches = [(9.9, 5), (10.0, 5), (10.5, 0), (11.0, 3), (11.9, 1), (12.0, 8)]
    assert stats.batches_per_s(batches, (10.0, 12.0)) == 1.5
    assert stats.batches_per_s(batches, (12.0, 12.0)) is None


def test_ratio_is_none_without_both_figures():
    assert stats.ratio(30.0, 20.0) == 1.5
    assert stats.ratio(None, 20.0) is None
    assert stats.ratio(30.0, None) is None
    assert stats.ratio(30.0, 0.0) is None
