"""The latency benchmark's pure parts: a record's value (its produce time), the producer's
pace, percentiles and batch rates. No I/O here, so tests/unit/test_latency_stats.py pins them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# A record's value: its produce time (ns since the epoch, CLOCK_REALTIME, 19 digits) padded to
# VALUE_BYTES, so a sink's reader needs nothing but the record to know its latency.
STAMP_DIGITS = 19
VALUE_BYTES = 100
_PAD = b"." * (VALUE_BYTES - STAMP_DIGITS)


def stamped(produced_ns: int) -> bytes:
    return b"%019d" % produced_ns + _PAD


def stamp_of(value: bytes | str) -> int:
    """The produce time a value carries (a text sink gives it back as str)."""
    return int(value[:STAMP_DIGITS])


def due(rate: float, elapsed_s: float, total: int) -> int:
    """How many records a producer at `rate` per second should have sent `elapsed_s` after it
    began (the first at 0), at most `total`: a paced loop sends the difference to what it sent,
    so a stall is caught up in a burst instead of lowering the rate."""
    if elapsed_s < 0:
        return 0
    # the epsilon: at exactly next_due_s(rate, n), n/rate*rate may come out as n - 1e-13
    return min(total, math.floor(elapsed_s * rate + 1e-6) + 1)


def next_due_s(rate: float, sent: int) -> float:
    """Seconds after the start at which record number `sent` (0-based) is due."""
    return sent / rate


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0 < q <= 1) by nearest rank: a value that was measured, never an
    interpolation between two."""
    if not sorted_values:
        raise ValueError("no values")
    if not 0 < q <= 1:
        raise ValueError(f"q={q}: a quantile is in (0, 1]")
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def summary_ms(values: Sequence[int]) -> dict[str, float | int]:
    """p50 / p99 / max in milliseconds (0.1 ms) and the count of a cell's latencies (ns),
    given sorted."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50_ms": round(nearest_rank(values, 0.50) / 1e6, 1),
        "p99_ms": round(nearest_rank(values, 0.99) / 1e6, 1),
        "max_ms": round(values[-1] / 1e6, 1),
    }


def batches_per_s(
    batch_times_s: Iterable[tuple[float, int]], window: tuple[float, float]
) -> float | None:
    """Batches that read records and started inside `window` (epoch seconds), per second of it.
    `batch_times_s`: (a batch's start, its input rows), from the query's progress."""
    begin, end = window
    if end <= begin:
        return None
    count = sum(1 for started, rows in batch_times_s if rows > 0 and begin <= started < end)
    return round(count / (end - begin), 2)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None
