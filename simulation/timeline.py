"""The history's one discrete-event queue: virtual time (clock.py), events ordered by when
they are due and then by when they were scheduled, every delay drawn from the seeded random
stream (so a seed replays exactly), and the trace a shrunk story is told from."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from .clock import Clock


@dataclass(order=True)
class Event:
    at: float
    seq: int
    kind: str = field(compare=False)
    arg: Any = field(compare=False, default=None)


class Timeline:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = Clock()
        self.queue: list[Event] = []
        self.seq = 0
        self.trace: list[str] = []

    def at(self, delay: float, kind: str, arg: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.queue, Event(self.clock.t + max(delay, 0.0), self.seq, kind, arg))

    def pop(self) -> Event:
        event = heapq.heappop(self.queue)
        self.clock.t = max(self.clock.t, event.at)
        return event

    def log(self, line: str) -> None:
        self.trace.append(f"{self.clock.t:8.1f}s {line}")

    def delay(self, low: float, high: float) -> float:
        return round(self.rng.uniform(low, high), 1)
