"""Reads what Spark's file sink committed, honouring its `_spark_metadata` log.

Files of a batch that was killed half-way are in the store but not in the log; readers that
honour the log (Spark itself, and this) never see them. That is the sink's exactly-once.
The sink may be a local directory or an object store (a pyarrow filesystem: S3 for s3a://).
"""

from __future__ import annotations

import json
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


def committed_rows(
    output: str | Path,
    mounted_as: str | None = None,
    filesystem: fs.FileSystem | None = None,
    extra: tuple[str, ...] = (),
) -> list[dict]:
    """Rows of every epoch's directory (<output>/epoch-<n>), each read through its log; each
    row also names its epoch directory. `mounted_as`: `output` as the writer saw it;
    `filesystem`: where `output` lives (default: local; pyarrow's S3 for a bucket/key);
    `extra`: columns a transform added, read too. Each row's `id` is its value's (a JSON
    value's field; a typed record's struct, kept as `value`)."""
    filesystem = filesystem or fs.LocalFileSystem()
    output = str(output).rstrip("/")
    rows: list[dict] = []
    epochs = filesystem.get_file_info(fs.FileSelector(output, allow_not_found=True))
    for epoch in sorted(e.base_name for e in epochs if e.base_name.startswith("epoch-")):
        seen_as = f"{mounted_as.rstrip('/')}/{epoch}" if mounted_as else None
        for path in committed_files(f"{output}/{epoch}", seen_as, filesystem):
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
