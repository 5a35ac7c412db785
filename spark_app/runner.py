"""Runs the job a StreamingJob manifest describes: Kafka → optional transform → sink.

The same command runs locally (`make run`) and inside the driver pod, where the operator
starts it through spark-submit in client mode. The manifest → query mapping is
`spark_app/query.py`; the group's offsets are written by `spark_app/group_offsets.py`.
Exit codes: 0 stopped on request (SIGTERM) or finished (availableNow); 1 the query failed
(the termination message names the cause: a deleted topic, lost offsets, …);
2 the input is invalid (spec.job.sql, spec.job.transform, the manifest: nothing was read or
committed); 3 Kafka refused the SASL credentials; 4 the TLS handshake with Kafka failed (the
broker's certificate does not verify against the CA); 5 a fresh epoch could not commit the
previous epoch's last durable batch to the group (nothing was read); 6 Kafka did not answer or
a subscribed topic does not exist (nothing was read). With --wait-for-go (the warm
hand-over, spark_app/handover_signals.py) the runner first warms up and waits for its go: 0 when
stopped while waiting (nothing was read), 1 when warming failed (handover.json says why), and
after the go the codes above. The container's termination message
(/dev/termination-log) says which field, Secret, checkpoint or group and why; the operator
turns 3 to 6 into a condition (KafkaAuthFailed, KafkaTLSFailed, CatchUpFailed,
KafkaUnavailable) and restarts with backoff, and 2 into phase Invalid (InvalidSpec): no
restart until the spec changes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from spark_app import group_offsets as group_writer
from spark_app import handover_signals as handover
from spark_app import offsets as off
from spark_app import schema_pin, warmup
from spark_app.checkpoint_log import CheckpointFiles
from spark_app.group_offsets import GroupOffsets
from spark_app.kafka_config import (
    EXIT_CATCH_UP_FAILED,
    EXIT_INVALID,
    EXIT_KAFKA_AUTH,
    EXIT_KAFKA_TLS,
    EXIT_KAFKA_UNAVAILABLE,
    REFUSED_MARK,
    job_options,
)
from spark_app.manifest import (
    ManifestError,
    RunnerManifest,
    checkpoint_location,
    load_manifest,
)
from spark_app.query import (
    DRAIN_FILE,
    SOURCE_REPORT,
    InvalidJob,
    build_session,
    check_sink,
    load_transform,
    source_frame,
    start_query,
    transformed,
)
from spark_app.report import ConfigMapPublisher, Reporter, Throughput, now_iso
from spark_app.sql_transform import spark_message

log = logging.getLogger("spark_app.runner")

EXIT_OK, EXIT_FAILED = 0, 1  # and EXIT_INVALID (2), EXIT_KAFKA_AUTH (3), EXIT_KAFKA_TLS (4),
# EXIT_CATCH_UP_FAILED (5), EXIT_KAFKA_UNAVAILABLE (6): spark_app.kafka_config
TERMINATION_LOG = Path(os.environ.get("STREAMJOB_TERMINATION_LOG", "/dev/termination-log"))
# The graceful stop: the batch in flight, then the final commit, inside the driver pod's
# termination grace, which the operator derives from these numbers (its timing.DriverStop; a
# unit test checks they agree).
STOP_GRACE_S = 25.0
FINAL_COMMIT_S = 4.0
POLL_S = 0.2  # how soon a finished batch is printed and reported (a local py4j call each)
LINE_WAIT_S = 0.5  # a batch's line waits this long for its own commit to show its offsets


class KafkaStartFailed(RuntimeError):
    """Kafka refused the job's credentials, the TLS handshake failed, or Kafka or a topic is
    not there (yet): a fact about the Secrets or the cluster, not about the manifest, which a
    later start may not meet; `exit_code` tells which."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _credentials_fields(credentials: dict[str, Any] | None) -> tuple[str, str]:
    """How messages name the job's Secrets: (SASL credentials, CA)."""
    creds = credentials or {}
    sasl = (
        f"spec.kafkaCredentials.secretName (Secret {creds['secretName']!r})"
        if creds.get("secretName")
        else "spec.kafkaCredentials"
    )
    ca_ref = creds.get("caSecret") or {}
    ca = (
        f"spec.kafkaCredentials.caSecret (Secret {ca_ref['name']!r}, key "
        f"{ca_ref.get('key', 'ca.crt')!r})"
        if ca_ref.get("name")
        else "spec.kafkaCredentials.caSecret (none: the system's CA bundle)"
    )
    return sasl, ca


class SourceNotStarted(RuntimeError):
    """The source could not resolve its columns at the start (the registry away, a subject
    not registered yet): a restart may succeed, so it is a failure (exit 1), not invalid
    input."""


def preflight(
    options: dict[str, str], timeout_s: float = 15.0, credentials: dict[str, Any] | None = None
) -> None:
    """Fails fast, before Spark starts, on what would otherwise fail inside a batch.
    `credentials`: the manifest's spec.kafkaCredentials (names only), for the messages."""
    from spark_app.kafka_metadata import (
        KafkaAuthFailed,
        KafkaMetadata,
        KafkaTLSFailed,
        KafkaUnavailable,
        UnknownTopic,
    )
    from spark_app.options import OptionError, SourceOptions

    sasl_field, ca_field = _credentials_fields(credentials)

    try:
        parsed = SourceOptions.parse(options)
        metadata = KafkaMetadata(parsed, timeout_s=timeout_s)
        try:
            metadata.topic_partitions()
        finally:
            metadata.close()
    except OptionError as exc:
        raise InvalidJob(f"spec.job.source: {exc}") from None
    except UnknownTopic as exc:  # it may be created: the start is retried
        raise KafkaStartFailed(
            f"spec.job.source.subscribe: {exc}", EXIT_KAFKA_UNAVAILABLE
        ) from None
    except KafkaAuthFailed as exc:
        raise KafkaStartFailed(f"{sasl_field}: {exc}", EXIT_KAFKA_AUTH) from None
    except KafkaTLSFailed as exc:
        raise KafkaStartFailed(f"{ca_field}: {exc}", EXIT_KAFKA_TLS) from None
    except KafkaUnavailable as exc:
        raise KafkaStartFailed(
            f"spec.job.source.bootstrapServers: {exc}", EXIT_KAFKA_UNAVAILABLE
        ) from None


def progress_line(progress: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One line per batch, and the same facts as a dict for the report."""
    source = (progress.get("sources") or [{}])[0]
    end = _positions(source.get("endOffset"))
    latest = _positions(source.get("latestOffset"))
    batch = {
        "batchId": progress.get("batchId"),
        "numInputRows": progress.get("numInputRows", 0),
        "endOffsets": off.to_json(end),
        "latestOffsets": off.to_json(latest),
        "lag": off.lag(end, latest),
        "timestamp": progress.get("timestamp"),
    }
    line = (
        f"batch {batch['batchId']}: {batch['numInputRows']} rows, end offsets "
        f"{json.dumps(batch['endOffsets'], separators=(',', ':'))}, lag {batch['lag']}"
    )
    return line, batch


def _positions(raw: Any) -> off.Positions:
    if isinstance(raw, str):
        raw = json.loads(raw)
    if isinstance(raw, dict) and "offsets" in raw:
        return off.end_positions(raw)
    return {}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streamingjob-run", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--manifest",
        required=True,
        type=Path,
        help="StreamingJob manifest (YAML), as for kubectl apply",
    )
    parser.add_argument(
        "--epoch",
        type=int,
        default=1,
        help="deployment epoch; a new epoch means a new, empty checkpoint",
    )
    parser.add_argument("--attempt", type=int, default=1)
    parser.add_argument(
        "--checkpoint-location",
        help="override <spec.checkpoint.location>/<ns>/<name>/epoch-<epoch>",
    )
    parser.add_argument("--master", help="Spark master (default: local[2] outside spark-submit)")
    parser.add_argument("--report-file", type=Path, help="write the JSON report here")
    parser.add_argument("--report-configmap", help="publish the report to this ConfigMap")
    parser.add_argument(
        "--previous-checkpoint",
        action="append",
        default=[],
        help="an earlier epoch's checkpoint, newest first (repeated): a fresh start first "
        "commits the last durable batch of the newest whose query started, where it is ahead "
        "of the group",
    )
    parser.add_argument(
        "--final-commit-timeout",
        type=float,
        default=FINAL_COMMIT_S,
        help="seconds a graceful stop waits to commit the last durable batch's offsets",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=STOP_GRACE_S,
        help="seconds a graceful stop waits for the batch in flight before interrupting it",
    )
    parser.add_argument(
        "--preflight-timeout",
        type=float,
        default=15.0,
        help="seconds to wait for Kafka before declaring it unreachable",
    )
    parser.add_argument(
        "--wait-for-go",
        action="store_true",
        help="the warm hand-over: warm up, publish handover.json ready, start only when "
        "go.json names this driver (pod, epoch, attempt)",
    )
    parser.add_argument(
        "--go-configmap",
        help="with --wait-for-go and --report-configmap: the ConfigMap to read go.json from "
        "(the operator's; default: the report ConfigMap)",
    )
    parser.add_argument(
        "--handover-dir",
        type=Path,
        help="with --wait-for-go and no --report-configmap: the directory of handover.json "
        "(written) and go.json (read)",
    )
    parser.add_argument(
        "--executor-timeout",
        type=float,
        default=warmup.EXECUTORS_TIMEOUT_S,
        help="with --wait-for-go: seconds to wait for spark.executor.instances executors",
    )
    args = parser.parse_args(argv)
    if args.wait_for_go and not (args.report_configmap or args.handover_dir):
        parser.error("--wait-for-go needs --report-configmap (in a pod) or --handover-dir")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    try:
        document = yaml.safe_load(args.manifest.read_text())
        manifest = load_manifest(document if isinstance(document, dict) else {})
    except (OSError, yaml.YAMLError, ManifestError) as exc:
        return refuse(f"{args.manifest}: {exc}")
    meta, spec = manifest.metadata, manifest.spec
    location = args.checkpoint_location or checkpoint_location(
        spec.checkpoint.location, meta.namespace, meta.name, args.epoch
    )
    credentials = (document.get("spec") or {}).get("kafkaCredentials")
    credentials = credentials if isinstance(credentials, dict) else None
    if args.wait_for_go:
        return wait_then_run(manifest, args, location, credentials)
    try:
        check_start(manifest, args, credentials)
    except InvalidJob as exc:
        return refuse(str(exc))
    except KafkaStartFailed as exc:
        log.error("cannot connect to Kafka: %s", exc)
        _termination_message(str(exc))
        return exc.exit_code
    return run(manifest, args, location)


def check_start(
    manifest: RunnerManifest, args: argparse.Namespace, credentials: dict[str, Any] | None
) -> None:
    """Kafka answers for the subscribed topics and the transform loads (before Spark):
    InvalidJob or KafkaStartFailed otherwise."""
    preflight(job_options(manifest.spec.job), args.preflight_timeout, credentials)
    if manifest.spec.job.transform:
        load_transform(manifest.spec.job.transform)


@dataclass(frozen=True)
class JobFrame:
    """The job's DataFrame, analysed (source columns, transform or SQL, sink checks), not
    started; `workdir`: the run's work directory its source reports to."""

    frame: Any
    workdir: Path
    pins: dict[str, schema_pin.Pin]  # the reader schema versions the frame reads with


@dataclass(frozen=True)
class Warmed:
    """What a driver that waited for its go hands to run()."""

    spark: Any
    stop: threading.Event  # set by SIGTERM/SIGINT since the wait began
    go_seen: float  # time.time() when the go was seen
    warm_seconds: float
    job: JobFrame | None = None  # analysed before ready: run() starts this very frame


def wait_then_run(
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    credentials: dict[str, Any] | None,
) -> int:
    """--wait-for-go: warm up, say ready, wait for this driver's go, then run() exactly as a
    start without it. Stopped while waiting: EXIT_OK, nothing read; warming failed:
    EXIT_FAILED, handover.json "failed" and the termination message say why."""
    me = handover.Identity.of_this_pod(args.epoch, args.attempt)
    signals = handover.signals_for(
        args.report_configmap, args.handover_dir, manifest.metadata.namespace, args.go_configmap
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    began = time.monotonic()
    signals.publish(handover.readiness(me, "warming"))
    try:
        spark, job = warm(manifest, args, location, credentials, stop)
    except Exception as exc:  # any step: the hand-over falls back to a cold start
        return _warming_failed(signals, me, exc)
    warm_seconds = time.monotonic() - began
    if stop.is_set() or not handover.await_go(signals, me, warm_seconds, stop):
        log.info("stopped while waiting for the go: nothing was read or committed")
        return EXIT_OK
    return run(manifest, args, location, Warmed(spark, stop, time.time(), warm_seconds, job))


def warm(
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    credentials: dict[str, Any] | None,
    stop: threading.Event,
):
    """The warm-up of a waiting driver (nothing read, nothing written): its session and the
    job's frame, analysed as a start without the go analyses it (the source's columns, the
    registry's subject, the transform or SQL, the sink's checks), so that a job that cannot
    start fails here, before it says ready, and the running driver is kept."""
    check_start(manifest, args, credentials)
    spark = build_session(manifest, args.master)
    job = _analysed_job(spark, manifest, args, location)
    registered = warmup.wait_for_executors(spark, args.executor_timeout, stop)
    hosts = [] if stop.is_set() else warmup.warm_python_workers(spark)
    if not stop.is_set():
        warmup.warm_streaming_engine(spark, manifest.spec.job.sink.format)
    base = warmup.checkpoint_base_reachable(spark, location)
    log.info(
        "warmed: the query analysed, %d executors, Python workers on %s, checkpoint storage "
        "%s reachable",
        registered,
        ", ".join(hosts) or "none (stopped)",
        base,
    )
    return spark, job


def _warming_failed(signals: handover.Signals, me: handover.Identity, exc: Exception) -> int:
    text = str(exc).strip() or type(exc).__name__
    message = f"warming for the hand-over failed: {failure_cause(text)}"
    log.error("%s", message)
    _termination_message(message)
    signals.publish(handover.readiness(me, "failed", error=message))
    return EXIT_FAILED


# The source's own errors, as the executor's Python traceback ends in them inside Spark's
# wrapping ("…spark_app.partition_reader.TopicDeletedError: topic t was deleted …").
_SOURCE_ERROR = re.compile(
    r"\b(?:DataLossError|TopicDeletedError|UnknownTopic|KafkaUnavailable|KafkaException"
    r"|TimeoutError|NativeUnavailable|PoisonRecordError|RegistryUnavailable|RegistryRefused"
    r"|RegistryTLSError"
    r"|ReaderSchemaError|DeadLetterError): (.+)"
)


def failure_cause(text: str) -> str:
    """The line that says why a query failed: the source's own error where Spark's wrapping
    holds one (the last: a traceback ends in the error raised), else Spark's first line."""
    found = _SOURCE_ERROR.findall(text)
    if found:
        return found[-1].strip()
    lines = text.splitlines()
    return lines[0] if lines else "unknown error"


def refuse(message: str, reporter: Reporter | None = None) -> int:
    """EXIT_INVALID for input that cannot run: the log, the termination message (the
    operator's InvalidSpec: REFUSED_MARK tells it from any other program's exit 2) and the
    report say why."""
    log.error("invalid job: %s", message)
    _termination_message(REFUSED_MARK + message)
    if reporter is not None:
        reporter.update(state="failed", error=message)
    return EXIT_INVALID


def _termination_message(text: str) -> None:
    """The container's termination message (Kubernetes shows it in the pod's status); the
    kubelet creates the file, elsewhere there is none and nothing is written."""
    if not TERMINATION_LOG.exists():
        return
    with contextlib.suppress(OSError):  # the log line says it all anyway
        TERMINATION_LOG.write_text(text[:4000])


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
    start = _start_point(checkpoint, location, manifest)
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
        analysed = analysed or _analysed_job(spark, manifest, args, location, workdir)
        frame = analysed.frame
        if analysed.pins:
            pins = {column: pin.report() for column, pin in analysed.pins.items()}
            reporter.update(readerSchemas=pins)
            log.info("reader schemas: %s", json.dumps(pins, sort_keys=True))
        phases.done("frame")
        fresh = start["startPath"] == "fresh"
        if (
            args.previous_checkpoint
            and fresh
            and not _catch_up(spark, manifest, group, args, reporter)
        ):
            return _not_started(group, EXIT_CATCH_UP_FAILED)
        if group is not None and not fresh:
            restored = group_writer.commit_durable(
                checkpoint, group, args.final_commit_timeout, "restore"
            )
            reporter.update(restoredCommit=restored)
        phases.done("catch-up")
        signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
        signal.signal(signal.SIGINT, lambda *_: stop_requested.set())
        if schema_pin.needs_writing(analysed.pins):  # kept for this epoch's restores
            _write_pins(checkpoint, analysed.pins)
        query = _start_query(frame, manifest, args, location)
        phases.done("query start")
        log.info("query started %s", phases)
    except InvalidJob as exc:
        return _not_started(group, refuse(str(exc), reporter))
    except SourceNotStarted as exc:
        log.error("cannot start: %s", exc)
        _termination_message(str(exc))  # the operator's DriverFailed, restarted with backoff
        reporter.update(state="failed", error=str(exc))
        return _not_started(group, EXIT_FAILED)
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
            result = group_writer.commit_durable(
                checkpoint, group, args.final_commit_timeout, "final commit"
            )
            reporter.update(finalCommit=result)
            group.close(1.0)


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


def _start_point(
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
        _termination_message(failure)
        reporter.update(state="failed", error=failure)
        return False
    return True


def _analysed_job(
    spark,
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    workdir: Path | None = None,
) -> JobFrame:
    """Everything the query needs before it starts, checked without reading a record or
    writing a file: the epoch's reader schema versions (`_reader_pins`), the job's frame
    (`_job_frame`) and the sink's checks on its columns (`check_sink`). `workdir`: the
    run's (a new one when None)."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="streamingjob-"))
    pins = _reader_pins(spark, manifest, location)
    versions = {f"{column}SchemaVersion": str(pin.version) for column, pin in pins.items()}
    frame = _job_frame(spark, manifest, args, workdir, versions)
    check_sink(spark, manifest.spec.job, frame.schema)
    return JobFrame(frame, workdir, pins)


def _reader_pins(spark, manifest: RunnerManifest, location: str) -> dict[str, schema_pin.Pin]:
    """The reader schema version of each decoded column read from a subject, for this
    epoch (`spark_app/schema_pin.py`): the spec's version, the one the epoch's checkpoint
    pinned (a restore), or the subject's latest now (a fresh epoch; written by run() before
    the query starts). Reads only."""
    from spark_app.decoding import ReaderSchemaError
    from spark_app.options import OptionError, SourceOptions
    from spark_app.typed_values import at_query_start

    try:
        parsed = SourceOptions.parse(job_options(manifest.spec.job))
    except OptionError as exc:
        raise InvalidJob(f"spec.job.source: {exc}") from None
    decodings = {
        d.column: d
        for d in (parsed.value_decoding, parsed.key_decoding)
        if d is not None and d.reader_schema is None and d.subject is not None
    }
    if not decodings:
        return {}
    where = f"{location.rstrip('/')}/{schema_pin.PIN_FILE}"
    try:
        text = CheckpointFiles(spark, location).read_text(schema_pin.PIN_FILE)
        stored = None if text is None else schema_pin.from_json(text)
    except schema_pin.PinUnreadable as exc:
        raise SourceNotStarted(
            f"{where}: {exc}; delete it to read the subjects' latest versions again"
        ) from None
    except Exception as exc:  # py4j: denied, the store away
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceNotStarted(
            f"cannot read the epoch's reader schema pins {where}: {first}"
        ) from None
    requested = {column: (str(d.subject), d.version) for column, d in decodings.items()}
    pins = {}
    for column, (version, how) in schema_pin.versions(requested, stored).items():
        decoding = decodings[column]
        if version is None:  # the subject's latest, now: pinned for the epoch
            try:
                version = at_query_start(decoding).reader.version
            except ReaderSchemaError as exc:
                raise SourceNotStarted(f"the source could not start: {exc}") from None
            assert version is not None  # a subject's schema has one
        pins[column] = schema_pin.Pin(column, str(decoding.subject), version, how)
    return pins


def _write_pins(checkpoint: CheckpointFiles, pins: dict[str, schema_pin.Pin]) -> None:
    """The epoch's pins into its checkpoint; SourceNotStarted when they cannot be written
    (nothing was read)."""
    try:
        checkpoint.write_text(schema_pin.PIN_FILE, schema_pin.to_json(pins))
    except Exception as exc:  # py4j: denied, the store away
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SourceNotStarted(
            f"cannot write the epoch's reader schema pins to {checkpoint.location}: {first}"
        ) from None
    log.info("reader schema versions pinned for this epoch in %s", checkpoint.location)


def _job_frame(
    spark,
    manifest: RunnerManifest,
    args: argparse.Namespace,
    workdir: Path,
    versions: dict[str, str] | None = None,
):
    """The job's DataFrame, analysed. SourceNotStarted when the source cannot resolve its
    columns (a registry away, a subject not registered yet: a later start may succeed);
    InvalidJob when the SQL query or transform cannot run. `versions`: the pinned reader
    schema versions (valueSchemaVersion, keySchemaVersion)."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    job, name = manifest.spec.job, manifest.metadata.name
    try:
        frame = source_frame(spark, job, name, args.epoch, workdir, versions)
    except (AnalysisException, IllegalArgumentException) as exc:
        raise SourceNotStarted(f"the source could not start: {failure_cause(str(exc))}") from None
    try:
        frame = transformed(spark, job, frame)
        frame.schema  # noqa: B018 - analysis forced (a transform's plan too), nothing run
        return frame
    except (AnalysisException, IllegalArgumentException) as exc:
        raise InvalidJob(f"spec.job: Spark rejected the query: {spark_message(str(exc))}") from None


def _start_query(frame, manifest: RunnerManifest, args: argparse.Namespace, location: str):
    """The started query; InvalidJob when Spark refuses to start it (nothing was started)."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    job, name = manifest.spec.job, manifest.metadata.name
    try:
        return start_query(frame, job, name, args.epoch, location)
    except (AnalysisException, IllegalArgumentException) as exc:
        raise InvalidJob(f"spec.job: Spark rejected the query: {spark_message(str(exc))}") from None


def executor_tasks(spark) -> list[dict[str, Any]]:
    """Tasks each executor has completed, from Spark's status store (the driver left out):
    which executors, on which hosts, do the job's work."""
    try:
        summaries = spark.sparkContext._jsc.sc().statusStore().executorList(True)
        found = (summaries.apply(i) for i in range(summaries.size()))
        return [
            {"id": e.id(), "hostPort": e.hostPort(), "completedTasks": e.completedTasks()}
            for e in found
            if e.id() != "driver"
        ]
    except Exception as exc:  # a report without it, never a failed job
        log.debug("no executor summary: %s", exc)
        return []


def executor_task_ms(spark) -> int | None:
    """The time every executor of this run (gone ones too: the total never goes back) spent
    in tasks: the autoscaler's processing rate is rows per second of it. It grows with the
    work, not with the executor count, unlike a batch's duration (planning, commits)."""
    try:
        summaries = spark.sparkContext._jsc.sc().statusStore().executorList(False)
        found = [summaries.apply(i) for i in range(summaries.size())]
        executors = [e for e in found if e.id() != "driver"] or found  # local mode: the driver
        return sum(int(e.totalDuration()) for e in executors)
    except Exception as exc:  # a report without it, never a failed job
        log.debug("no executor task time: %s", exc)
        return None


def supervise(
    query,
    reporter: Reporter,
    stop_requested: threading.Event,
    drain_file: Path,
    spark,
    checkpoint: CheckpointFiles,
    group: GroupOffsets | None,
    stop_timeout: float = STOP_GRACE_S,
    go_seen: float | None = None,
) -> int:
    """Prints a line per batch and stops between batches on SIGTERM (no half-written batch):
    the drain file tells the source to plan no new batch, and the query is stopped once the
    batch in flight has ended. `go_seen`: when a waiting driver saw its go (time.time())."""
    stop_deadline = None
    progress = _Progress(query, reporter, spark, checkpoint, group, go_seen)

    def try_stop() -> bool:
        """Stops the query once the batch in flight has ended (or at the deadline)."""
        nonlocal stop_deadline
        if stop_deadline is None:
            stop_deadline = time.monotonic() + stop_timeout
            drain_file.touch()
            log.info("stop requested: finishing the batch in flight")
        if not query.status.get("isTriggerActive"):
            log.info("stopping the query between batches")
        elif time.monotonic() > stop_deadline:
            log.warning(
                "the batch in flight did not end within %gs: interrupting it (a restart "
                "re-runs it from the checkpoint)",
                stop_timeout,
            )
        else:
            return False
        query.stop()
        return True

    while True:
        try:
            finished = query.awaitTermination(POLL_S)
        except Exception:
            finished = True
        progress.report()
        if finished or (stop_requested.is_set() and try_stop()):
            break
    progress.report()  # a batch that ended after the last look
    return _query_outcome(query, reporter)


class _Progress:
    """supervise()'s look at the query: a line and a report update per new batch, its end
    offsets to the group once the batch is durable."""

    def __init__(
        self,
        query,
        reporter: Reporter,
        spark,
        checkpoint: CheckpointFiles,
        group: GroupOffsets | None,
        go_seen: float | None = None,
    ) -> None:
        self.query, self.reporter, self.spark = query, reporter, spark
        self.checkpoint, self.group = checkpoint, group
        self.go_seen = go_seen  # until the first durable batch after the go is reported
        self.seen_batch: Any = None  # the last batch printed, as Spark reports its id
        self.throughput = Throughput()  # the autoscaler's processing rate (report "throughput")

    def durable(self, batch_id: int) -> bool:
        """Spark posts a batch's progress after writing its commit-log entry; the entry is
        checked anyway: only durable offsets reach the group."""
        try:
            return self.checkpoint.has("commits", batch_id)
        except Exception as exc:
            log.warning("cannot check the commit log for batch %s: %s", batch_id, exc)
            return False

    def report(self) -> None:
        progress = self.query.lastProgress
        ran = progress and "addBatch" in (progress.get("durationMs") or {})  # not idle
        if not ran or progress.get("batchId") == self.seen_batch:
            self.reporter.update()
            return
        self.seen_batch = progress.get("batchId")
        line, batch = progress_line(progress)
        if self.group is not None and self.durable(self.seen_batch):
            self.group.batch_durable(off.from_json(batch["endOffsets"]))
            self.group.wait(LINE_WAIT_S)  # the line shows the group at this batch's end
        self.throughput.add(self.query.recentProgress)  # every batch since the last look
        self.throughput.task_ms = executor_task_ms(self.spark)
        report = self.reporter.update(
            latestBatch=batch,
            executors=executor_tasks(self.spark),
            throughput=self.throughput.as_report(),
            **self._since_go(progress),
        )
        committed = (report.get("commits") or {}).get("lastCommitted")
        if committed:
            line += f", group offsets {json.dumps(committed, separators=(',', ':'))}"
        print(line, flush=True)

    def _since_go(self, progress: dict[str, Any]) -> dict[str, float]:
        """goToFirstBatchSeconds, once: from the go to the end of the first durable batch
        (the hand-over's gap on the new driver's side)."""
        if self.go_seen is None or not self.durable(self.seen_batch):
            return {}
        ended = batch_end_time(progress) or time.time()
        seconds, self.go_seen = round(max(ended - self.go_seen, 0.0), 3), None
        log.info("the first batch after the go durable %.2fs after it", seconds)
        return {"goToFirstBatchSeconds": seconds}


def batch_end_time(progress: dict[str, Any]) -> float | None:
    """When a batch ended (its trigger's start plus its duration), as time.time()."""
    try:
        started = datetime.fromisoformat(str(progress["timestamp"])).timestamp()
        return started + float(progress["durationMs"]["triggerExecution"]) / 1000
    except (KeyError, TypeError, ValueError):
        return None


def _query_outcome(query, reporter: Reporter) -> int:
    """The exit code of a query that has ended; a failure's cause goes to the log, the
    termination message (the operator's DriverFailed) and the report."""
    error = query.exception()
    if error is not None:
        text = str(error.desc if hasattr(error, "desc") else error).strip()
        cause = failure_cause(text)
        log.error("query failed: %s", cause)
        _termination_message(f"the query failed: {cause}")  # the operator's DriverFailed
        reporter.update(state="failed", error="\n".join(text.splitlines()[:20]))
        return EXIT_FAILED
    reporter.update(state="stopped")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
