"""Reads what a job committed to its Iceberg table, through the catalog the job writes
through (the environment's, PyIceberg): the rows of the table's current snapshot (what every
Iceberg reader sees), and the batches its snapshots record."""

from __future__ import annotations

import json

from spark_app.sinks.iceberg_sink import APP_ID, BATCH_ID, IcebergTable, load_catalog


def iceberg_sink(table: str, **fields) -> dict:
    """The spec.job.sink of a job writing the Iceberg table `table` (namespace.table)."""
    return {"format": "iceberg", "table": table, **fields}


def load(table: str):
    return load_catalog().load_table(tuple(table.split(".")))


def iceberg_rows(table: str) -> list[dict]:
    """Every row of the table's current snapshot with its record's id (a JSON value's)."""
    columns = ("value", "topic", "partition", "offset")
    rows = load(table).scan(selected_fields=columns).to_arrow().to_pylist()
    for row in rows:
        row["id"] = json.loads(row["value"])["id"]
    return rows


def committed_batch(table: str, checkpoint: str) -> int | None:
    """The newest batch the table committed for the query of `checkpoint`."""
    return IcebergTable(table).committed_batch(checkpoint.rstrip("/"))


def batch_snapshots(table: str, checkpoint: str) -> list[int]:
    """The batch ids of the snapshots the query of `checkpoint` made, oldest first."""
    app = checkpoint.rstrip("/")
    summaries = [s.summary.additional_properties for s in load(table).snapshots() if s.summary]
    return [int(s[BATCH_ID]) for s in summaries if s.get(APP_ID) == app]
