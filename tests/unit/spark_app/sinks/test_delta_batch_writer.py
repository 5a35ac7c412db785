"""The Delta sink's batch writer on a real Delta table (delta-rs on the local disk, no Spark):
one commit per batch with its application transaction, a replay skipped, and the version
it keeps in memory never turning into a batch written twice."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from deltalake import DeltaTable as Table
from deltalake.exceptions import CommitFailedError

from spark_app.sinks.delta_sink import (
    BatchWriter,
    DeltaTable,
    SchemaIncompatible,
    schema_change,
    table_schema,
)

pytestmark = pytest.mark.unit

APP = "file:///checkpoints/ns/job/epoch-1"


def rows(batch_id: int, count: int = 5) -> pa.Table:
    return pa.table(
        {
            "batch": pa.array([batch_id] * count, pa.int64()),
            "offset": pa.array(range(batch_id * count, (batch_id + 1) * count), pa.int64()),
        }
    )


def batches_in(path) -> list[int]:
    return sorted(Table(str(path)).to_pyarrow_table(columns=["batch"]).column(0).to_pylist())


def test_a_new_table_gets_the_specs_partitioning_and_properties_and_the_batch_txn(tmp_path):
    table = DeltaTable(
        f"file://{tmp_path}/t",
        partition_by=("batch",),
        properties={"delta.logRetentionDuration": "2 days"},
    )
    assert table.committed_batch(APP) is None  # no table yet
    assert BatchWriter(table, APP).write(rows(0), 0)
    written = Table(f"{tmp_path}/t")
    assert written.metadata().partition_columns == ["batch"]
    assert written.metadata().configuration == {"delta.logRetentionDuration": "2 days"}
    assert table.committed_batch(APP) == 0 and written.transaction_version(APP) == 0


def test_a_restored_query_skips_the_batches_the_table_has_and_writes_the_next(tmp_path):
    table = DeltaTable(f"file://{tmp_path}/t")
    first = BatchWriter(table, APP)
    assert first.write(rows(0), 0) and first.write(rows(1), 1)
    restored = BatchWriter(table, APP)  # a new driver: the checkpoint replays batch 1
    assert not restored.write(rows(1), 1)
    assert restored.write(rows(2), 2)
    assert batches_in(tmp_path / "t") == [0] * 5 + [1] * 5 + [2] * 5
    assert table.committed_batch(APP) == 2
    # one commit per batch written, none for the replay
    assert Table(f"{tmp_path}/t").version() == 2


def test_maintenance_between_batches_does_not_stop_the_writer(tmp_path):
    """Compaction, a log checkpoint and vacuum by another process between two batches: the
    writer's commits go on over them (its open table's snapshot is behind; delta-rs rebases
    an append), and the application transaction survives them."""
    table = DeltaTable(f"file://{tmp_path}/t")
    writer = BatchWriter(table, APP)
    for batch_id in range(3):
        assert writer.write(rows(batch_id), batch_id)
    other = Table(f"{tmp_path}/t")
    other.optimize.compact()
    other.create_checkpoint()
    other.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert writer.write(rows(3), 3)
    assert batches_in(tmp_path / "t") == sorted([0, 1, 2, 3] * 5)
    assert Table(f"{tmp_path}/t").transaction_version(APP) == 3


def test_log_cleanup_past_the_writers_snapshot_does_not_stop_the_writer(tmp_path):
    """Maintenance commits, checkpoints and cleans the log up (a short log retention) between
    two batches: the entries after the writer's snapshot are gone, so delta-rs cannot rebase
    its commit from there; the writer reads the log again and commits once."""
    table = DeltaTable(
        f"file://{tmp_path}/t", properties={"delta.logRetentionDuration": "interval 0 seconds"}
    )
    writer = BatchWriter(table, APP)
    for batch_id in range(3):
        assert writer.write(rows(batch_id), batch_id)
    other = Table(f"{tmp_path}/t")
    other.optimize.compact()
    other.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    other.create_checkpoint()
    other.cleanup_metadata()
    assert not (tmp_path / "t" / "_delta_log" / f"{3:020d}.json").exists()  # after the writer's
    assert writer.write(rows(3), 3)
    assert batches_in(tmp_path / "t") == sorted([0, 1, 2, 3] * 5)
    assert Table(f"{tmp_path}/t").transaction_version(APP) == 3


def test_another_writer_of_the_app_id_makes_the_commit_fail_never_write_twice(tmp_path):
    """The writer keeps the table's version for its app id in memory. Should a second writer
    commit a batch of that app id all the same (two drivers of one checkpoint), the first
    one's commit of that batch is refused by delta-rs's conflict check; its next attempt
    reads the table again and skips the batch."""
    table = DeltaTable(f"file://{tmp_path}/t")
    writer = BatchWriter(table, APP)
    assert writer.write(rows(0), 0)
    assert BatchWriter(table, APP).write(rows(1), 1)  # the second writer
    with pytest.raises(CommitFailedError):
        writer.write(rows(1), 1)
    assert not writer.write(rows(1), 1)  # read again: the table has it
    assert writer.write(rows(2), 2)
    assert batches_in(tmp_path / "t") == [0] * 5 + [1] * 5 + [2] * 5


def orders(batch_id: int, fields: list[pa.Field], values: dict) -> pa.Table:
    """One row of `value` (a struct of `fields`) and its offset, as a decoded query gives it."""
    value_type = pa.struct(fields)
    return pa.table(
        {"value": pa.array([values], value_type), "offset": pa.array([batch_id], pa.int64())}
    )


ID = pa.field("id", pa.int64(), nullable=False)
QTY = pa.field("qty", pa.int32())
NOTE = pa.field("note", pa.string())


def test_a_compatible_change_merges_the_schema_and_an_incompatible_one_names_the_column(
    tmp_path,
):
    table = DeltaTable(f"file://{tmp_path}/t")
    writer = BatchWriter(table, APP)
    assert writer.write(orders(0, [ID, QTY], {"id": 0, "qty": 1}), 0)
    # a new nullable field: merged on purpose, the rows before it null
    assert writer.write(orders(1, [ID, QTY, NOTE], {"id": 1, "qty": 2, "note": "n"}), 1)
    # a field left out (nullable in the table): null; a narrower type: cast up
    small = pa.field("qty", pa.int8())
    assert writer.write(orders(2, [ID, small], {"id": 2, "qty": 3}), 2)
    values = Table(f"{tmp_path}/t").to_pyarrow_table().sort_by("offset").column("value")
    assert values.to_pylist() == [
        {"id": 0, "qty": 1, "note": None},
        {"id": 1, "qty": 2, "note": "n"},
        {"id": 2, "qty": 3, "note": None},
    ]
    # incompatible: a widened type (delta-rs keeps int32), a changed type, a required
    # column left out; each named, nothing written, before the start too
    wide = pa.field("qty", pa.int64())
    changed = pa.field("note", pa.int64())
    for fields, named in (
        ([ID, wide, NOTE], "column value.qty is int64 in the query and int32 in the table (a "
         "widened type"),
        ([ID, QTY, changed], "column value.note is int64 in the query and string in the table"),
        ([QTY, NOTE], "column value.id is required (not null) in the table"),
    ):  # fmt: skip
        values = {f.name: "x" if pa.types.is_string(f.type) else 1 for f in fields}
        with pytest.raises(SchemaIncompatible, match=re.escape(named)) as raised:
            writer.write(orders(3, fields, values), 3)
        assert "spec.job.sink.path" in str(raised.value)
        change = schema_change(
            table_schema(table.open()), pa.schema(orders(3, fields, values).schema)
        )
        assert named in "; ".join(change.problems)
    assert batches_in_offsets(tmp_path) == [0, 1, 2]


def batches_in_offsets(path) -> list[int]:
    return sorted(Table(f"{path}/t").to_pyarrow_table(columns=["offset"]).column(0).to_pylist())
