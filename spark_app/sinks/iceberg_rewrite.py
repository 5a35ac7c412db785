"""Compaction of a job's Iceberg table beside the running job: small data files rewritten into
fewer, each rewrite one REPLACE snapshot (the rows unchanged), as Iceberg's own
`rewrite_data_files` does; PyIceberg 0.12 has none.

A streaming job commits a file per batch and partition, so its table is many small files.
`plan` packs the small ones (under 75% of the table's `write.target-file-size-bytes`, Iceberg's
`min-file-size-bytes` rule) of each partition, in order, into groups of at most that target
size and 128 MiB (a group's rows are read into memory); a group of `--min-input-files` or
more is read back (through the table's current schema: older files gain the columns added
since) and written as new files of the same partition.
`commit` replaces all groups' files in one snapshot whose operation is `replace`, so readers
of the table's changes skip it as they skip Java's compactions.

Exactly once is kept: the writer's progress is a table property, which a rewrite never
touches, and the rows of the replaced files are those of the new ones. Concurrency follows
Iceberg's RewriteFiles: the job's appends between the plan and the commit are rebased over
(PyIceberg's retry), and the commit fails (ValidationException, nothing changed) only if a
file it replaces is gone, i.e. another rewrite or an expiry of the table took it first.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.table import TableProperties
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.table.update.validate import (
    _validate_data_files_exist,
    _validate_no_new_deletes_for_data_files,
)

SMALL_FRACTION = 0.75  # Iceberg's min-file-size-bytes: 75% of the target file size
MIN_INPUT_FILES = 5  # Iceberg's min-input-files
# a group's rows are read into memory: its input files hold at most this much (below
# Iceberg's 512 MiB default target, so a rewrite's output files may stay under the target)
MAX_GROUP_BYTES = 128 * 1024 * 1024
SNAPSHOT_PROPERTIES = {"streamingjob.maintenance": "rewrite-small-files"}

Item = TypeVar("Item")


def groups(
    files: Iterable[tuple[Hashable, int, Item]],
    target_bytes: int,
    min_input_files: int,
    max_group_bytes: int = MAX_GROUP_BYTES,
) -> list[list[Item]]:
    """Of `files` (partition, size, item), the small ones of each partition packed in order
    into groups of at most `target_bytes` (and `max_group_bytes`) in all; the groups of
    `min_input_files` or more."""
    small = target_bytes * SMALL_FRACTION
    limit = min(target_bytes, max_group_bytes)
    packed: dict[Hashable, list[list[Item]]] = {}
    sizes: dict[Hashable, int] = {}
    for partition, size, item in files:
        if size >= small:
            continue
        bins = packed.setdefault(partition, [[]])
        if bins[-1] and sizes[partition] + size > limit:
            bins.append([])
            sizes[partition] = 0
        bins[-1].append(item)
        sizes[partition] = sizes.get(partition, 0) + size
    return [b for bins in packed.values() for b in bins if len(b) >= max(min_input_files, 2)]


@dataclass(frozen=True)
class Rewrite:
    """What one rewrite replaces: groups of a table's scan tasks, as of `table`'s snapshot."""

    table: Any  # the pyiceberg Table the plan was made from
    tasks: list[list[Any]]  # FileScanTasks, a list per group

    @property
    def files(self) -> int:
        return sum(len(group) for group in self.tasks)


def target_file_size(table: Any) -> int:
    value = table.properties.get(TableProperties.WRITE_TARGET_FILE_SIZE_BYTES)
    return int(value) if value else TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT


def plan(table: Any, min_input_files: int = MIN_INPUT_FILES) -> Rewrite:
    """The groups to rewrite of `table`'s current snapshot (data files of its current
    partition spec with no delete file on them: an append-only job's)."""
    spec_id = table.metadata.default_spec_id
    candidates = (
        ((task.file.partition,), task.file.file_size_in_bytes, task)
        for task in table.scan().plan_files()
        if task.file.spec_id == spec_id and not task.delete_files
    )
    return Rewrite(table, groups(candidates, target_file_size(table), min_input_files))


def commit(rewrite: Rewrite) -> dict[str, int]:
    """Writes each group's rows as new files and replaces the group's files by them, in one
    REPLACE snapshot. The counts of files replaced and written."""
    table = rewrite.table
    written = 0
    with table.transaction() as transaction:
        replace = _ReplaceFiles.of(transaction, table.io)
        for group in rewrite.tasks:
            scan = ArrowScan(transaction.table_metadata, table.io, table.schema(), AlwaysTrue())
            rows = scan.to_table(group)
            for data_file in _dataframe_to_data_files(
                transaction.table_metadata, rows, table.io, replace.commit_uuid
            ):
                replace.append_data_file(data_file)
                written += 1
            for task in group:
                replace.delete_data_file(task.file)
        replace.commit()
    return {"filesReplaced": rewrite.files, "filesWritten": written}


def rewrite_small_files(table: Any, min_input_files: int = MIN_INPUT_FILES) -> dict[str, int]:
    """`plan`, then `commit` where there is anything to rewrite (the maintenance step)."""
    rewrite = plan(table, min_input_files)
    counts = commit(rewrite) if rewrite.tasks else {"filesReplaced": 0, "filesWritten": 0}
    print(
        f"rewrite: {counts['filesReplaced']} small files in {len(rewrite.tasks)} groups "
        f"replaced by {counts['filesWritten']}"
    )
    return {"groups": len(rewrite.tasks), **counts}


class _ReplaceFiles(_OverwriteFiles):
    """PyIceberg's overwrite made Iceberg's RewriteFiles: the snapshot's operation `replace`,
    and validated for the files it replaces alone (an overwrite also refuses any file added
    since its base: the running job's next batch would fail every rewrite)."""

    @classmethod
    def of(cls, transaction: Any, io: Any) -> _ReplaceFiles:
        return cls(Operation.OVERWRITE, transaction, io, snapshot_properties=SNAPSHOT_PROPERTIES)

    def _summary(self, snapshot_properties: dict[str, str] = SNAPSHOT_PROPERTIES) -> Summary:
        summary = super()._summary(snapshot_properties)  # the totals, as an overwrite's
        return Summary(Operation.REPLACE, **summary.additional_properties)

    def _validate_concurrency(self) -> None:
        window = self._commit_window
        if window is None or window.is_empty() or window.head is None:
            return
        table, files = self._transaction._table, self._deleted_data_files
        _validate_data_files_exist(table, window.head, files, window.base)
        _validate_no_new_deletes_for_data_files(table, window.head, None, files, window.base)
