"""Virtual time: seconds since the history began, and the same moment as a datetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> datetime:
        return T0 + timedelta(seconds=self.t)
