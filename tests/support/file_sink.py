"""Reads what Spark's file sink committed, honouring its `_spark_metadata` log.

Files of a batch that was killed half-way are in the store but not in the log; readers that
honour the log (Spark itself, and this) never see them. That is the sink's exactly-once.
The sink may be a local directory or an object store (a pyarrow filesystem: S3 for s3a://).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq
from pyarrow import fs


def _store_path(path: str) -> str:
    """A writer's file URI (file:///x, s3a://bucket/key) as a pyarrow filesystem path."""
    url = urlparse(path)
    if url.scheme in ("s3a", "s3"):
        return f"{url.netloc}{unquote(url.path)}"
    return unquote(url.path)


def committed_files(
    output: str | Path, mounted_as: str | None = None, filesystem: fs.FileSystem | None = None
) -> list[str]:
    """Committed files of one sink directory. `mounted_as`: the directory's path as the
    writer saw it (its log holds absolute paths), when it is read from elsewhere (a copy)."""
    filesystem = filesystem or fs.LocalFileSystem()
    output = str(output).rstrip("/")
    added: set[str] = set()
    removed: set[str] = set()
    entries = filesystem.get_file_info(
        fs.FileSelector(f"{output}/_spark_metadata", allow_not_found=True)
    )
    for entry in sorted(entries, key=lambda e: e.path):
        if entry.type != fs.FileType.File or entry.base_name.startswith("."):
            continue
        if entry.extension == "tmp":
            continue
        with filesystem.open_input_stream(entry.path) as stream:
            lines = stream.read().decode().splitlines()
        for line in lines[1:]:  # the first line is the version
            record = json.loads(line)
            (added if record["action"] == "add" else removed).add(_store_path(record["path"]))
    paths = sorted(added - removed)
    if mounted_as is not None:
        prefix = mounted_as.rstrip("/") + "/"
        paths = [f"{output}/{p[len(prefix) :]}" if p.startswith(prefix) else p for p in paths]
    return paths


_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _epoch_directories(output: str, filesystem: fs.FileSystem) -> list[tuple[str, str]]:
    """(epoch-<n>, its path below `output`) of every epoch of every job (uid) there."""
    found = []
    for entry in filesystem.get_file_info(fs.FileSelector(output, allow_not_found=True)):
        if entry.base_name.startswith("epoch-"):
            found.append((entry.base_name, entry.base_name))
        elif _UID.match(entry.base_name):
            below = fs.FileSelector(f"{output}/{entry.base_name}", allow_not_found=True)
            for epoch in filesystem.get_file_info(below):
                if epoch.base_name.startswith("epoch-"):
                    found.append((epoch.base_name, f"{entry.base_name}/{epoch.base_name}"))
    return sorted(found, key=lambda pair: pair[1])


def committed_rows(
    output: str | Path,
    mounted_as: str | None = None,
    filesystem: fs.FileSystem | None = None,
    extra: tuple[str, ...] = (),
) -> list[dict]:
    """Rows of every epoch's directory (<output>/<job uid>/epoch-<n>, or <output>/epoch-<n>
    without the uid), each read through its log; each row also names its epoch directory.
    `mounted_as`: `output` as the writer saw it; `filesystem`: where `output` lives
    (default: local; pyarrow's S3 for a bucket/key); `extra`: columns a transform added,
    read too. Each row's `id` is its value's (a JSON value's field; a typed record's struct,
    kept as `value`)."""
    filesystem = filesystem or fs.LocalFileSystem()
    output = str(output).rstrip("/")
    rows: list[dict] = []
    for epoch, where in _epoch_directories(output, filesystem):
        seen_as = f"{mounted_as.rstrip('/')}/{where}" if mounted_as else None
        for path in committed_files(f"{output}/{where}", seen_as, filesystem):
            table = pq.read_table(
                path,
                columns=["value", "topic", "partition", "offset", *extra],
                filesystem=filesystem,
            )
            for row in table.to_pylist():
                value = row.pop("value")
                if isinstance(value, dict):  # a typed record (valueFormat=avro): its struct
                    row["value"] = value
                    row["id"] = value["id"]
                else:
                    row["id"] = json.loads(value)["id"]
                row["epoch"] = epoch
                rows.append(row)
    return rows
