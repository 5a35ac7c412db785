"""The exactly-once Kafka sink in the simulation's world (spark_app/sinks/kafka_eos_sink.py).

A batch's output is written one source partition range at a time, each range in its own
transaction (a driver can die between two of them, and between the last one and
`commits/N`); a transaction commits the range's records and its progress (the range's end,
the checkpoint) at once, in the progress group of the writer named by the real
`sink_rules.transactional_id`. Whether a range is written or skipped is decided by the real
`sink_rules.already_committed`, and a redeploy's catch-up moves the durable batch by the
real `eos_progress.merge` over `eos_progress.committed_ranges` read from here. What a
`read_committed` reader sees is the committed transactions' records: the world's
`Sinks.written`, which the exactly-once and never-lost invariants check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_app.api.manifest import RunnerManifest
from spark_app.api.offsets import Positions
from spark_app.api.sink_rules import (
    PROGRESS_PARTITION,
    Progress,
    TaskRange,
    already_committed,
    checkpoint_id,
    transactional_id,
    transactional_prefix,
)
from spark_app.runner.checkpoint_log import DurableBatch
from spark_app.runner.eos_progress import committed_ranges, merge

from .data import Checkpoint, Files


def exactly_once(manifest: RunnerManifest) -> bool:
    sink = manifest.spec.job.sink
    return sink.format == "kafka" and sink.guarantee == "exactly-once"


@dataclass
class TopicSink:
    """The sink cluster: each writer's progress group, and how many transactions committed
    or skipped (for the log)."""

    progress: dict[str, Progress] = field(default_factory=dict)  # progress group -> offset
    committed: int = 0
    skipped: int = 0

    def read(self, group: str, topic: str, partition: int) -> Progress:
        assert partition == PROGRESS_PARTITION, (group, topic, partition)
        return self.progress.get(group, Progress(-1))

    def write_range(self, manifest: RunnerManifest, location: str, task_range: TaskRange) -> bool:
        """One task of a batch: skipped when this checkpoint committed the range already,
        else its records and progress in one transaction. True: written."""
        prefix = transactional_prefix(manifest.metadata.name, location)
        group = transactional_id(prefix, task_range.topic, task_range.partition)
        mine = checkpoint_id(location)
        done = self.read(group, manifest.spec.job.sink.topic or "", PROGRESS_PARTITION)
        if already_committed(done, mine, task_range):
            self.skipped += 1
            return False
        self.progress[group] = Progress(task_range.end, mine)
        self.committed += 1
        return True

    def caught_up(
        self, manifest: RunnerManifest, files: Files, location: str, durable: DurableBatch | None
    ) -> DurableBatch | None:
        """The catch-up's durable batch of the checkpoint at `location`, moved on by what
        this sink committed of the batch it planned next (group_offsets.catch_up)."""
        if not exactly_once(manifest) or not location:
            return durable
        checkpoint = Checkpoint(files, location)
        newest = checkpoint.newest("offsets")
        if newest is None or (durable is not None and newest <= durable.batch_id):
            return durable
        _start, end = checkpoint.batch_range(newest)
        committed = committed_ranges(
            self.read,
            transactional_prefix(manifest.metadata.name, location),
            manifest.spec.job.sink.topic or "",
            location,
            sorted(end),
        )
        return merge(durable, DurableBatch(newest, end), committed)


def ranges(start: Positions, end: Positions) -> list[TaskRange]:
    """A batch's tasks as the source plans them (driver_side.plan_partitions): one per
    partition with something to read, in partition order."""
    return [
        TaskRange(t, p, start.get((t, p), 0), e)
        for (t, p), e in sorted(end.items())
        if e > start.get((t, p), 0)
    ]
