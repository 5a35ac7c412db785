"""Runs the job a StreamingJob manifest describes: Kafka → optional transform → sink.

The same command runs locally (`make run`) and inside the driver pod, where the operator
starts it through spark-submit in client mode. This module is its command line; the run is
spark_app/runner/preflight.py (Kafka asked before Spark starts), spark_app/runner/start.py
(restore or fresh start, the catch-up, the query started), spark_app/runner/warm_wait.py (a
waiting driver) and spark_app/runner/supervise.py (the running query, the graceful stop). The
manifest → query mapping is `spark_app/runner/query.py`; the group's offsets are written by
`spark_app/runner/group_offsets.py`.
Exit codes: 0 stopped on request (SIGTERM) or finished (availableNow); 1 the query failed
(the termination message names the cause: a deleted topic, lost offsets, …);
2 the input is invalid (spec.job.sql, spec.job.transform, the manifest: nothing was read or
committed); 3 Kafka refused the SASL credentials; 4 the TLS handshake with Kafka failed (the
broker's certificate does not verify against the CA); 5 a fresh epoch could not commit the
previous epoch's last durable batch to the group (nothing was read); 6 Kafka did not answer or
a subscribed topic does not exist (nothing was read). With --wait-for-go (the warm
hand-over, spark_app/runner/handover_signals.py) the runner first warms up and waits for its go: 0
when stopped while waiting (nothing was read), 1 when warming failed (handover.json says why), and
after the go the codes above. The container's termination message
(/dev/termination-log) says which field, Secret, checkpoint or group and why; the operator
turns 3 to 6 into a condition (KafkaAuthFailed, KafkaTLSFailed, CatchUpFailed,
KafkaUnavailable) and restarts with backoff, and 2 into phase Invalid (InvalidSpec): no
restart until the spec changes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import yaml

from spark_app.api.manifest import ManifestError, checkpoint_location, load_manifest
from spark_app.runner import warmup
from spark_app.runner.preflight import (
    KafkaStartFailed,
    check_start,
    refuse,
    termination_message,
)
from spark_app.runner.query import (
    InvalidJob,
)
from spark_app.runner.start import (
    run,
)
from spark_app.runner.supervise import (
    STOP_GRACE_S,
)
from spark_app.runner.warm_wait import wait_then_run

log = logging.getLogger("spark_app.runner.runner")  # one logger: the driver's lines as before


FINAL_COMMIT_S = 4.0


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
    parser.add_argument(
        "--master",
        help="Spark master (outside spark-submit: local[2,F], F spark.task.maxFailures or 4)",
    )
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
    _handover_arguments(parser)
    args = parser.parse_args(argv)
    if args.wait_for_go and not (args.report_configmap or args.handover_dir):
        parser.error("--wait-for-go needs --report-configmap (in a pod) or --handover-dir")
    return args


def _handover_arguments(parser: argparse.ArgumentParser) -> None:
    """The warm hand-over's: a driver that waits for its go (spark_app/runner/warm_wait.py)."""
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
    written = document.get("spec")  # as written: its Secret references name the fields
    written = written if isinstance(written, dict) else {}
    if args.wait_for_go:
        return wait_then_run(manifest, args, location, written)
    try:
        check_start(manifest, args, written)
    except InvalidJob as exc:
        return refuse(str(exc))
    except KafkaStartFailed as exc:
        log.error("cannot connect to Kafka: %s", exc)
        termination_message(str(exc))
        return exc.exit_code
    return run(manifest, args, location)


if __name__ == "__main__":
    sys.exit(main())
