"""`streamingjob-iceberg-maintenance` on a real Iceberg table (PyIceberg's SQL catalog in a
SQLite file, no Spark): what expiry picks, that the writer's batches survive it, and the exit
codes of what it cannot do."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from devbed.ports import free_port
from spark_app.sinks.delta_maintenance import EXIT_INVALID, EXIT_NO_TABLE, EXIT_UNREACHABLE
from spark_app.sinks.iceberg_maintenance import expirable, main
from spark_app.sinks.iceberg_orphans import location_key, orphans
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


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_orphans_are_what_nothing_reaches_and_old_enough_and_nothing_else_goes(tmp_path, capsys):
    """Expiry leaves the expired snapshots' files behind (PyIceberg deletes none) and a dead
    writer its file; orphan removal deletes exactly those, after the expiry in the same run,
    never a young file (a running writer's before its commit), and the table reads back
    whole: every batch once, the writer's progress kept."""
    table = IcebergTable("lake.orders", catalog(tmp_path))
    writer = BatchWriter(table, APP)
    for batch in range(3):
        writer.write(pa.table({"batch": [batch]}), batch)
    location = Path(table.open().location().removeprefix("file://"))
    expired = {Path(s.manifest_list.removeprefix("file://")) for s in table.open().snapshots()[:2]}
    dead = location / "data" / "00000-dead-writer.parquet"  # written, never committed
    dead.write_bytes(b"PAR1")
    young = location / "data" / "00000-young.parquet"
    path = manifest_file(tmp_path, {"format": "iceberg", "table": "lake.orders",
                                    "catalog": catalog(tmp_path)})  # fmt: skip
    before = files_under(location)
    young.write_bytes(b"PAR1")  # as if written now: kept at a 1-hour cutoff
    old = 2 * 3600
    for file in before:
        os.utime(file, (file.stat().st_atime - old, file.stat().st_mtime - old))
    assert main(["--manifest", path, "--older-than-hours", "0",
                 "--remove-orphans-older-than-hours", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    opened = table.open()
    kept = files_under(location)
    assert dead not in kept and young in kept
    # what the expiry left (the two expired snapshots' manifest lists) and the dead
    # writer's file; nothing the current snapshot reaches (its data files are every batch's)
    assert before - kept == expired | {dead}, sorted(map(str, before - kept))
    assert summary["orphans"]["removed"] == 3 and summary["expire"]["expired"] == 2
    assert sorted(opened.scan().to_arrow().column("batch").to_pylist()) == [0, 1, 2]
    assert newest_batch(opened, APP) == 2 and writer.write(pa.table({"batch": [3]}), 3)
    assert main(["--manifest", path, "--remove-orphans-older-than-hours", "1"]) == 0
    assert '"removed": 0' in capsys.readouterr().out  # nothing more: the rest is reached


def test_orphans_by_location_whatever_the_scheme_and_the_cutoff():
    assert location_key("s3a://lake/wh/t/data/a.parquet") == "lake/wh/t/data/a.parquet"
    assert location_key("file:///wh/t/a.parquet") == "/wh/t/a.parquet"
    assert location_key("/wh/t/a.parquet") == "/wh/t/a.parquet"
    listed = [("lake/t/a", 10.0), ("lake/t/b", 10.0), ("lake/t/c", 99.0)]
    assert orphans(listed, {"lake/t/a"}, cutoff_s=50.0) == ["lake/t/b"]
