"""Polling for the tiers that watch real processes and real clusters (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


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
    and the last value when `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
