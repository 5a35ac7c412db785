"""Reads what a job committed to its Delta table: the table's current snapshot through
delta-rs (what every Delta reader sees), and the application transactions in its log."""

from __future__ import annotations

import json

from devbed.object_store import REGION, Storage
from spark_app.sinks.delta_sink import storage_options, table_uri


def delta_sink(storage: Storage) -> dict:
    """The spec.job.sink of a job writing its Delta table at `storage`'s output."""
    return {"format": "delta", "path": storage.output}


def s3_options(endpoint: str, access_key: str, secret_key: str) -> dict[str, str]:
    """delta-rs's options for a table on an S3-compatible store, as the job's are made."""
    hadoop = {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": REGION,
        "fs.s3a.path.style.access": "true",
    }
    options = storage_options(hadoop, "s3a://")
    return {**options, "AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}


def open_table(uri: str, options: dict[str, str] | None = None):
    from deltalake import DeltaTable

    return DeltaTable(table_uri(uri), storage_options=options or {})


def table_rows(uri: str, options: dict[str, str] | None = None) -> list[dict]:
    """Every row of the table's current snapshot with its record's id: a JSON value's field,
    or a typed record's (its struct kept as `value`)."""
    columns = ["value", "topic", "partition", "offset"]
    rows = open_table(uri, options).to_pyarrow_table(columns=columns).to_pylist()
    for row in rows:
        value = row.pop("value")
        if isinstance(value, dict):
            row["value"], row["id"] = value, value["id"]
        else:
            row["id"] = json.loads(value)["id"]
    return rows


def _storage_options(storage: Storage) -> dict[str, str]:
    if storage.store is None:
        return {}
    env = storage.env
    return s3_options(
        storage.store.endpoint, env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    )


def storage_table(storage: Storage):
    return open_table(storage.output, _storage_options(storage))


def delta_rows(storage: Storage) -> list[dict]:
    return table_rows(storage.output, _storage_options(storage))


def committed_batch(storage: Storage, checkpoint: str) -> int | None:
    """The newest batch the table committed for the query of `checkpoint`."""
    return storage_table(storage).transaction_version(checkpoint.rstrip("/"))


def _store_entries(storage: Storage, under: str = ""):
    from pyarrow import fs

    base = f"{storage.output_path}/{under}".rstrip("/")
    return storage.filesystem.get_file_info(fs.FileSelector(base))


def log_versions(storage: Storage) -> set[int]:
    """The versions whose commit files (`_delta_log/<version>.json`) the store holds."""
    names = (e.base_name for e in _store_entries(storage, "_delta_log"))
    return {int(n.removesuffix(".json")) for n in names if n.endswith(".json") and n[0].isdigit()}


def commit_of_batch(storage: Storage, checkpoint: str, batch: int) -> int:
    """The table version whose commit file carries batch `batch` of the query of
    `checkpoint` (its app transaction), read from the commit files themselves."""
    app = checkpoint.rstrip("/")
    for version in sorted(log_versions(storage)):
        path = f"{storage.output_path}/_delta_log/{version:020d}.json"
        with storage.filesystem.open_input_stream(path) as stream:
            actions = [json.loads(line) for line in stream.read().decode().splitlines() if line]
        for action in actions:
            txn = action.get("txn") or {}
            if txn.get("appId") == app and txn.get("version") == batch:
                return version
    raise AssertionError(f"no commit file of the table carries batch {batch} of {app}")


def data_files(storage: Storage) -> set[str]:
    """The names of the Parquet files in the table's directory (live or not: what vacuum
    deletes)."""
    return {e.base_name for e in _store_entries(storage) if e.base_name.endswith(".parquet")}


def live_files(storage: Storage) -> set[str]:
    """The names of the files of the table's current snapshot."""
    return {uri.rsplit("/", 1)[-1] for uri in storage_table(storage).file_uris()}


def log_file_age(storage: Storage, name: str) -> float:
    """Seconds since `_delta_log/<name>` was written (the store's clock is ours: loopback)."""
    import time

    from pyarrow import fs

    info = storage.filesystem.get_file_info(f"{storage.output_path}/_delta_log/{name}")
    if info.type == fs.FileType.NotFound:  # a later cleanup deleted it: old enough
        return float("inf")
    return time.time() - info.mtime.timestamp()
