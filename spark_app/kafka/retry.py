"""One retry mechanism for every Kafka call outside the executors' reads: the driver's offset
and metadata look-ups, the group commits, the operator's readings and offsets actions.

A call is a series of **fresh bounded attempts under one overall deadline**: each attempt gets
a short timeout of its own (2 s, growing by half up to 8 s), never the whole remaining budget,
so an attempt stuck on a leader that moved mid-request is abandoned and the next one starts on
refreshed metadata (the caller's `refresh` drops its clients: librdkafka was seen answering
FENCED_LEADER_EPOCH for a whole 30 s request on a stale leader). Between attempts, backoff
from 0.1 s doubling to 1 s.

The overall deadline (`DEADLINE_S`, 60 s) outlasts a broker restart: a SIGKILLed leader is only
declared dead by the KRaft controller after `broker.session.timeout.ms` (9 s by default), then
a new leader is elected from the ISR (well under a second), its metadata reaches the brokers
and the client refreshes (a second or two); a group coordinator that moved loads the group's
offsets partition first (seconds on a small `__consumer_offsets`). About 12-15 s, so 60 s
leaves room for a slow machine and for a second node of a rolling restart going down right
after the first came back, while a cluster that stays unreachable still fails the call within
a minute, naming the broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

T = TypeVar("T")

DEADLINE_S = 60.0


@dataclass(frozen=True)
class Attempts:
    """How a call is retried: attempts of `first_s` seconds growing by `growth` up to
    `longest_s`, `backoff_s` (doubling to `max_backoff_s`) apart, all within `deadline_s`."""

    deadline_s: float = DEADLINE_S
    first_s: float = 2.0
    longest_s: float = 8.0
    growth: float = 1.5
    backoff_s: float = 0.1
    max_backoff_s: float = 1.0


def transient_codes() -> frozenset[int]:
    """Errors a leader or coordinator change answers with: librdkafka does not flag all of
    them as retriable in admin results."""
    from confluent_kafka import KafkaError

    return frozenset(
        {
            KafkaError.NOT_COORDINATOR,
            KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.FENCED_LEADER_EPOCH,
            KafkaError.UNKNOWN_LEADER_EPOCH,
            KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError.REPLICA_NOT_AVAILABLE,
            # a new leader answers ListOffsets so until its high watermark caught up (KIP-207)
            KafkaError.OFFSET_NOT_AVAILABLE,
            KafkaError.KAFKA_STORAGE_ERROR,
            KafkaError.NETWORK_EXCEPTION,
            KafkaError.NOT_ENOUGH_REPLICAS,
            KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            KafkaError.REQUEST_TIMED_OUT,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT,
            KafkaError._WAIT_COORD,
            KafkaError._NOENT,  # "No leaders found": partitions without a leader for a moment
        }
    )


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError an exception carries, if any."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


class NoAnswerYet(Exception):
    """An answer that is not one: e.g. a ListOffsets result of -1001 (OFFSET_INVALID) without
    an error, as librdkafka gives for a partition whose leader was just lost."""


def is_transient(exc: BaseException) -> bool:
    """A failure a later attempt may not see: a timed-out attempt, a non-answer, or a Kafka
    error a leader or coordinator change causes."""
    if isinstance(exc, FutureTimeout | TimeoutError | NoAnswerYet):
        return True
    error = kafka_error(exc)
    return error is not None and (error.retriable() or error.code() in transient_codes())


class GaveUp(Exception):
    """The deadline passed (or a failure was not transient): `last` is the last failure."""

    def __init__(self, last: BaseException, attempts: int, waited_s: float):
        super().__init__(f"{attempts} attempt(s) in {waited_s:.1f}s; last: {last}")
        self.last, self.attempts, self.waited_s = last, attempts, waited_s


def retrying(
    call: Callable[[float], T],
    attempts: Attempts = Attempts(),
    refresh: Callable[[BaseException], None] | None = None,
    transient: Callable[[BaseException], bool] = is_transient,
) -> T:
    """`call(timeout)` until it returns; raises `GaveUp` from its last failure once that is
    not `transient` or the deadline would pass. `refresh(failure)` runs before each retry (it
    may raise to stop early, e.g. on a refused login)."""
    started = time.monotonic()
    deadline = started + attempts.deadline_s
    attempt_s, backoff, tries = attempts.first_s, attempts.backoff_s, 0
    while True:
        tries += 1
        left = deadline - time.monotonic()
        try:
            return call(max(0.1, min(attempt_s, left)))
        except Exception as exc:
            waited = time.monotonic() - started
            if not transient(exc) or time.monotonic() + backoff >= deadline:
                raise GaveUp(exc, tries, waited) from exc
            if refresh is not None:
                refresh(exc)
        time.sleep(backoff)
        backoff = min(attempts.max_backoff_s, backoff * 2)
        attempt_s = min(attempts.longest_s, attempt_s * attempts.growth)
