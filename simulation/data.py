"""The data the job moves: Kafka partitions of numbered records (some of them poison: they
cannot be decoded) and the group's committed offsets, the dead-letter topic, the file system
holding checkpoints and the file sink's output, and a Delta or an Iceberg table.

A record is `(topic, partition, offset, leader epoch that wrote it)`: after an unclean leader
election a partition's offsets are written again by the new leader, and those are other
records (rule 16). What a sink's reader sees is what its batches wrote once committed: the
file sink's batches listed in its `_spark_metadata` logs, the table's commits
(`driver.Sinks.written`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from spark_app.api import offsets as off
from spark_app.api.offsets import Epochs, Positions
from spark_app.api.sink_rules import Progress
from spark_app.runner.checkpoint_log import CheckpointFiles
from spark_app.sinks.iceberg_sink import (
    APP_PROPERTY,
    BATCH_PROPERTY,
    progress_key,
    recorded_batch,
)

TOPIC = "orders"
Record = tuple[str, int, int, int]
TopicPartition = tuple[str, int]


@dataclass
class Kafka:
    partitions: int
    poison_every: int = 0  # about one record in this many cannot be decoded (0: none)
    poison_salt: int = 0  # where they fall (per seed)
    end: Positions = field(default_factory=dict)
    low: Positions = field(default_factory=dict)  # the log start: retention deleted below it
    groups: dict[str, Positions] = field(default_factory=dict)
    # records deleted before any read of them, that a driver counted (status, an Event) or
    # an executor skipped with a line in its log (failOnDataLoss=false)
    lost_told: set[Record] = field(default_factory=set)
    lost_logged: set[Record] = field(default_factory=set)
    # per (group, partition): where the group last started without an offset of its own
    # (the reset strategy's choice): what was below it was never the group's to read
    first_start: dict[tuple[str, tuple[str, int]], int] = field(default_factory=dict)
    # per partition its leaders' epochs, oldest first: (epoch, the first offset it wrote)
    leaders: dict[TopicPartition, list[tuple[int, int]]] = field(default_factory=dict)
    # the leader epoch each committed offset was committed with (where one was)
    group_epochs: dict[str, Epochs] = field(default_factory=dict)
    truncated: set[TopicPartition] = field(default_factory=set)  # by an unclean election
    # records a fresh start may read again: its group's offset was past the log end (read as
    # a recreated topic) after an unclean election truncated the log below it
    reread: set[Record] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.end = {(TOPIC, p): 0 for p in range(self.partitions)}
        self.low = dict.fromkeys(self.end, 0)
        self.leaders = {tp: [(0, 0)] for tp in self.end}

    def epochs(self) -> Epochs:
        """Each partition's leader epoch now (a ListOffsets answer's)."""
        return {tp: leaders[-1][0] for tp, leaders in self.leaders.items()}

    def written_in(self, tp: TopicPartition, offset: int) -> int:
        """The leader epoch that wrote the record at `offset` of the log as it is now."""
        return next(e for e, first in reversed(self.leaders[tp]) if first <= offset)

    def epoch_end(self, tp: TopicPartition, epoch: int) -> int:
        """OffsetsForLeaderEpoch: where the log the leader of `epoch` wrote ends in the log as
        it is now (the first offset of the next epoch's leader, else the log end)."""
        later = [first for e, first in self.leaders[tp] if e > epoch]
        return later[0] if later else self.end[tp]

    def elect(self, partition: int, back: int) -> None:
        """A new leader: clean (`back` 0), or unclean, a replica without the last `back`
        records (not below the log start): the log is truncated, and the offsets it lost are
        written again by the new leader (other records)."""
        tp = (TOPIC, partition)
        cut = max(self.low[tp], self.end[tp] - back)
        kept = [(e, first) for e, first in self.leaders[tp] if first < cut]
        self.leaders[tp] = [*kept, (self.leaders[tp][-1][0] + 1, cut)]
        if cut < self.end[tp]:
            self.end[tp] = cut
            self.truncated.add(tp)

    def record(self, tp: TopicPartition, offset: int) -> Record:
        return (*tp, offset, self.written_in(tp, offset))

    def records(self, start: Positions, end: Positions) -> list[Record]:
        """The records of `[start, end)` in the log as it is now."""
        return [
            (t, p, o, self.written_in((t, p), o))
            for (t, p), e in sorted(end.items())
            for o in range(start.get((t, p), 0), e)
        ]

    def retain(self, partition: int, keep: int) -> None:
        """Retention: only the last `keep` records of the partition are left."""
        tp = (TOPIC, partition)
        self.low[tp] = max(self.low[tp], self.end[tp] - keep)

    def deleted(self, record: Record) -> bool:
        topic, partition, offset, _ = record
        return offset < self.low[(topic, partition)]

    def poison(self, record: Record) -> bool:
        _, partition, offset, _ = record
        every = self.poison_every
        return every > 0 and (offset * 31 + partition * 17 + self.poison_salt) % every == 0

    def produce(self, partition: int, count: int) -> None:
        self.end[(TOPIC, partition)] += count

    def committed(self, group: str) -> Positions:
        return dict(self.groups.get(group, {}))

    def started_anew(self, group: str, tp: TopicPartition, offset: int) -> None:
        """`group` started at `offset` without a position of its own (the reset strategy's
        choice): what lies below it was never the group's to read."""
        key = (group, tp)
        self.first_start[key] = max(self.first_start.get(key, 0), offset)

    def committed_epochs(self, group: str) -> Epochs:
        return dict(self.group_epochs.get(group, {}))

    def commit(self, group: str, positions: Positions, epochs: Epochs | None = None) -> None:
        """As Kafka does: any offset is taken, backwards too, with its leader epoch or none."""
        self.groups.setdefault(group, {}).update(positions)
        kept = self.group_epochs.setdefault(group, {})
        for tp in positions:
            if epochs and tp in epochs:
                kept[tp] = epochs[tp]
            else:
                kept.pop(tp, None)


@dataclass
class DeadLetterTopic:
    """The dead-letter topic as its read_committed consumers see it, and its writers'
    progress groups (spark_app/dead_letter.py): a transaction adds its copies and commits its
    progress offset at once, or (its writer killed first) nothing."""

    copies: list[tuple[str, Record]] = field(default_factory=list)  # (the job's group, record)
    # by progress group and source partition
    progress: dict[str, dict[TopicPartition, Progress]] = field(default_factory=dict)

    def committed(self, progress_group: str, tp: TopicPartition) -> Progress:
        return self.progress.get(progress_group, {}).get(tp, Progress(-1001))  # OFFSET_INVALID

    def commit(
        self,
        group: str,
        progress_group: str,
        tp: TopicPartition,
        rows: list[Record],
        handled: Progress,
    ) -> None:
        self.copies.extend((group, row) for row in rows)
        self.progress.setdefault(progress_group, {})[tp] = handled


class Files:
    """A file system: paths to text (checkpoint logs, the file sink's logs), with each
    directory's entries indexed (a listing costs what it lists)."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.entries: dict[str, set[str]] = {}
        self.deletions = 0  # trees deleted so far

    def write(self, path: str, text: str) -> None:
        self.files[path] = text
        parent, _, name = path.rpartition("/")
        while parent and name not in self.entries.setdefault(parent, set()):
            self.entries[parent].add(name)
            parent, _, name = parent.rpartition("/")

    def names(self, directory: str) -> list[str]:
        return sorted(self.entries.get(directory.rstrip("/"), ()))

    def delete_tree(self, directory: str) -> None:
        prefix = directory.rstrip("/") + "/"
        for path in [p for p in self.files if p.startswith(prefix)]:
            del self.files[path]
        for path in [p for p in self.entries if p.startswith(prefix) or p == prefix[:-1]]:
            del self.entries[path]
        self.deletions += 1


class Checkpoint(CheckpointFiles):
    """The runner's own reader of a checkpoint's logs (`durable_batch`, `newest`) over the
    simulated file system instead of Hadoop's."""

    def __init__(self, files: Files, location: str) -> None:
        self.files = files
        self.location = location.rstrip("/")

    def newest(self, log: str) -> int | None:
        from spark_app.runner.checkpoint_log import newest_batch

        return newest_batch(self.files.names(f"{self.location}/{log}".rstrip("/")))

    def has(self, log: str, batch_id: int) -> bool:
        return f"{self.location}/{log}/{batch_id}" in self.files.files

    def read(self, log: str, batch_id: int) -> str:
        return self.files.files[f"{self.location}/{log}/{batch_id}"]

    def write_offsets(
        self,
        batch_id: int,
        end: Positions,
        start: Positions | None,
        epochs: Epochs,
        start_epochs: Epochs,
    ) -> bool:
        """offsets/N, only if absent (Spark's HDFSMetadataLog.add): False when another
        driver of the checkpoint wrote it first ("Concurrent update to the log. Multiple
        streaming jobs detected"), and the query fails. With the leader epochs of its end
        (and batch 0's start) as the source's `latestOffset` returns them."""
        entry = off.batch_offset(end, start, epochs, start_epochs)
        return self._add(f"offsets/{batch_id}", "v1\n{}\n" + json.dumps(entry))

    def write_commit(self, batch_id: int) -> bool:
        return self._add(f"commits/{batch_id}", "v1\n{}")

    def _add(self, name: str, text: str) -> bool:
        path = f"{self.location}/{name}"
        if path in self.files.files:
            return False
        self.files.write(path, text)
        return True

    def batch_range(self, batch_id: int) -> tuple[Positions, Positions]:
        """[start, end) of a planned batch: batch 0 pins its start, later ones start where the
        batch before ended."""
        before, entry = self._entries(batch_id)
        return off.start_positions(before, entry), off.end_positions(entry)

    def batch_epochs(self, batch_id: int) -> tuple[Epochs, Epochs]:
        """The leader epochs kept with a planned batch's start and end."""
        before, entry = self._entries(batch_id)
        return off.start_epochs(before, entry), off.end_epochs(entry)

    def _entries(self, batch_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """offsets/N's source entry, and the one of the batch before (none for batch 0)."""
        entry = json.loads(self.read("offsets", batch_id).splitlines()[2])
        if batch_id == 0 or "start" in entry:
            return dict(off.FRESH_START), entry
        return json.loads(self.read("offsets", batch_id - 1).splitlines()[2]), entry


@dataclass
class FileSink:
    """Spark's file sink: per output directory a log of batches; a batch whose id the log has
    already is skipped (Spark's FileStreamSink)."""

    written: dict[str, dict[int, list[Record]]] = field(default_factory=dict)

    def newest(self, directory: str) -> int | None:
        batches = self.written.get(directory.removesuffix("/_spark_metadata"), {})
        return max(batches) if batches else None

    def add_batch(self, directory: str, batch_id: int, rows: list[Record]) -> bool:
        log = self.written.setdefault(directory, {})
        if log and batch_id <= max(log):
            return False
        log[batch_id] = rows
        return True


@dataclass
class Table:
    """A Delta table written by delta-rs from the driver: each batch one commit carrying its
    writer's (app id, batch id); a batch the table has for that app id writes nothing."""

    txns: dict[str, int] = field(default_factory=dict)

    def committed_batch(self, app: str) -> int | None:
        return self.txns.get(app)

    def add_batch(self, app: str, batch_id: int, rows: list[Record]) -> bool:
        if self.txns.get(app, -1) >= batch_id:
            return False
        self.txns[app] = batch_id
        return True


@dataclass
class IcebergTable:
    """An Iceberg table written by PyIceberg from the driver: each batch one catalog commit
    whose snapshot summary carries (app id, batch id) and which sets that app's progress
    property (`iceberg_sink.recorded_batch` reads them back). Maintenance beside the job (a
    compaction's commit, then snapshot expiry) leaves only the newest snapshot's summary."""

    properties: dict[str, str] = field(default_factory=dict)
    summaries: list[dict[str, str]] = field(default_factory=list)  # newest first

    def committed_batch(self, app: str) -> int | None:
        return recorded_batch(self.properties, self.summaries, app)

    def add_batch(self, app: str, batch_id: int, rows: list[Record]) -> bool:
        done = self.committed_batch(app)
        if done is not None and done >= batch_id:
            return False
        self.summaries.insert(0, {APP_PROPERTY: app, BATCH_PROPERTY: str(batch_id)})
        self.properties[progress_key(app)] = str(batch_id)
        return True

    def maintain(self) -> None:
        self.summaries[:] = [{"operation": "replace"}]
