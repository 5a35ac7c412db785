"""Polling for the tiers that watch real processes and real clusters (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(
    fn: Callable[[], T], timeout: float = 30.0, what: str = "condition", interval: float = 0.1
) -> T:
    """Polls `fn` until it returns something truthy (returned); fails the test naming `what`
    and the last value when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
