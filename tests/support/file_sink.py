"""Reads what Spark's file sink committed, honouring its `_spark_metadata` log.

Files of a batch that was killed half-way are on disk but not in the log; readers that
honour the log (Spark itself, and this) never see them. That is the sink's exactly-once.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq


def committed_files(output: Path) -> list[Path]:
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
    return sorted(Path(p) for p in added - removed)


def committed_rows(output: Path) -> list[dict]:
    """Rows of every epoch's directory (<output>/epoch-<n>), each read through its log."""
    rows: list[dict] = []
    files = [f for epoch in sorted(output.glob("epoch-*")) for f in committed_files(epoch)]
    for path in files:
        table = pq.read_table(path, columns=["value", "topic", "partition", "offset"])
        for row in table.to_pylist():
            row["id"] = json.loads(row.pop("value"))["id"]
            rows.append(row)
    return rows
