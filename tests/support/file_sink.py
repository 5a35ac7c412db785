"""Reads what Spark's file sink committed, honouring its `_spark_metadata` log.

Files of a batch that was killed half-way are on disk but not in the log; readers that
honour the log (Spark itself, and this) never see them. That is the sink's exactly-once.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq


def committed_files(output: Path, mounted_as: str | None = None) -> list[Path]:
    """Committed files of one sink directory. `mounted_as`: the directory's path as the
    writer saw it (its log holds absolute paths), when it is read from elsewhere (a copy)."""
    added: set[str] = set()
    removed: set[str] = set()
    log_dir = output / "_spark_metadata"
    if not log_dir.exists():
        return []
    for entry in sorted(log_dir.iterdir()):
        if entry.name.startswith(".") or entry.suffix == ".tmp":
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version
            record = json.loads(line)
            path = unquote(urlparse(record["path"]).path)
            (added if record["action"] == "add" else removed).add(path)
    paths = sorted(added - removed)
    if mounted_as is not None:
        prefix = mounted_as.rstrip("/") + "/"
        paths = [str(output / p[len(prefix) :]) if p.startswith(prefix) else p for p in paths]
    return [Path(p) for p in paths]


def committed_rows(output: Path, mounted_as: str | None = None) -> list[dict]:
    """Rows of every epoch's directory (<output>/epoch-<n>), each read through its log; each
    row also names its epoch directory. `mounted_as`: `output` as the writer saw it."""
    rows: list[dict] = []
    for epoch in sorted(output.glob("epoch-*")):
        seen_as = f"{mounted_as.rstrip('/')}/{epoch.name}" if mounted_as else None
        for path in committed_files(epoch, seen_as):
            table = pq.read_table(path, columns=["value", "topic", "partition", "offset"])
            for row in table.to_pylist():
                row["id"] = json.loads(row.pop("value"))["id"]
                row["epoch"] = epoch.name
                rows.append(row)
    return rows
