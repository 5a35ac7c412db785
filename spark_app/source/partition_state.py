"""The driver-side partition state table and its checkpoint lock (semantics rule 2).

Flink emits a record and advances its offset inside one `synchronized (checkpointLock)`
block, and snapshots under the same lock, so a snapshot is never torn. Here three threads
of the driver-side reader process share one table:

- the micro-batch thread plans batches (`plan`) and learns which batch is durable
  (`mark_checkpointed`);
- the committer thread records what Kafka accepted (`mark_committed`);
- the partition-discovery thread adds partitions and refreshes watermarks (`discover`).

Every read and write holds `lock`; `snapshot()` returns a consistent copy.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from spark_app.api.offsets import Positions, TopicPartition


@dataclass(frozen=True)
class PartitionState:
    planned: int | None = None  # end offset of the newest planned batch
    checkpointed: int | None = None  # end offset of the newest durable batch
    committed: int | None = None  # newest offset the consumer group accepted
    latest: int | None = None  # newest known log end (or LSO under read_committed)
    # the leader epoch the broker reported with `latest` (None: it gave none); written with it
    latest_epoch: int | None = None


@dataclass(frozen=True)
class Snapshot:
    partitions: dict[TopicPartition, PartitionState]
    commits_succeeded: int
    commits_failed: int
    commits_skipped: int
    data_loss_skipped_offsets: int
    version: int

    def column(self, name: str) -> Positions:
        values = {tp: getattr(state, name) for tp, state in self.partitions.items()}
        return {tp: value for tp, value in values.items() if value is not None}


@dataclass
class PartitionStateTable:
    lock: threading.RLock = field(default_factory=threading.RLock)
    _partitions: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    _commits_succeeded: int = 0
    _commits_failed: int = 0
    _commits_skipped: int = 0
    _data_loss_skipped_offsets: int = 0
    _version: int = 0  # bumped by every write: lets tests and readers detect change

    def _update(self, positions: Positions, column: str) -> None:
        for tp, offset in positions.items():
            state = self._partitions.get(tp, PartitionState())
            self._partitions[tp] = replace(state, **{column: offset})
        self._version += 1

    def plan(self, end: Positions) -> None:
        with self.lock:
            self._update(end, "planned")

    def mark_checkpointed(self, end: Positions) -> None:
        with self.lock:
            self._update(end, "checkpointed")

    def mark_committed(self, offsets: Positions) -> None:
        with self.lock:
            self._update(offsets, "committed")
            self._commits_succeeded += 1

    def record_commit_failure(self) -> None:
        with self.lock:
            self._commits_failed += 1
            self._version += 1

    def record_commit_skipped(self) -> None:
        with self.lock:
            self._commits_skipped += 1
            self._version += 1

    def record_data_loss(self, skipped_offsets: int) -> None:
        with self.lock:
            self._data_loss_skipped_offsets += skipped_offsets
            self._version += 1

    def discover(
        self, latest: Positions, epochs: Mapping[TopicPartition, int] | None = None
    ) -> list[TopicPartition]:
        """Adds partitions not seen before and refreshes log ends, each with the leader epoch
        it came with (`epochs`: where known); returns the new ones."""
        epochs = epochs or {}
        with self.lock:
            new = [tp for tp in latest if tp not in self._partitions]
            self._update(latest, "latest")
            for tp in latest:
                state = self._partitions[tp]
                self._partitions[tp] = replace(state, latest_epoch=epochs.get(tp))
            return sorted(new)

    def partitions(self) -> list[TopicPartition]:
        with self.lock:
            return sorted(self._partitions)

    def snapshot(self) -> Snapshot:
        with self.lock:
            return Snapshot(
                partitions=dict(self._partitions),
                commits_succeeded=self._commits_succeeded,
                commits_failed=self._commits_failed,
                commits_skipped=self._commits_skipped,
                data_loss_skipped_offsets=self._data_loss_skipped_offsets,
                version=self._version,
            )
