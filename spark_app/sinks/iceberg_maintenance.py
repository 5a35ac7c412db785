"""`streamingjob-iceberg-maintenance --manifest job.yaml` (also `python -m
spark_app.sinks.iceberg_maintenance`, and in the Spark image): compaction, snapshot expiry and
orphan-file removal of a job's Iceberg table while the job runs, through PyIceberg like the
sink (spark_app/sinks/iceberg_sink.py), in Iceberg's recommended order.

    streamingjob-iceberg-maintenance --manifest job.yaml
    streamingjob-iceberg-maintenance --manifest job.yaml --older-than-hours 24 --retain-last 10
    streamingjob-iceberg-maintenance --manifest job.yaml --rewrite-small-files --min-input-files 5
    streamingjob-iceberg-maintenance --manifest job.yaml --remove-orphans-older-than-hours 72

With `--rewrite-small-files`, first the small data files are rewritten into fewer, in one
REPLACE snapshot (spark_app/sinks/iceberg_rewrite.py); the files it replaced stay reachable
from older snapshots until those expire.

A streaming job makes a snapshot per batch; each keeps its manifests (and what compaction
replaced) alive. `expire` removes the snapshots older than `--older-than-hours` (default 120,
Iceberg's history.expire.max-snapshot-age-ms) but the newest `--retain-last` (default 1) of
the current snapshot's ancestry and any a branch or tag names, in one catalog commit.
Exactly once is kept: the batch a commit recorded stays in the table's properties, which
expiry never touches (docs/source/sinks.md, "Table sinks: Apache Iceberg").
With `--remove-orphans-older-than-hours`, the files under the table's location that nothing
the table keeps reaches are deleted after the expiry, if older than that
(spark_app/sinks/iceberg_orphans.py): what expired snapshots and dead writers left.

The catalog and the store come from the manifest as the driver has them (spec.job.sink.catalog,
spec.s3, sparkConf's spark.hadoop.fs.s3a.*); the catalog's secret from the environment
(ICEBERG_CATALOG_CREDENTIAL), the key pair from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
The last line printed is a JSON summary. Exit codes: 0 done; 2 bad input (nothing done); 3 no
such table; 4 the catalog did not answer or refused; 5 a step failed (run again).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spark_app.sinks.delta_maintenance import (
    EXIT_NO_TABLE,
    EXIT_OK,
    EXIT_STEP_FAILED,
    EXIT_UNREACHABLE,
    MaintenanceError,
    hadoop_settings,
    job_of_manifest,
)
from spark_app.sinks.iceberg_orphans import remove_orphans
from spark_app.sinks.iceberg_rewrite import MIN_INPUT_FILES, rewrite_small_files
from spark_app.sinks.iceberg_sink import IcebergTable, catalog_properties

HOUR_MS = 3_600_000


def target_of_manifest(manifest_path: Path) -> IcebergTable:
    """The job's table with the job's catalog and store settings."""
    manifest = job_of_manifest(manifest_path, "iceberg")
    sink = manifest.spec.job.sink
    assert sink.catalog is not None and sink.table is not None  # required for iceberg
    props = catalog_properties(sink.catalog, hadoop_settings(manifest), os.environ)
    return IcebergTable(sink.table, props, sink.catalog.name)


def expirable(
    snapshots: Iterable[tuple[int, int]],
    ancestry: list[int],
    named: set[int],
    cutoff_ms: int,
    retain_last: int,
) -> list[int]:
    """The snapshot ids to expire: of `snapshots` (id, timestamp ms), those older than
    `cutoff_ms`, neither among the newest `retain_last` of `ancestry` (the current
    snapshot's, newest first) nor `named` by a branch or tag."""
    kept = set(ancestry[:retain_last]) | named
    return sorted(sid for sid, at in snapshots if at < cutoff_ms and sid not in kept)


def expire(table: Any, older_than_hours: int, retain_last: int) -> dict[str, Any]:
    """Expires what `expirable` picks, in one commit. The counts before and after."""
    from pyiceberg.table.snapshots import ancestors_of

    snapshots = [(s.snapshot_id, s.timestamp_ms) for s in table.snapshots()]
    ancestry = [s.snapshot_id for s in ancestors_of(table.current_snapshot(), table.metadata)]
    named = {ref.snapshot_id for ref in table.metadata.refs.values()}
    cutoff = int(time.time() * 1000) - older_than_hours * HOUR_MS
    ids = expirable(snapshots, ancestry, named, cutoff, retain_last)
    if ids:
        table.maintenance.expire_snapshots().by_ids(ids).commit()
    print(f"expire: {len(ids)} of {len(snapshots)} snapshots expired")
    return {"snapshotsBefore": len(snapshots), "expired": len(ids)}


def open_table(target: IcebergTable) -> Any:
    try:
        table = target.open()
    except Exception as exc:  # the catalog away, or refusing the credential
        raise MaintenanceError(
            f"the catalog of {target.identifier} ({target.uri}) could not be "
            f"read: {type(exc).__name__}: {str(exc).strip()[:300]}",
            EXIT_UNREACHABLE,
        ) from None
    if table is None:
        raise MaintenanceError(f"no table {target.identifier} in the catalog", EXIT_NO_TABLE)
    return table


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="streamingjob-iceberg-maintenance",
        description="Compaction, snapshot expiry and orphan-file removal of a job's Iceberg "
        "table, safe while the job runs.",
    )
    parser.add_argument("--manifest", type=Path, required=True, help="the StreamingJob YAML")
    parser.add_argument("--older-than-hours", type=_whole, default=120, help="default 120")
    parser.add_argument("--retain-last", type=_whole, default=1, help="default 1 (at least 1)")
    parser.add_argument(
        "--rewrite-small-files",
        action="store_true",
        help="first rewrite the small data files of each partition into fewer",
    )
    parser.add_argument(
        "--min-input-files",
        type=_whole,
        default=MIN_INPUT_FILES,
        help=f"the fewest small files a rewrite takes together (default {MIN_INPUT_FILES})",
    )
    parser.add_argument(
        "--remove-orphans-older-than-hours",
        type=_whole,
        default=None,
        help="also delete unreferenced files older than this (Iceberg's default: 72); unset: none",
    )
    args = parser.parse_args(argv)
    if args.retain_last < 1:
        parser.error("--retain-last must be 1 or more: the current snapshot is the table")
    return args


def _whole(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number (0 or more)")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        target = target_of_manifest(args.manifest)
        table = open_table(target)
    except MaintenanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    summary: dict[str, Any] = {"table": target.identifier}
    steps = []
    if args.rewrite_small_files:
        steps.append(("rewrite", lambda: rewrite_small_files(table, args.min_input_files)))
    # the rewrite's commit moves `table` on itself: no catalog read between the steps
    steps.append(("expire", lambda: expire(table, args.older_than_hours, args.retain_last)))
    if (hours := args.remove_orphans_older_than_hours) is not None:
        steps.append(("orphans", lambda: remove_orphans(table.refresh(), hours)))
    for step, run in steps:
        try:
            summary[step] = run()
        except Exception as exc:  # a commit conflict, the catalog or the store away mid-way
            summary["failed"] = {"step": step, "error": f"{type(exc).__name__}: {exc}"[:600]}
            print(f"error: {step} failed: {summary['failed']['error']}", file=sys.stderr)
            print(json.dumps(summary), flush=True)
            return EXIT_STEP_FAILED
    print(json.dumps(summary), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
