"""`streamingjob-delta-maintenance --manifest job.yaml` (also `python -m
spark_app.sinks.delta_maintenance`, and in the Spark image): maintenance of a job's Delta table
while the job runs, through delta-rs like the sink (spark_app/sinks/delta_sink.py).

    streamingjob-delta-maintenance --manifest job.yaml
    streamingjob-delta-maintenance --table s3a://bucket/tables/orders --step compact
    streamingjob-delta-maintenance --manifest job.yaml --retention-hours 0 \\
        --no-readers-of-old-versions

Steps, in this order (`--step` picks some; default all):
  compact  rewrites small files into larger ones (`--target-size` bytes) in one commit;
  log      writes a log checkpoint at the newest version, then deletes the log entries
           before it that are older than the table's delta.logRetentionDuration;
  vacuum   deletes the data files that commits removed longer ago than the retention
           (`--retention-hours`; default the table's delta.deletedFileRetentionDuration,
           168 h unless set). Only removed files: never a file no commit names, which may
           be a batch being written.
None of them breaks the job's exactly-once (docs/source.md, "Maintaining a Delta table").

The store's settings come from the manifest's spec.s3 (as the driver gets them); with
--table, from delta-rs's AWS_* environment variables. The key pair is always the
environment's AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, never an argument.
Each step prints a line; the last line is a JSON summary. Exit codes: 0 done; 2 bad input
(nothing done); 3 no Delta table at the path (or none delta-rs can read); 4 the store is
unreachable or refused the credentials; 5 a step failed (the steps before it are done; run
again).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spark_app.api.manifest import ManifestError, RunnerManifest, load_manifest
from spark_app.sinks.delta_sink import storage_options, table_uri

EXIT_OK, EXIT_INVALID, EXIT_NO_TABLE, EXIT_UNREACHABLE, EXIT_STEP_FAILED = 0, 2, 3, 4, 5
STEPS = ("compact", "log", "vacuum")
MIN_RETENTION_HOURS = 1
SHORT_RETENTION_FLAG = "--no-readers-of-old-versions"
_LOG_ENTRY = re.compile(r"^(\d{20})\.json$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class MaintenanceError(Exception):
    """A run that cannot go on, with its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Target:
    """The table to maintain: its URI as the job names it, delta-rs's store settings, and
    where the URI came from (for messages)."""

    path: str
    options: dict[str, str]
    origin: str


def job_of_manifest(manifest_path: Path, sink_format: str, hint: str = "") -> RunnerManifest:
    """The job's manifest, which must write a `sink_format` table; MaintenanceError if not."""
    try:
        document = yaml.safe_load(manifest_path.read_text())
        manifest = load_manifest(document if isinstance(document, dict) else {})
    except (OSError, yaml.YAMLError, ManifestError) as exc:
        raise MaintenanceError(f"--manifest {manifest_path}: {exc}", EXIT_INVALID) from None
    if manifest.spec.job.sink.format != sink_format:
        raise MaintenanceError(
            f"--manifest {manifest_path}: spec.job.sink.format is "
            f"{manifest.spec.job.sink.format}, not {sink_format}: this job writes no "
            f"{sink_format.title()} table{hint}",
            EXIT_INVALID,
        )
    return manifest


def hadoop_settings(manifest: RunnerManifest) -> dict[str, str]:
    """The job's store settings as the driver's session has them: spec.s3, and sparkConf's
    spark.hadoop.fs.s3a.* over them."""
    prefix = "spark.hadoop."
    return {
        key.removeprefix(prefix): value
        for key, value in manifest.spec.session_conf().items()
        if key.startswith(prefix)
    }


def target_of_manifest(manifest_path: Path) -> Target:
    """The job's table (spec.job.sink.path, required for delta) with the job's store
    settings."""
    manifest = job_of_manifest(manifest_path, "delta", " (give the table with --table)")
    path = manifest.spec.job.sink.path or ""
    origin = f"spec.job.sink.path of --manifest {manifest_path}"
    return Target(path, storage_options(hadoop_settings(manifest), path), origin)


def target_of_uri(uri: str) -> Target:
    """A table named by --table; the environment's AWS_* settings win over our defaults."""
    if not uri.startswith(("file:///", "s3a://", "s3://")):
        raise MaintenanceError(
            f"--table {uri}: expected file:///path or s3a://bucket/prefix", EXIT_INVALID
        )
    defaults = storage_options({}, uri)
    options = {key: value for key, value in defaults.items() if key not in os.environ}
    return Target(uri, options, "--table")


def store_error(exc: BaseException) -> str:
    """delta-rs's error chain on one line, without its terminal colours."""
    lines = [line.strip(" ↳") for line in _ANSI.sub("", str(exc)).splitlines()]
    text = " / ".join(line for line in lines if line) or type(exc).__name__
    return text if len(text) <= 600 else text[:600] + " …"


def open_table(target: Target):
    """The table's newest version; MaintenanceError when there is none or no store."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    uri = table_uri(target.path)
    try:
        if not DeltaTable.is_deltatable(uri, storage_options=target.options):
            raise MaintenanceError(
                f"no Delta table at {target.path} ({target.origin}): the job creates it "
                "with its first batch; check the path",
                EXIT_NO_TABLE,
            )
        return DeltaTable(uri, storage_options=target.options)
    except OSError as exc:
        raise MaintenanceError(
            f"the store of {target.path} ({target.origin}) is unreachable or refused: "
            f"{store_error(exc)}. Check the endpoint ({_endpoint_hint(target)}) and the "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY environment variables",
            EXIT_UNREACHABLE,
        ) from None
    except DeltaError as exc:  # a log delta-rs cannot read (or a table deleted meanwhile)
        raise MaintenanceError(
            f"the Delta table at {target.path} ({target.origin}) cannot be read: "
            f"{store_error(exc)}",
            EXIT_NO_TABLE,
        ) from None


def _endpoint_hint(target: Target) -> str:
    return "spec.s3.endpoint" if target.origin != "--table" else "AWS_ENDPOINT_URL"


def compact(table, target_size: int | None) -> dict[str, Any]:
    files_before = len(table.file_uris())
    metrics = table.optimize.compact(target_size=target_size)
    removed, added = int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])
    result = {
        "filesRemoved": removed,
        "filesAdded": added,
        "filesBefore": files_before,
        "filesAfter": len(table.file_uris()),
        "version": table.version(),
    }
    print(
        f"compact: {removed} files rewritten into {added} "
        f"({files_before} → {result['filesAfter']} data files), version {table.version()}"
    )
    return result


def log_entries(target: Target) -> set[int]:
    """The versions whose commit files (`_delta_log/<version>.json`) the store holds."""
    from deltalake.fs import DeltaStorageHandler
    from pyarrow import fs

    store = fs.PyFileSystem(DeltaStorageHandler(table_uri(target.path), target.options))
    found = store.get_file_info(fs.FileSelector("_delta_log"))
    return {int(m.group(1)) for info in found if (m := _LOG_ENTRY.match(info.base_name))}


def checkpoint_and_clean_log(table, target: Target) -> dict[str, Any]:
    """A checkpoint of the newest version (it carries every app transaction: the job's
    replays and catch-ups keep finding their batches), then expired entries before it.
    delta-rs's own commits (the job's too) also delete expired entries, behind the newest
    checkpoint: the log's oldest version is the measure, not this step's count alone."""
    table.update_incremental()
    before = log_entries(target)
    table.create_checkpoint()
    table.cleanup_metadata()
    after = log_entries(target)
    removed = sorted(before - after)
    retention = table.metadata().configuration.get("delta.logRetentionDuration", "30 days")
    result = {
        "checkpointVersion": table.version(),
        "entriesRemoved": len(removed),
        "oldestVersion": min(after, default=table.version()),
    }
    print(
        f"log: checkpoint at version {table.version()}; {len(removed)} entries older than "
        f"{retention} removed, the log starts at version {result['oldestVersion']}"
    )
    return result


def vacuum(table, retention_hours: int | None) -> dict[str, Any]:
    """Deletes files removed by commits older than the retention. Never a full vacuum: that
    would also delete files no commit names yet, such as a batch the job is writing."""
    table.update_incremental()
    deleted = table.vacuum(
        retention_hours=retention_hours,
        dry_run=False,
        enforce_retention_duration=retention_hours is None,
    )
    configured = table.metadata().configuration.get("delta.deletedFileRetentionDuration")
    shown = f"{retention_hours} h" if retention_hours is not None else configured or "168 h"
    table.update_incremental()
    # delta-rs lists every expired removal the log still records, deleted now or earlier
    print(
        f"vacuum: {len(deleted)} files that commits removed more than {shown} ago are gone "
        "(those an earlier vacuum deleted are counted again)"
    )
    return {"filesDeleted": len(deleted), "retention": shown, "version": table.version()}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="streamingjob-delta-maintenance",
        description="Compaction, log cleanup and vacuum of a job's Delta table, safe while "
        "the job runs.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--manifest", type=Path, help="the StreamingJob YAML (its delta sink)")
    where.add_argument("--table", help="the table's URI (file:///... or s3a://...)")
    parser.add_argument(
        "--step",
        action="append",
        choices=STEPS,
        dest="steps",
        help="a step to run (repeatable; default: compact, log, vacuum)",
    )
    parser.add_argument(
        "--target-size", type=_positive, help="compact: the target file size in bytes"
    )
    parser.add_argument(
        "--retention-hours",
        type=_hours,
        help="vacuum: delete files removed longer ago than this (default: the table's "
        "delta.deletedFileRetentionDuration, 168 h unless set)",
    )
    parser.add_argument(
        SHORT_RETENTION_FLAG,
        action="store_true",
        dest="short_retention",
        help=f"allow --retention-hours below {MIN_RETENTION_HOURS}: no reader reads a "
        "version older than that (a reader of one would fail on its deleted files)",
    )
    args = parser.parse_args(argv)
    short = args.retention_hours is not None and args.retention_hours < MIN_RETENTION_HOURS
    if short and not args.short_retention:
        parser.error(
            f"--retention-hours {args.retention_hours} is below {MIN_RETENTION_HOURS} h: a "
            "reader still reading an older version would lose its files. Add "
            f"{SHORT_RETENTION_FLAG} if no reader does"
        )
    return args


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of bytes")
    return int(text)


def _hours(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole hours (0 or more)")
    return int(text)


class StepFailed(Exception):
    """A step's failure, with the summary of the steps done before it."""

    def __init__(self, summary: dict[str, Any]):
        super().__init__(summary["failed"]["error"])
        self.summary = summary


def run(args: argparse.Namespace) -> dict[str, Any]:
    target = target_of_manifest(args.manifest) if args.manifest else target_of_uri(args.table)
    table = open_table(target)
    summary: dict[str, Any] = {"table": target.path, "versionBefore": table.version()}
    print(f"table {target.path}: version {table.version()}, {len(table.file_uris())} data files")
    steps = [step for step in STEPS if step in (args.steps or STEPS)]
    for step in steps:
        try:
            if step == "compact":
                summary[step] = compact(table, args.target_size)
            elif step == "log":
                summary[step] = checkpoint_and_clean_log(table, target)
            else:
                summary[step] = vacuum(table, args.retention_hours)
        except Exception as exc:  # delta-rs: a commit conflict, a store error mid-way
            summary["failed"] = {"step": step, "error": store_error(exc)}
            raise StepFailed(summary) from None
    summary["versionAfter"] = table.version()
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        summary = run(args)
    except MaintenanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except StepFailed as exc:
        failed = exc.summary["failed"]
        print(f"error: step {failed['step']} failed: {failed['error']}", file=sys.stderr)
        print(json.dumps(exc.summary), flush=True)
        return EXIT_STEP_FAILED
    print(json.dumps(summary), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
