"""`streamingjob-iceberg-maintenance` on a real Iceberg table (PyIceberg's SQL catalog in a
SQLite file, no Spark): what expiry picks, that the writer's batches survive it, and the exit
codes of what it cannot do."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from devbed.ports import free_port
from spark_app.sinks.delta_maintenance import EXIT_INVALID, EXIT_NO_TABLE, EXIT_UNREACHABLE
from spark_app.sinks.iceberg_maintenance import expirable, main
from spark_app.sinks.iceberg_sink import BatchWriter, IcebergTable, newest_batch

pytestmark = pytest.mark.unit

APP = "file:///checkpoints/ns/job/epoch-1"


def catalog(tmp_path: Path) -> dict:
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }


def manifest_file(tmp_path: Path, sink: dict) -> str:
    manifest = {
        "apiVersion": "sparkkafka.dev/v1alpha1",
        "kind": "StreamingJob",
        "metadata": {"name": "orders", "namespace": "team"},
        "spec": {
            "job": {
                "source": {
                    "bootstrapServers": "kafka:9092",
                    "subscribe": ["orders"],
                    "groupId": "g",
                },
                "sink": sink,
            },
            "checkpoint": {"location": (tmp_path / "checkpoints").as_uri()},
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return str(path)


def test_expiry_keeps_the_newest_of_the_ancestry_what_a_ref_names_and_what_is_recent():
    snapshots = [(1, 100), (2, 200), (3, 300), (4, 400), (5, 900)]
    ancestry = [5, 4, 3, 2, 1]
    assert expirable(snapshots, ancestry, {5}, cutoff_ms=500, retain_last=2) == [1, 2, 3]
    assert expirable(snapshots, ancestry, {5, 2}, cutoff_ms=500, retain_last=1) == [1, 3, 4]
    assert expirable(snapshots, ancestry, {5}, cutoff_ms=150, retain_last=1) == [1]


def test_expiry_beside_the_writer_loses_no_batch_and_lets_no_replay_in(tmp_path, capsys):
    table = IcebergTable("lake.orders", catalog(tmp_path))
    writer = BatchWriter(table, APP)
    for batch in range(3):
        writer.write(pa.table({"batch": [batch]}), batch)
    table.open().append(pa.table({"batch": pa.array([], pa.int64())}), {"by": "compaction"})
    path = manifest_file(tmp_path, {"format": "iceberg", "table": "lake.orders",
                                    "catalog": catalog(tmp_path)})  # fmt: skip
    assert main(["--manifest", path, "--older-than-hours", "0"]) == 0
    assert '"expire": {"snapshotsBefore": 4, "expired": 3}' in capsys.readouterr().out
    opened = table.open()
    assert len(opened.snapshots()) == 1 and newest_batch(opened, APP) == 2
    assert not BatchWriter(table, APP).write(pa.table({"batch": [2]}), 2)  # a restore's replay
    assert writer.write(pa.table({"batch": [3]}), 3)  # the running writer goes on
    assert sorted(table.open().scan().to_arrow().column("batch").to_pylist()) == [0, 1, 2, 3]


def test_what_it_cannot_maintain_is_named_with_its_exit_code(tmp_path, capsys):
    parquet = manifest_file(tmp_path, {"format": "parquet", "path": "s3a://lake/out"})
    assert main(["--manifest", parquet]) == EXIT_INVALID
    assert "not iceberg" in capsys.readouterr().err
    missing = {"format": "iceberg", "table": "lake.none", "catalog": catalog(tmp_path)}
    assert main(["--manifest", manifest_file(tmp_path, missing)]) == EXIT_NO_TABLE
    assert "no table lake.none" in capsys.readouterr().err
    away = {"type": "rest", "uri": f"http://127.0.0.1:{free_port()}"}
    unreachable = {"format": "iceberg", "table": "lake.orders", "catalog": away}
    assert main(["--manifest", manifest_file(tmp_path, unreachable)]) == EXIT_UNREACHABLE
    assert f"({away['uri']}) could not be read" in capsys.readouterr().err
