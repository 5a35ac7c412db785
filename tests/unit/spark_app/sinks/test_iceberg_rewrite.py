"""Compaction of an Iceberg table (`iceberg_rewrite`, the maintenance command's
`--rewrite-small-files`) on real tables (PyIceberg's SQL catalog in a SQLite file, no Spark):
what it packs together, that the rows stay the same ones, once each, through a schema that
grew, that the writer's progress survives it, and what happens beside the running job and
beside another rewrite."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from pyiceberg.exceptions import ValidationException
from pyiceberg.table.snapshots import Operation

from spark_app.sinks.iceberg_maintenance import main
from spark_app.sinks.iceberg_rewrite import commit, groups, plan
from spark_app.sinks.iceberg_sink import BatchWriter, IcebergTable, newest_batch
from tests.unit.spark_app.sinks.test_iceberg_maintenance import APP, catalog, manifest_file

pytestmark = pytest.mark.unit


def test_small_files_are_packed_per_partition_in_order_up_to_the_target():
    files = [("a", 10, 1), ("b", 10, 2), ("a", 10, 3), ("a", 80, 4), ("a", 50, 5), ("a", 30, 6)]
    # 80 is not small (>= 75% of 100); a's 10+10+50+30 is 100: one group; b's one file is none
    assert groups(files, target_bytes=100, min_input_files=2) == [[1, 3, 5, 6]]
    assert groups(files, target_bytes=60, min_input_files=2) == [[1, 3, 6]]  # 50 not small
    five = [("a", 20, i) for i in range(5)]
    assert groups(five, target_bytes=50, min_input_files=2) == [[0, 1], [2, 3]]  # [4] alone
    # a group read into memory holds at most max_group_bytes, whatever the target
    assert groups(five, 1000, 2, max_group_bytes=60) == [[0, 1, 2], [3, 4]]
    assert groups(files, target_bytes=100, min_input_files=5) == []
    assert groups(files, target_bytes=100, min_input_files=1) == [[1, 3, 5, 6]]  # 2 at least


def batch(batch_id: int, **more: list) -> pa.Table:
    keys = ["eu", "us"]
    return pa.table({"region": keys, "id": [batch_id * 10 + i for i in range(2)], **more})


def rows_of(table: IcebergTable) -> Counter:
    scanned = table.open().scan().to_arrow().to_pylist()
    return Counter(tuple(sorted(row.items())) for row in scanned)


def data_files(table: IcebergTable) -> list[str]:
    return [task.file.file_path for task in table.open().scan().plan_files()]


def test_a_rewrite_keeps_every_row_once_and_the_writers_progress(tmp_path, capsys):
    """Six batches of two partitions (12 files), the last three with a column added: the
    command rewrites them into a file per partition in one REPLACE snapshot, expires the rest,
    and the table reads back the same rows; the writer's replay is skipped and it goes on."""
    table = IcebergTable("lake.orders", catalog(tmp_path), partition_by=("region",))
    writer = BatchWriter(table, APP)
    for b in range(6):
        writer.write(batch(b, **({"note": [f"n{b}", None]} if b >= 3 else {})), b)
    before = rows_of(table)
    assert len(data_files(table)) == 12 and sum(before.values()) == 12
    path = manifest_file(tmp_path, {"format": "iceberg", "table": "lake.orders",
                                    "catalog": catalog(tmp_path)})  # fmt: skip
    assert main(["--manifest", path, "--rewrite-small-files", "--min-input-files", "2",
                 "--older-than-hours", "0"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "rewrite: 12 small files in 2 groups replaced by 2" in out, out
    opened = table.open()
    assert opened.current_snapshot().summary.operation == Operation.REPLACE
    assert len(opened.snapshots()) == 1 and len(data_files(table)) == 2
    assert rows_of(table) == before  # the old files' rows with note null, once each
    assert newest_batch(opened, APP) == 5
    assert not BatchWriter(table, APP).write(batch(5), 5)  # a restore's replay: skipped
    assert writer.write(batch(6, note=["n6", None]), 6)
    assert sum(rows_of(table).values()) == 14


def test_the_jobs_commit_between_plan_and_commit_is_kept_and_a_second_rewrite_refused(tmp_path):
    """The job appends after the rewrite was planned: the rewrite is rebased over it (the new
    file neither replaced nor lost). Two rewrites planned from one snapshot: the second finds
    its files gone and commits nothing."""
    table = IcebergTable("lake.orders", catalog(tmp_path))
    writer = BatchWriter(table, APP)
    for b in range(4):
        writer.write(batch(b), b)
    first, second = plan(table.open(), 2), plan(table.open(), 2)
    assert first.files == second.files == 4
    writer.write(batch(4), 4)  # the running job's next batch
    assert commit(first) == {"filesReplaced": 4, "filesWritten": 1}
    assert sum(rows_of(table).values()) == 10 and max(rows_of(table).values()) == 1
    assert len(data_files(table)) == 2  # the rewrite's file and batch 4's
    with pytest.raises(ValidationException, match="concurrently deleted"):
        commit(second)
    assert sum(rows_of(table).values()) == 10 and max(rows_of(table).values()) == 1
    assert newest_batch(table.open(), APP) == 4
