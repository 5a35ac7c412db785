"""What a driver process reads and writes besides its pod (driver.py): the sinks, as their
readers see them, and the world's callbacks (its reports, the go signal, Kafka, failures)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from spark_app.api.manifest import RunnerManifest, epoch_sink_path
from spark_app.api.sink_spec import TABLE_SINKS
from spark_app.runner.group_offsets import sink_batch
from spark_app.sinks.delta_sink import app_id

from .data import DeadLetterTopic, Files, FileSink, IcebergTable, Kafka, Record, Table
from .kafka_out import TopicSink


class Failing(Protocol):
    """The driver (driver.py) a failure is told of."""

    pod: str
    uid: str
    counted_lost: bool


@dataclass
class Sinks:
    files: FileSink
    table: Table
    written: list[tuple[str, Record]] = field(default_factory=list)  # (group, record)
    topic: TopicSink = field(default_factory=TopicSink)  # the exactly-once Kafka sink
    iceberg: IcebergTable = field(default_factory=IcebergTable)

    def table_of(self, sink_format: str) -> Table | IcebergTable:
        return self.iceberg if sink_format == "iceberg" else self.table

    def newest(self, manifest: RunnerManifest, checkpoint: str) -> int | None:
        sink = manifest.spec.job.sink
        return sink_batch(
            sink.format,
            sink.path,
            checkpoint,
            table_batch=self.table_of(sink.format).committed_batch,
            log_newest=self.files.newest,
        )

    def add_batch(
        self, manifest: RunnerManifest, epoch: int, location: str, batch: int, rows: list[Record]
    ) -> bool:
        sink = manifest.spec.job.sink
        if sink.format in TABLE_SINKS:
            written = self.table_of(sink.format).add_batch(app_id(location), batch, rows)
        else:
            assert sink.path is not None
            directory = epoch_sink_path(sink.path, location) or f"{sink.path}/epoch-{epoch}"
            written = self.files.add_batch(directory, batch, rows)
        if written:  # what the reader sees, with the group that read it
            group = manifest.spec.job.source.group_id or ""
            self.written.extend((group, row) for row in rows)
        return written

    def add_range(self, manifest: RunnerManifest, location: str, task, rows: list[Record]) -> None:
        """One task of the exactly-once Kafka sink: its transaction (`rows`, what a
        read_committed reader then sees), or a skip."""
        if self.topic.write_range(manifest, location, task):
            group = manifest.spec.job.source.group_id or ""
            self.written.extend((group, row) for row in rows)


@dataclass
class World:
    """What a driver reads and writes besides its pod."""

    kafka: Kafka
    files: Files
    sinks: Sinks
    report: Callable[[str, str, dict[str, Any]], bool]  # (job, key, value): written?
    read_go: Callable[[str], dict[str, Any] | None]  # a ConfigMap's go.json (None: none)
    commit_fails: Callable[[], bool]
    log: Callable[[str], None]
    dead_letter: DeadLetterTopic
    failed: Callable[[Failing, str], None]  # a failure the operator must tell (reported.py)
    data_loss_held: set[str]  # jobs (uids) whose last run failed on data loss, none since
    now: float  # the world's clock
