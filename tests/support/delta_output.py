"""Reads what the job committed to its Delta table: the table's current snapshot, through
delta-rs (what every Delta reader sees), and the application transactions in its log."""

from __future__ import annotations

import json

from spark_app.delta_sink import storage_options, table_uri
from tests.support.object_store import Storage


def delta_sink(storage: Storage) -> dict:
    """The spec.job.sink of a job writing its Delta table at `storage`'s output."""
    return {"format": "delta", "path": storage.output}


def _options(storage: Storage) -> dict[str, str]:
    if storage.store is None:
        return {}
    hadoop = {
        "fs.s3a.endpoint": storage.store.endpoint,
        "fs.s3a.path.style.access": "true",
    }
    return {**storage_options(hadoop, storage.output), **storage.env}


def open_table(storage: Storage):
    from deltalake import DeltaTable

    return DeltaTable(table_uri(storage.output), storage_options=_options(storage))


def delta_rows(storage: Storage) -> list[dict]:
    """Every row of the table's current snapshot, with its record's id (a JSON value's)."""
    columns = ["value", "topic", "partition", "offset"]
    rows = open_table(storage).to_pyarrow_table(columns=columns).to_pylist()
    for row in rows:
        row["id"] = json.loads(row.pop("value"))["id"]
    return rows


def committed_batch(storage: Storage, checkpoint: str) -> int | None:
    """The newest batch the table committed for the query of `checkpoint`."""
    return open_table(storage).transaction_version(checkpoint.rstrip("/"))
