"""Reads what a job committed to its Iceberg table through the table's catalog with PyIceberg
(what every Iceberg reader sees), and runs the maintenance other tools run beside a job."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

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


def maintain(sink: dict) -> int:
    """What a maintenance job does beside the writer: another writer's commit (a compaction's
    stand-in, re-adding nothing), then every snapshot but the newest expired. The number of
    snapshots left."""
    import pyarrow as pa

    table = open_table(sink)
    empty = pa.Table.from_pylist([], schema=table.schema().as_arrow())
    table.append(empty, snapshot_properties={"maintenance": "compaction"})
    table.maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
    return len(open_table(sink).snapshots())
