"""Polling for the tiers that watch real processes and real clusters (never a bare sleep)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Every wait here bounds progress (did it happen at all), never a speed, so a loaded machine
# may stretch them all: scripts/test-all.sh sets 2, as CI runs each tier beside the others on
# two cores, where a launch that takes 2 s alone took over 30 s (docs/ci.md, runs 87 to 90).
PATIENCE = float(os.environ.get("DEVBED_WAIT_PATIENCE", "1"))


class Unmet:
    """A probe's "not yet" that says what it saw: falsy, so `wait_for` keeps polling, and
    shown in the timeout's message (a bare False hides why a wait failed)."""

    def __init__(self, **seen: Any) -> None:
        self.seen = seen

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Unmet({', '.join(f'{k}={v!r}' for k, v in self.seen.items())})"


def wait_for(
    fn: Callable[[], T], timeout: float = 30.0, what: str = "condition", interval: float = 0.1
) -> T:
    """Polls `fn` until it returns something truthy (returned); fails the test naming `what`
    and the last value when `timeout` seconds (times PATIENCE) pass first."""
    timeout *= PATIENCE
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
