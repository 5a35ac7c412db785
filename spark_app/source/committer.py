"""Commits completed checkpoints' offsets to the consumer group (semantics rule 3).

Like Flink's KafkaConsumerThread: one pending slot; a newer complete checkpoint replaces an
older one that was not sent yet (with Flink's warning); commits run on a background thread
so the micro-batch thread never waits for Kafka; a failure is logged and counted and never
fails the query, because Kafka's offsets serve monitoring and redeploys, not correctness.

Unlike Flink, whose next checkpoint commits again, a micro-batch stream that goes idle has no
next batch: a failed commit is sent again after a backoff (1 s, doubling to 30 s) until it
goes through or newer offsets replace it, so an idle stream's group does not stay behind its
output (found by the simulation: simulation/, docs/semantics.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from spark_app.api.offsets import Epochs, Positions
from spark_app.source.partition_state import PartitionStateTable

log = logging.getLogger(__name__)

# A durable batch's end offsets and the leader epoch kept with each (rule 16), sent together
CommitFn = Callable[[Positions, Epochs], None]
Durable = tuple[Positions, Epochs]


class OffsetCommitter:
    def __init__(
        self,
        table: PartitionStateTable,
        commit: CommitFn,
        name: str = "committer",
        retry_seconds: tuple[float, float] = (1.0, 30.0),
    ):
        self._table = table
        self._commit = commit
        self._retry_base, self._retry_cap = retry_seconds
        self._retry: Durable | None = None  # failed, to be sent again at _retry_at
        self._retry_at = 0.0
        self._failures = 0  # in a row, for the backoff
        self._wakeup = threading.Condition()
        self._pending: Durable | None = None
        self._last_sent: Positions | None = None
        self._in_flight = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, offsets: Positions, again: bool = False, epochs: Epochs | None = None) -> None:
        """Hands a durable batch's end offsets (and their leader epochs) over; returns at
        once. `again` sends offsets sent before (the group was found behind them)."""
        with self._wakeup:
            pending = self._pending[0] if self._pending else None
            if not again and (offsets == self._last_sent or offsets == pending):
                return  # the same checkpoint signalled twice (latestOffset and commit())
            if self._pending is not None:
                log.warning(
                    "Committing offsets to Kafka takes longer than the checkpoint interval. "
                    "Skipping commit of previous offsets because newer complete checkpoint "
                    "offsets are available."
                )
                self._table.record_commit_skipped()
            self._pending = (dict(offsets), dict(epochs or {}))
            self._wakeup.notify()

    def flush(self, timeout: float) -> bool:
        """Waits until nothing is pending or in flight; True when that happened in time."""
        with self._wakeup:
            return self._wakeup.wait_for(
                lambda: self._pending is None and not self._in_flight, timeout
            )

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        with self._wakeup:
            self._closed = True
            self._wakeup.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while (durable := self._next()) is not None:
            offsets, epochs = durable
            try:
                self._commit(offsets, epochs)
            except Exception as exc:
                self._table.record_commit_failure()
                log.warning("Failed to commit consumer offsets %s: %s", offsets, exc)
                self._failed(durable)
            else:
                self._table.mark_committed(offsets)
                with self._wakeup:
                    self._last_sent, self._retry, self._failures = offsets, None, 0
            finally:
                with self._wakeup:
                    self._in_flight = False
                    self._wakeup.notify_all()

    def _next(self) -> Durable | None:
        """The offsets to send next (None: closed): the newest submitted, or a failed commit
        once its backoff is over."""
        with self._wakeup:
            while self._pending is None and not self._closed:
                if self._retry is not None and time.monotonic() >= self._retry_at:
                    self._pending, self._retry = self._retry, None
                    break
                timeout = max(self._retry_at - time.monotonic(), 0) if self._retry else None
                self._wakeup.wait(timeout)
            if self._pending is None:
                return None
            durable, self._pending = self._pending, None
            self._in_flight = True
            return durable

    def _failed(self, durable: Durable) -> None:
        with self._wakeup:
            self._failures += 1
            if self._pending is None:  # newer offsets replace it otherwise
                delay = self._retry_base * 2 ** min(self._failures - 1, 16)
                self._retry = durable
                self._retry_at = time.monotonic() + min(delay, self._retry_cap)
