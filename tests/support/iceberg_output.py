"""Reads what a job committed to its Iceberg table through the table's catalog with PyIceberg
(what every Iceberg reader sees), and runs maintenance beside a job: another writer's commit,
then `streamingjob-iceberg-maintenance` as its CronJob would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from devbed.iceberg_catalog import RestCatalog


def rest_sink(catalog: RestCatalog, table: str) -> dict:
    """The spec.job.sink of a job writing `table` through the REST catalog."""
    return {
        "format": "iceberg",
        "table": table,
        "catalog": {"type": "rest", "uri": catalog.uri},
    }


def sql_sink(workdir: Path, table: str) -> dict:
    """The spec.job.sink of a job writing `table` through a SQL catalog in a SQLite file."""
    return {
        "format": "iceberg",
        "table": table,
        "catalog": {
            "type": "sql",
            "uri": f"sqlite:///{workdir / 'catalog.db'}",
            "warehouse": (workdir / "warehouse").as_uri(),
        },
    }


def open_table(sink: dict):
    from pyiceberg.catalog import load_catalog

    catalog = {key: value for key, value in sink["catalog"].items() if key != "name"}
    name = sink["catalog"].get("name", "default")  # a SQL catalog keeps its tables under it
    return load_catalog(name, **catalog).load_table(sink["table"])


def iceberg_rows(sink: dict) -> list[dict]:
    """Every row of the table's current snapshot with its record's id (a JSON value's)."""
    columns = ("value", "topic", "partition", "offset")
    rows = open_table(sink).scan(selected_fields=columns).to_arrow().to_pylist()
    for row in rows:
        row["id"] = json.loads(row["value"])["id"]
    return rows


def maintain(manifest: dict, workdir: Path) -> int:
    """Beside the job of `manifest`: another writer's commit (a compaction's stand-in, adding
    no row), then the maintenance command expiring every snapshot but the newest. The number
    of snapshots left."""
    import pyarrow as pa

    sink = manifest["spec"]["job"]["sink"]
    table = open_table(sink)
    empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
    table.append(empty, snapshot_properties={"maintenance": "compaction"})
    path = workdir / "maintained-job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    command = [sys.executable, "-m", "spark_app.sinks.iceberg_maintenance", "--manifest",
               str(path), "--older-than-hours", "0"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return len(open_table(sink).snapshots())
