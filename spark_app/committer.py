"""Commits completed checkpoints' offsets to the consumer group (semantics rule 3).

Like Flink's KafkaConsumerThread: one pending slot; a newer complete checkpoint replaces an
older one that was not sent yet (with Flink's warning); commits run on a background thread
so the micro-batch thread never waits for Kafka; a failure is logged and counted and never
fails the query, because Kafka's offsets serve monitoring and redeploys, not correctness.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spark_app.offsets import Positions
from spark_app.partition_state import PartitionStateTable

log = logging.getLogger(__name__)

CommitFn = Callable[[Positions], None]


class OffsetCommitter:
    def __init__(self, table: PartitionStateTable, commit: CommitFn, name: str = "committer"):
        self._table = table
        self._commit = commit
        self._wakeup = threading.Condition()
        self._pending: Positions | None = None
        self._last_sent: Positions | None = None
        self._in_flight = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, offsets: Positions, again: bool = False) -> None:
        """Hands a durable batch's end offsets over; returns at once. `again` sends offsets
        sent before (the group was found behind them)."""
        with self._wakeup:
            if not again and (offsets == self._last_sent or offsets == self._pending):
                return  # the same checkpoint signalled twice (latestOffset and commit())
            if self._pending is not None:
                log.warning(
                    "Committing offsets to Kafka takes longer than the checkpoint interval. "
                    "Skipping commit of previous offsets because newer complete checkpoint "
                    "offsets are available."
                )
                self._table.record_commit_skipped()
            self._pending = dict(offsets)
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
        while True:
            with self._wakeup:
                self._wakeup.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                offsets, self._pending = self._pending, None
                self._in_flight = True
            try:
                self._commit(offsets)
            except Exception as exc:
                self._table.record_commit_failure()
                log.warning("Failed to commit consumer offsets %s: %s", offsets, exc)
            else:
                self._table.mark_committed(offsets)
                with self._wakeup:
                    self._last_sent = offsets
            finally:
                with self._wakeup:
                    self._in_flight = False
                    self._wakeup.notify_all()
