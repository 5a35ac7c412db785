"""A checkpoint's two logs, read back: which batch is durable and where it ended.

Spark writes `offsets/<N>` (the batch's end offsets, before it runs) and `commits/<N>`
(after the sink finished): a batch is durable once its commit-log entry exists, and its end
offsets are our source's JSON in its offset-log entry. The runner reads these to commit a
durable batch's end offsets to the group: after each batch, at a graceful stop, and for the
previous epoch before a fresh one resolves committed offsets (semantics rules 3, 5 and 9).

The parsing is pure; `CheckpointFiles` reads through Hadoop's FileSystem in the driver's JVM,
so every checkpoint scheme Spark supports (file://, s3a://) works with the job's own
credentials and settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spark_app.api import offsets as off
from spark_app.api.offsets import Epochs, Positions
from spark_app.runner.error_text import first_line


class CheckpointUnreadable(RuntimeError):
    """A checkpoint whose logs cannot be read or hold no offsets of our source."""


@dataclass(frozen=True)
class DurableBatch:
    batch_id: int
    end: Positions
    # the leader epoch kept with each end position, where one is (rule 16): committed with it
    epochs: Epochs = field(default_factory=dict)


def newest_batch(names: Iterable[str]) -> int | None:
    """The newest batch id among a log directory's file names (temporary files skipped; a
    file sink's compacted entries are `<N>.compact`)."""
    ids = [int(n) for name in names if (n := name.removesuffix(".compact")).isdigit()]
    return max(ids) if ids else None


def source_end_offsets(offset_log_entry: str) -> Positions:
    """The end offsets of our source in an `offsets/<N>` file."""
    return off.end_positions(source_offset(offset_log_entry))


def source_offset(offset_log_entry: str) -> dict:
    """Our source's offset dict in an `offsets/<N>` file: a version line, the batch's
    metadata, then one line per source ("-" for a source without an offset)."""
    lines = offset_log_entry.splitlines()
    if not lines or not lines[0].startswith("v"):
        raise CheckpointUnreadable("not an offset-log entry (no version line)")
    for line in lines[2:]:
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get("offsets"), dict):
            return parsed
    raise CheckpointUnreadable("the offset-log entry holds no kafka_checkpointed offsets")


def ahead_of_group(durable: Positions, group: Mapping[tuple[str, int], int | None]) -> Positions:
    """The partitions where a durable end is ahead of the group's committed offset (or the
    group has none): committing only these never moves the group backwards."""
    return {
        tp: offset
        for tp, offset in sorted(durable.items())
        if group.get(tp) is None or offset > group[tp]  # type: ignore[operator]
    }


class CheckpointFiles:
    """One checkpoint location's logs, through the session's Hadoop configuration."""

    def __init__(self, spark, location: str):
        self._spark = spark
        self._jvm = spark._jvm
        self._conf = spark._jsc.hadoopConfiguration()
        self.location = location.rstrip("/")

    def _path(self, relative: str):
        return self._jvm.org.apache.hadoop.fs.Path(f"{self.location}/{relative}".rstrip("/"))

    def newest(self, log: str) -> int | None:
        path = self._path(log)
        fs = path.getFileSystem(self._conf)
        if not fs.exists(path):
            return None
        return newest_batch(s.getPath().getName() for s in fs.listStatus(path))

    def has(self, log: str, batch_id: int) -> bool:
        path = self._path(f"{log}/{batch_id}")
        return bool(path.getFileSystem(self._conf).exists(path))

    def read(self, log: str, batch_id: int) -> str:
        path = self._path(f"{log}/{batch_id}")
        stream = path.getFileSystem(self._conf).open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def read_text(self, relative: str) -> str | None:
        """A file of ours in the checkpoint location (UTF-8); None: there is none."""
        path = self._path(relative)
        if not path.getFileSystem(self._conf).exists(path):
            return None
        stream = path.getFileSystem(self._conf).open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write_text(self, relative: str, text: str) -> None:
        """Writes (or replaces) a file of ours in the checkpoint location, which it creates
        if need be (Spark's own files beside it are not touched)."""
        path = self._path(relative)
        store = path.getFileSystem(self._conf)
        store.mkdirs(path.getParent())
        stream = store.create(path, True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()

    def durable_batch(self, in_sink: int | None = None) -> DurableBatch | None:
        """The newest batch in the commit log and its end offsets; None: nothing durable.

        `in_sink`: the newest batch of this checkpoint's query the sink itself committed (a
        file sink's `_spark_metadata`, a table's log). Such a batch is in the output even
        when the driver died before Spark's commit-log entry: it counts as durable here, or
        the next epoch would write it again."""
        try:
            batch_id = self.newest("commits")
            if in_sink is not None and (batch_id is None or in_sink > batch_id):
                batch_id = in_sink if self.has("offsets", in_sink) else batch_id
            if batch_id is None:
                return None
            end = source_offset(self.read("offsets", batch_id))
            return DurableBatch(batch_id, off.end_positions(end), off.end_epochs(end))
        except CheckpointUnreadable as exc:
            raise CheckpointUnreadable(f"{self.location}: {exc}") from None
        except Exception as exc:  # py4j errors: missing files, denied access, bad scheme
            first = first_line(exc)
            raise CheckpointUnreadable(f"{self.location}: {first}") from None
