"""From the manifest to a started query: restore or fresh start (the checkpoint decides, semantics
rules 4 and 5), the catch-up of the group from earlier epochs' checkpoints (rule 9), the query
analysed (spark_app/runner/analysis.py) and started.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_app.api.exit_codes import EXIT_CATCH_UP_FAILED
from spark_app.api.manifest import RunnerManifest
from spark_app.formats import schema_pin
from spark_app.runner import group_offsets as group_writer
from spark_app.runner.analysis import JobFrame, analysed_job, write_pins
from spark_app.runner.checkpoint_log import CheckpointFiles
from spark_app.runner.group_offsets import GroupOffsets
from spark_app.runner.preflight import (
    EXIT_FAILED,
    refuse,
    termination_message,
)
from spark_app.runner.query import (
    DRAIN_FILE,
    SINK_REPORT,
    SOURCE_REPORT,
    InvalidJob,
    NotStarted,
    build_session,
    start_query,
)
from spark_app.runner.report import ConfigMapPublisher, Reporter, now_iso
from spark_app.runner.sql_transform import spark_message
from spark_app.runner.supervise import (
    supervise,
)

log = logging.getLogger("spark_app.runner.runner")  # one logger: the driver's lines as before


@dataclass(frozen=True)
class Warmed:
    """What a driver that waited for its go hands to run()."""

    spark: Any
    stop: threading.Event  # set by SIGTERM/SIGINT since the wait began
    go_seen: float  # time.time() when the go was seen
    warm_seconds: float
    job: JobFrame | None = None  # analysed before ready: run() starts this very frame


def run(
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    warmed: Warmed | None = None,
) -> int:
    """Runs the query to its end: where it starts from, a fresh epoch's catch-up with the
    previous one, the query supervised, then the group's final commit however it ended.
    `warmed`: the session of a driver that waited for its go (--wait-for-go)."""
    spark = warmed.spark if warmed else build_session(manifest, args.master)
    phases = Phases()
    checkpoint = CheckpointFiles(spark, location)
    start = start_point(checkpoint, location, manifest)
    phases.done("start point")
    if warmed:
        start["warmSeconds"] = round(warmed.warm_seconds, 3)
    analysed = warmed.job if warmed else None
    workdir = analysed.workdir if analysed else Path(tempfile.mkdtemp(prefix="streamingjob-"))
    reporter = _reporter(manifest, args, location, start, workdir)
    group = group_writer.for_manifest(manifest)
    if group is not None:
        reporter.commits = group.report
    stop_requested = warmed.stop if warmed else threading.Event()
    try:
        # The transform or SQL query first: one that cannot run fails before the catch-up
        # commits anything or the query reads.
        analysed = analysed or analysed_job(spark, manifest, args, location, workdir)
        _report_pins(reporter, analysed.pins)
        phases.done("frame")
        fresh = start["startPath"] == "fresh"
        if not _group_settled(spark, manifest, group, args, reporter, checkpoint, fresh):
            return _not_started(group, EXIT_CATCH_UP_FAILED)
        phases.done("catch-up")
        signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
        signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
        if schema_pin.needs_writing(analysed.pins):  # kept for this epoch's restores
            write_pins(checkpoint, analysed.pins)
        query = _start_query(analysed, manifest, args, location)
        phases.done("query start")
        log.info("query started %s", phases)
    except InvalidJob as exc:
        return _not_started(group, refuse(str(exc), reporter))
    except NotStarted as exc:
        return _could_not_start(group, reporter, exc)
    reporter.update(state="running")
    try:
        return supervise(
            query,
            reporter,
            stop_requested,
            workdir / DRAIN_FILE,
            spark,
            checkpoint,
            group,
            args.stop_timeout,
            warmed.go_seen if warmed else None,
        )
    finally:
        if group is not None:
            _final_commit(checkpoint, group, args, reporter)


def _could_not_start(group: GroupOffsets | None, reporter: Reporter, exc: Exception) -> int:
    log.error("cannot start: %s", exc)
    termination_message(str(exc))  # the operator's DriverFailed, restarted with backoff
    reporter.update(state="failed", error=str(exc))
    return _not_started(group, EXIT_FAILED)


def _final_commit(
    checkpoint: CheckpointFiles, group: GroupOffsets, args: argparse.Namespace, reporter: Reporter
) -> None:
    """However the query ended: the group at its last durable batch (semantics rule 9)."""
    result = group_writer.commit_durable(
        checkpoint, group, args.final_commit_timeout, "final commit"
    )
    reporter.update(finalCommit=result)
    group.close(1.0)


def _report_pins(reporter: Reporter, pins: dict[str, schema_pin.Pin]) -> None:
    if pins:
        shown = {column: pin.report() for column, pin in pins.items()}
        reporter.update(readerSchemas=shown)
        log.info("reader schemas: %s", json.dumps(shown, sort_keys=True))


def _group_settled(
    spark,
    manifest: RunnerManifest,
    group: GroupOffsets | None,
    args: argparse.Namespace,
    reporter: Reporter,
    checkpoint: CheckpointFiles,
    fresh: bool,
) -> bool:
    """The group where this run starts it from, before anything is read: a fresh epoch
    catches it up with the earlier epochs' last durable batch (False: it could not); a
    restore commits its own last durable batch where the group was left behind."""
    if args.previous_checkpoint and fresh:
        return _catch_up(spark, manifest, group, args, reporter)
    if group is not None and not fresh:
        restored = group_writer.commit_durable(
            checkpoint, group, args.final_commit_timeout, "restore"
        )
        reporter.update(restoredCommit=restored)
    return True


class Phases:
    """Seconds each step of a start took (logged: where a hand-over's go → first batch goes)."""

    def __init__(self) -> None:
        self._at, self._took = time.monotonic(), dict[str, float]()

    def done(self, step: str) -> None:
        now = time.monotonic()
        self._took[step], self._at = now - self._at, now

    def __str__(self) -> str:
        steps = ", ".join(f"{step} {seconds:.2f}" for step, seconds in self._took.items())
        return f"in {sum(self._took.values()):.2f} s ({steps})"


def start_point(
    checkpoint: CheckpointFiles, location: str, manifest: RunnerManifest
) -> dict[str, Any]:
    """The report's startPath, restoredBatch and rerunBatch, as the checkpoint's logs tell
    (logged as well)."""
    newest_offsets, newest_commit = checkpoint.newest("offsets"), checkpoint.newest("commits")
    rerun_batch = newest_offsets if newest_offsets != newest_commit else None
    if newest_offsets is None:
        start_path, restored_batch = "fresh", None
        log.info(
            "fresh start: no checkpoint at %s; the source resolves its start offsets "
            "(startingOffsets=%s)",
            location,
            manifest.spec.job.source.starting_offsets,
        )
    else:
        start_path, restored_batch = "restored", newest_commit
        log.info(
            "restored from checkpoint batch %s at %s%s",
            newest_commit,
            location,
            f" (batch {rerun_batch} was planned but not committed: it is re-run)"
            if rerun_batch is not None
            else "",
        )
    return {
        "startPath": start_path,
        "restoredBatch": restored_batch,
        "rerunBatch": rerun_batch,  # planned, not committed: an interrupted batch
        # the group this run reads as: from here on the checkpoint holds its reads (the
        # operator's status.checkpointGroupId, whose group a later epoch catches up into)
        "groupId": manifest.spec.job.source.group_id or "",
    }


def _reporter(
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    start: dict[str, Any],
    workdir: Path,
) -> Reporter:
    """The run's report (file, ConfigMap), in state "starting"."""
    namespace = manifest.metadata.namespace
    publisher = (
        ConfigMapPublisher(args.report_configmap, namespace) if args.report_configmap else None
    )
    return Reporter(
        {
            "epoch": args.epoch,
            "attempt": args.attempt,
            "checkpointLocation": location,
            **start,
            "state": "starting",
            "started": now_iso(),
        },
        args.report_file,
        publisher,
        workdir / SOURCE_REPORT,
        workdir / SINK_REPORT,
    )


def _not_started(group: GroupOffsets | None, exit_code: int) -> int:
    if group is not None:
        group.close(1.0)
    return exit_code


def _catch_up(
    spark,
    manifest: RunnerManifest,
    group: GroupOffsets | None,
    args: argparse.Namespace,
    reporter: Reporter,
) -> bool:
    """A fresh epoch first commits the previous epoch's last durable batch to the group.
    False: it could not, and nothing may be read (logged, reported, termination message)."""
    caught_up = group_writer.catch_up(
        spark, manifest, group, args.previous_checkpoint, args.final_commit_timeout
    )
    reporter.update(previousCheckpoint=caught_up)
    if failure := group_writer.catch_up_failure(caught_up, manifest):
        log.error("cannot start: %s", failure)
        termination_message(failure)
        reporter.update(state="failed", error=failure)
        return False
    return True


def _start_query(
    analysed: JobFrame, manifest: RunnerManifest, args: argparse.Namespace, location: str
):
    """The started query; InvalidJob when Spark refuses to start it (nothing was started)."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    job, name = manifest.spec.job, manifest.metadata.name
    try:
        return start_query(
            analysed.frame, job, name, args.epoch, location, analysed.workdir, analysed.sink_options
        )
    except (AnalysisException, IllegalArgumentException) as exc:
        raise InvalidJob(f"spec.job: Spark rejected the query: {spark_message(str(exc))}") from None
