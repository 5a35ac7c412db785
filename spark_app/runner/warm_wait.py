"""The warm hand-over's next driver (--wait-for-go): warmed up (its query analysed, the source's
first look at Kafka done) before it reports ready, then waiting for its go, and only then
running the job.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from typing import Any

from spark_app.api.manifest import RunnerManifest
from spark_app.runner import handover_signals as handover
from spark_app.runner import warmup
from spark_app.runner.analysis import analysed_job
from spark_app.runner.preflight import (
    EXIT_FAILED,
    EXIT_OK,
    check_start,
    failure_cause,
    termination_message,
)
from spark_app.runner.query import (
    build_session,
)
from spark_app.runner.start import (
    Warmed,
    run,
)

log = logging.getLogger("spark_app.runner.runner")  # one logger: the driver's lines as before


def wait_then_run(
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    written: dict[str, Any],
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
        spark, job = warm(manifest, args, location, written, stop)
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
    written: dict[str, Any],
    stop: threading.Event,
):
    """The warm-up of a waiting driver (nothing read, nothing written): its session and the
    job's frame, analysed as a start without the go analyses it (the source's columns, the
    registry's subject, the transform or SQL, the sink's checks), so that a job that cannot
    start fails here, before it says ready, and the running driver is kept."""
    check_start(manifest, args, written)
    spark = build_session(manifest, args.master)
    job = analysed_job(spark, manifest, args, location)
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
    termination_message(message)
    signals.publish(handover.readiness(me, "failed", error=message))
    return EXIT_FAILED
