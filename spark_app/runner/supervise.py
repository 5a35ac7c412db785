"""The running query, watched: each finished batch printed and reported (with the executors' task
time, the autoscaler's input), a SIGTERM turned into a graceful stop between batches within its
grace, and the query's end into the runner's exit code.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from spark_app.api import offsets as off
from spark_app.runner.checkpoint_log import CheckpointFiles
from spark_app.runner.group_offsets import GroupOffsets
from spark_app.runner.preflight import (
    EXIT_FAILED,
    EXIT_OK,
    failure_cause,
    termination_message,
)
from spark_app.runner.report import Reporter, Throughput

log = logging.getLogger("spark_app.runner.runner")  # one logger: the driver's lines as before


# The graceful stop: the batch in flight, then the final commit, inside the driver pod's
# termination grace, which the operator derives from these numbers (its timing.DriverStop; a
# unit test checks they agree).
STOP_GRACE_S = 25.0


POLL_S = 0.2  # how soon a finished batch is printed and reported (a local py4j call each)


LINE_WAIT_S = 0.5  # a batch's line waits this long for its own commit to show its offsets


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
    parsed = _source_offset(raw)
    return off.end_positions(parsed) if parsed else {}


def end_epochs(progress: dict[str, Any]) -> off.Epochs:
    """The leader epochs our source kept with a batch's end offsets (rule 16)."""
    source = (progress.get("sources") or [{}])[0]
    return off.end_epochs(_source_offset(source.get("endOffset")) or {})


def _source_offset(raw: Any) -> dict | None:
    """Our source's offset dict as a progress report holds it (a JSON string)."""
    if isinstance(raw, str):
        raw = json.loads(raw)
    return raw if isinstance(raw, dict) and "offsets" in raw else None


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
    requested_at = None
    stop: dict[str, Any] = {}  # how the graceful stop went, for the report
    progress = _Progress(query, reporter, spark, checkpoint, group, go_seen)

    def try_stop() -> bool:
        """Stops the query once the batch in flight has ended (or at the deadline)."""
        nonlocal requested_at
        if requested_at is None:
            requested_at = time.monotonic()
            drain_file.touch()
            log.info("stop requested: finishing the batch in flight")
        waited = time.monotonic() - requested_at
        between = not query.status.get("isTriggerActive")
        if between:
            log.info("stopping the query between batches")
        elif waited > stop_timeout:
            log.warning(
                "the batch in flight did not end within %gs: interrupting it (a restart "
                "re-runs it from the checkpoint)",
                stop_timeout,
            )
        else:
            return False
        stop.update(betweenBatches=between, waitedSeconds=round(waited, 2))
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
    return _query_outcome(query, reporter, stop)


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
            self.group.batch_durable(off.from_json(batch["endOffsets"]), end_epochs(progress))
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


def _query_outcome(query, reporter: Reporter, stop: dict[str, Any]) -> int:
    """The exit code of a query that has ended; a failure's cause goes to the log, the
    termination message (the operator's DriverFailed) and the report; a graceful stop's
    course (`stop`: betweenBatches, waitedSeconds) to the report."""
    error = query.exception()
    if error is not None:
        text = str(error.desc if hasattr(error, "desc") else error).strip()
        cause = failure_cause(text)
        log.error("query failed: %s", cause)
        termination_message(f"the query failed: {cause}")  # the operator's DriverFailed
        reporter.update(state="failed", error="\n".join(text.splitlines()[:20]))
        return EXIT_FAILED
    reporter.update(state="stopped", **({"stop": stop} if stop else {}))
    return EXIT_OK
