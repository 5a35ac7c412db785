"""The Iceberg sink's batch writer on a real Iceberg table (PyIceberg's SQL catalog in a
SQLite file, no Spark): one commit per batch recording it, a replay skipped, the schema
evolved on purpose or refused, and other writers' commits rebased over."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_app.sinks.delta_sink import SchemaIncompatible
from spark_app.sinks.iceberg_sink import (
    APP_PROPERTY,
    BATCH_PROPERTY,
    BatchWriter,
    IcebergTable,
    newest_batch,
    progress_key,
)

pytestmark = pytest.mark.unit

APP = "file:///checkpoints/ns/job/epoch-1"


def table(tmp_path, **kwargs) -> IcebergTable:
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    return IcebergTable("lake.orders", catalog, **kwargs)


def rows(batch_id: int, count: int = 3, **more: pa.Array) -> pa.Table:
    first = batch_id * count
    return pa.table(
        {"batch": pa.array([batch_id] * count), "offset": pa.array(range(first, first + count))}
        | more
    )


def batches_in(target: IcebergTable) -> list[int]:
    return sorted(target.open().scan().to_arrow().column("batch").to_pylist())


def test_a_new_table_gets_its_partitions_properties_and_each_batch_one_recorded_commit(tmp_path):
    target = table(
        tmp_path, partition_by=("batch",), properties={"write.format.default": "parquet"}
    )
    writer = BatchWriter(target, APP)
    assert writer.write(rows(0), 0) and writer.write(rows(1), 1)
    opened = target.open()
    assert [field.name for field in opened.spec().fields] == ["batch"]
    assert opened.properties["write.format.default"] == "parquet"
    assert opened.properties[progress_key(APP)] == "1"
    summaries = [s.summary.additional_properties for s in opened.snapshots()]
    assert [(s[APP_PROPERTY], s[BATCH_PROPERTY]) for s in summaries] == [(APP, "0"), (APP, "1")]
    assert batches_in(target) == [0, 0, 0, 1, 1, 1]


def test_a_replay_is_skipped_by_a_new_writer_and_by_the_one_that_wrote_it(tmp_path):
    target = table(tmp_path)
    first = BatchWriter(target, APP)
    first.write(rows(0), 0)
    first.write(rows(1), 1)
    assert not first.write(rows(1), 1)
    restored = BatchWriter(target, APP)  # a restore: the same app id, batch 1 again
    assert not restored.write(rows(1), 1)
    assert restored.write(rows(2), 2)
    other_epoch = BatchWriter(target, "file:///checkpoints/ns/job/epoch-2")
    assert other_epoch.write(rows(0), 0)  # a redeploy's batch 0: another app id
    assert batches_in(target) == [0] * 6 + [1] * 3 + [2] * 3
    assert len(target.open().snapshots()) == 4


def test_another_writers_commit_between_two_batches_is_rebased_over(tmp_path):
    target = table(tmp_path)
    writer = BatchWriter(target, APP)
    writer.write(rows(0), 0)
    target.open().append(rows(9), snapshot_properties={"by": "another writer"})
    assert writer.write(rows(1), 1)  # its table is a commit behind: PyIceberg rebases
    assert newest_batch(target.open(), APP) == 1
    assert batches_in(target) == [0, 0, 0, 1, 1, 1, 9, 9, 9]


def test_new_columns_and_widened_types_evolve_the_table_and_others_are_refused(tmp_path):
    target = table(tmp_path)
    writer = BatchWriter(target, APP)
    narrow = pa.table({"batch": pa.array([0], pa.int32()), "offset": pa.array([0], pa.int32())})
    writer.write(narrow, 0)
    assert writer.write(rows(1, note=pa.array(["a", "b", "c"])), 1)  # int64 and a new column
    schema = target.open().schema()
    assert [(f.name, str(f.field_type)) for f in schema.fields] == [
        ("batch", "long"),
        ("offset", "long"),
        ("note", "string"),
    ]
    with pytest.raises(SchemaIncompatible, match=r"offset: long -> string.*spec\.job\.sink\.table"):
        writer.write(pa.table({"batch": [2], "offset": ["two"]}), 2)
    assert BatchWriter(target, APP).write(rows(2), 2)  # a failed write lost nothing
