"""Orphan files of an Iceberg table: files under the table's location that nothing the table
keeps reaches (Iceberg's RemoveOrphanFiles, which PyIceberg 0.12 lacks). They come from
writers that died between writing a file and committing it, and from snapshot expiry, which
in PyIceberg removes snapshots from the metadata but deletes no file.

Reached: the current metadata file and those in its log, every snapshot's manifest list,
the manifests of every snapshot and every data and delete file they hold live, and the
statistics files. A file younger than the cutoff is never removed, reached or not: a running
writer writes its files before the commit that references them (the default cutoff, 72 h, is
Iceberg's). A table's location must hold that table alone: files of another table under it
would count as orphans.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

HOUR_S = 3600


def reached(table: Any) -> set[str]:
    """Every file the table's metadata reaches, as `location_key`s."""
    metadata = table.metadata
    files = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    files |= {snapshot.manifest_list for snapshot in table.snapshots()}
    if table.snapshots():
        files |= set(table.inspect.all_manifests().column("path").to_pylist())
        files |= set(table.inspect.all_files().column("file_path").to_pylist())
    files |= {s.statistics_path for s in (*metadata.statistics, *metadata.partition_statistics)}
    return {location_key(f) for f in files}


def location_key(location: str) -> str:
    """A file's location without its scheme, as a file system lists it: s3a://b/p, s3://b/p
    -> b/p; file:///p, /p -> /p."""
    parsed = urlparse(location)
    return f"{parsed.netloc}{parsed.path}" if parsed.scheme else location


def orphans(listed: Iterable[tuple[str, float]], kept: set[str], cutoff_s: float) -> list[str]:
    """Of the files `listed` (their `location_key`, modified at), those not `kept` and last
    modified before `cutoff_s` (epoch seconds)."""
    return sorted(path for path, modified in listed if path not in kept and modified < cutoff_s)


def remove_orphans(table: Any, older_than_hours: int) -> dict[str, int]:
    """Deletes the table's orphan files older than `older_than_hours`. The counts."""
    from pyarrow.fs import FileSelector, FileType

    scheme, netloc, root = table.io.parse_location(table.location())
    fs = table.io.fs_by_scheme(scheme, netloc)
    infos = fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    listed = [
        (info.path, info.mtime.timestamp() if info.mtime else 0.0)
        for info in infos
        if info.type == FileType.File
    ]
    cutoff = time.time() - older_than_hours * HOUR_S
    found = orphans(listed, reached(table), cutoff)
    for path in found:
        fs.delete_file(path)
    print(f"orphans: {len(found)} of {len(listed)} files removed")
    return {"files": len(listed), "removed": len(found)}
