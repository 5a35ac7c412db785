"""The Iceberg sink's batch writer on real Iceberg tables (PyIceberg's SQL catalog on a SQLite
file, the warehouse on the local disk, no Spark): one snapshot per batch recording the writer
and its batch, a replay skipped, a commit another writer beat retried without writing twice,
and the pure reading of what the table holds."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog as pyiceberg_catalog
from pyiceberg.exceptions import CommitFailedException

from spark_app.sinks.iceberg_sink import (
    APP_ID,
    BATCH_ID,
    CATALOG_ENV,
    BatchWriter,
    CatalogMissing,
    IcebergTable,
    batch_property,
    catalog_properties,
    load_catalog,
    newest_batch,
)

pytestmark = pytest.mark.unit

APP = "file:///checkpoints/ns/job/epoch-1"
TABLE = "lake.orders"


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    """A real SQL catalog (SQLite) configured as the job's is: in the environment only."""
    (tmp_path / "warehouse").mkdir()
    monkeypatch.setenv(f"{CATALOG_ENV}TYPE", "sql")
    monkeypatch.setenv(f"{CATALOG_ENV}URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv(f"{CATALOG_ENV}WAREHOUSE", f"file://{tmp_path}/warehouse")
    return load_catalog()


def rows(batch_id: int, count: int = 5) -> pa.Table:
    return pa.table(
        {
            "batch": pa.array([batch_id] * count, pa.int64()),
            "offset": pa.array(range(batch_id * count, (batch_id + 1) * count), pa.int64()),
            "topic": pa.array(["t"] * count, pa.string()),
        }
    )


def batches_in(catalog) -> list[int]:
    scanned = catalog.load_table(TABLE).scan(selected_fields=("batch",)).to_arrow()
    return sorted(scanned.column(0).to_pylist())


def test_a_new_table_gets_identity_partitions_properties_and_one_snapshot_per_batch(catalog):
    table = IcebergTable(
        TABLE, partition_by=("topic",), properties={"write.format.default": "parquet"}
    )
    assert table.committed_batch(APP) is None  # no table yet
    writer = BatchWriter(table, APP)
    assert writer.write(rows(0), 0) and writer.write(rows(1), 1)
    loaded = catalog.load_table(TABLE)
    assert [(f.name, str(f.transform)) for f in loaded.spec().fields] == [("topic", "identity")]
    assert loaded.properties["write.format.default"] == "parquet"
    summaries = [s.summary.additional_properties for s in loaded.snapshots()]
    assert [(s[APP_ID], s[BATCH_ID], s["added-records"]) for s in summaries] == [
        (APP, "0", "5"),
        (APP, "1", "5"),
    ]
    assert loaded.properties[batch_property(APP)] == "1"
    assert table.committed_batch(APP) == 1 and batches_in(catalog) == [0] * 5 + [1] * 5


def test_a_restored_query_skips_the_batches_the_table_has_and_writes_the_next(catalog):
    table = IcebergTable(TABLE)
    first = BatchWriter(table, APP)
    assert first.write(rows(0), 0) and first.write(rows(1), 1)
    restored = BatchWriter(table, APP)  # a new driver: the checkpoint replays batch 1
    assert not restored.write(rows(1), 1)
    assert restored.write(rows(2), 2)
    assert batches_in(catalog) == [0] * 5 + [1] * 5 + [2] * 5
    # another epoch (a redeploy: a new checkpoint) writes its own batch 0
    assert BatchWriter(table, "file:///checkpoints/ns/job/epoch-2").write(rows(0), 0)
    assert table.committed_batch(APP) == 2
    assert table.committed_batch("file:///checkpoints/ns/job/epoch-2") == 0


def test_an_empty_batch_is_recorded_too(catalog):
    table = IcebergTable(TABLE)
    writer = BatchWriter(table, APP)
    assert writer.write(rows(0), 0) and writer.write(rows(1, count=0), 1)
    assert table.committed_batch(APP) == 1 and batches_in(catalog) == [0] * 5


def test_a_commit_another_writer_beat_is_retried_from_the_catalogs_table(catalog):
    table = IcebergTable(TABLE)
    writer = BatchWriter(table, APP)
    assert writer.write(rows(0), 0)
    # maintenance (any other writer) commits between two of the job's batches
    catalog.load_table(TABLE).append(rows(100, count=1))
    assert writer.write(rows(1), 1)
    assert batches_in(catalog) == [0] * 5 + [1] * 5 + [100]


def test_a_second_writer_of_the_app_id_never_writes_a_batch_twice(catalog):
    table = IcebergTable(TABLE)
    first, second = BatchWriter(table, APP), BatchWriter(table, APP)
    assert first.write(rows(0), 0) and second.write(rows(1), 1)
    # `first` still holds the table as of batch 0: its commit of batch 1 loses to the
    # catalog's, and its retry reads batch 1 there
    assert not first.write(rows(1), 1)
    assert batches_in(catalog) == [0] * 5 + [1] * 5


def test_a_commit_that_keeps_losing_fails_the_batch(catalog, monkeypatch):
    table = IcebergTable(TABLE)
    writer = BatchWriter(table, APP)
    assert writer.write(rows(0), 0)

    def always_beaten(*_args):
        raise CommitFailedException("another commit came first")

    with monkeypatch.context() as patched:
        patched.setattr(IcebergTable, "append", always_beaten)
        with pytest.raises(CommitFailedException):
            writer.write(rows(1), 1)
    assert table.committed_batch(APP) == 0


def test_the_batch_outlives_the_expiry_of_its_snapshot(catalog):
    table = IcebergTable(TABLE)
    writer = BatchWriter(table, APP)
    assert writer.write(rows(0), 0) and writer.write(rows(1), 1)
    loaded = catalog.load_table(TABLE)
    loaded.append(rows(100, count=1))  # compaction, say: now the current snapshot
    ours = [s.snapshot_id for s in loaded.snapshots() if s.summary.get(APP_ID) == APP]
    loaded.maintenance.expire_snapshots().by_ids(ours).commit()
    assert table.committed_batch(APP) == 1  # the table property has it
    assert not BatchWriter(table, APP).write(rows(1), 1)


def test_the_newest_batch_is_the_newer_of_the_property_and_the_writers_newest_snapshot():
    summaries = [
        {"operation": "append"},  # compaction
        {APP_ID: "other", BATCH_ID: "9"},
        {APP_ID: APP, BATCH_ID: "4"},
        {APP_ID: APP, BATCH_ID: "3"},
    ]
    assert newest_batch(APP, {}, summaries) == 4
    assert newest_batch(APP, {batch_property(APP): "2"}, summaries) == 4
    assert newest_batch(APP, {batch_property(APP): "5"}, summaries[:2]) == 5
    assert newest_batch(APP, {}, summaries[:2]) is None


def test_the_catalog_comes_from_pyicebergs_variables_only(monkeypatch):
    environ = {
        f"{CATALOG_ENV}URI": "http://iceberg.lake.svc:8181",
        f"{CATALOG_ENV}S3__ACCESS_KEY_ID": "key",
        "pyiceberg_catalog__default__py_io_impl": "io",
        "PYICEBERG_CATALOG__OTHER__URI": "elsewhere",
    }
    assert catalog_properties(environ) == {
        "uri": "http://iceberg.lake.svc:8181",
        "s3.access-key-id": "key",
        "py-io-impl": "io",
    }
    for key in [k for k in __import__("os").environ if k.upper().startswith(CATALOG_ENV)]:
        monkeypatch.delenv(key)
    with pytest.raises(CatalogMissing, match=f"set {CATALOG_ENV}URI"):
        load_catalog()


def test_a_catalog_that_cannot_be_set_up_is_named_without_its_values(monkeypatch):
    monkeypatch.setenv(f"{CATALOG_ENV}URI", "http://127.0.0.1:1")
    monkeypatch.setenv(f"{CATALOG_ENV}TYPE", "no-such-type")
    monkeypatch.setenv(f"{CATALOG_ENV}TOKEN", "s3cr3t-token")
    with pytest.raises(CatalogMissing) as raised:
        load_catalog()
    assert "s3cr3t" not in str(raised.value) and "TYPE and URI" in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_pyicebergs_own_catalog_reads_the_table_the_sink_wrote(catalog, tmp_path):
    BatchWriter(IcebergTable(TABLE), APP).write(rows(0), 0)
    # the same catalog, configured apart from the job's environment
    reader = pyiceberg_catalog("default", type="sql", uri=f"sqlite:///{tmp_path}/catalog.db")
    assert reader.load_table(TABLE).scan().to_arrow().num_rows == 5
