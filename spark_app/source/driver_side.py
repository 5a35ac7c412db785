"""The driver side of the `kafka_checkpointed` source: everything the driver-side reader keeps
between Spark's planning calls (clients, the partition state table, the committer and the
discovery threads), created on the first planning call so the reader itself stays cheap and
picklable (see `spark_app.source.source` and docs/source.md).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
)

from spark_app.api import offsets as off
from spark_app.api.offsets import Epochs, Positions, StartDecision, TopicPartition
from spark_app.api.options import SourceOptions
from spark_app.formats.typed_values import TypedValues
from spark_app.kafka.group_commits import group_committer
from spark_app.kafka.metadata import KafkaMetadata
from spark_app.sinks.dead_letter import DeadLetterTally
from spark_app.source import data_loss, native_read, source_report
from spark_app.source.committer import OffsetCommitter
from spark_app.source.partition_range import KafkaInputPartition
from spark_app.source.partition_state import PartitionStateTable

log = logging.getLogger("spark_app.source.source")


class DriverSide:
    """Everything the driver-side reader keeps between planning calls."""

    def __init__(
        self,
        options: SourceOptions,
        values: TypedValues | None = None,
        keys: TypedValues | None = None,
    ):
        self.options = options
        self.values = values  # valueFormat avro/json: the reader schema pinned at query start
        self.keys = keys  # keyFormat avro/json: likewise
        self.read_path = native_read.executor_read_path(options.read_path)
        self.table = PartitionStateTable()
        self.metadata = KafkaMetadata(options)
        self.committer = (
            OffsetCommitter(self.table, group_committer(options))
            if options.commit_offsets_on_checkpoints
            else None
        )
        self._low: Positions = {}
        self._fetched_at = 0.0
        self._fresh_start: dict[TopicPartition, StartDecision] | None = None
        # the leader epochs committed with the offsets a fresh start takes from the group
        self._committed_epochs: Epochs = {}
        self._started_fresh = False
        self._target: Positions | None = None  # Trigger.AvailableNow: never read past it
        self._loss_seen: set[tuple[TopicPartition, int]] = set()
        self._closed = threading.Event()
        self._reported_version: tuple | None = None
        self._draining = False
        self._dead_letters = DeadLetterTally(options.dead_letter) if options.dead_letter else None
        self._refresh_order = threading.Lock()
        self._refreshes_started = self._refresh_applied = 0
        self._refresh(discover=True)
        self._discovery = None
        if options.partition_discovery_interval_ms > 0:
            self._discovery = threading.Thread(
                target=self._discover_forever, name="partition-discovery", daemon=True
            )
            self._discovery.start()
        self.write_report()
        if _is_spark_source_runner():
            signal.signal(signal.SIGTERM, self._on_sigterm)
            _log_to_stderr()
        log.info(native_read.read_path_line(options.read_path, options.native_engine))
        for typed in (values, keys):
            if typed is not None:
                column, fmt = typed.decoding.column, typed.decoding.format
                log.info("%ss: %s, decoded on the executors to %s", column, fmt, typed.describe())

    def _on_sigterm(self, signum: int, frame: object) -> None:
        """The JVM ends this process with SIGTERM and never calls stop(): send the pending
        commit (bounded) so an idle stream's last batch reaches the group, then exit."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it can arrive twice
        self.close(timeout=3.0)
        raise SystemExit(0)

    # -- lookups ---------------------------------------------------------------------------
    def _refresh(self, discover: bool) -> None:
        """Reads partitions and log ends. The micro-batch and discovery threads both refresh,
        and their readings may finish out of order: an older one never overwrites a newer one
        (a log end going back would look like data loss to the next batch)."""
        with self._refresh_order:
            self._refreshes_started += 1
            reading = self._refreshes_started
        tps = self.metadata.topic_partitions() if discover else self.table.partitions()
        watermarks, epochs = self.metadata.log_ends(tps)
        with self.table.lock:
            if reading < self._refresh_applied:
                return  # a newer reading is in the table already
            self._refresh_applied = reading
            ends = {tp: high for tp, (_, high) in watermarks.items()}
            new = self.table.discover(ends, epochs)
            self._low.update({tp: low for tp, (low, _) in watermarks.items()})
            self._fetched_at = time.monotonic()
        if new and self.table.snapshot().version > 1:
            log.info("partitions discovered: %s (read from earliest)", _names(new))

    def _discover_forever(self) -> None:
        interval = self.options.partition_discovery_interval_ms / 1000
        while not self._closed.wait(interval):
            try:
                self._refresh(discover=True)
            except Exception as exc:
                log.warning("partition discovery failed: %s", exc)

    def _latest(self) -> tuple[Positions, Epochs]:
        """Log ends, cached: Spark asks ~85 times a second when idle; and the leader epoch
        each came with (one snapshot: an end and its epoch are of the same answer)."""
        stale = time.monotonic() - self._fetched_at >= self.options.min_fetch_interval_ms / 1000
        if stale:
            self._refresh(discover=self.options.partition_discovery_interval_ms == 0)
        snapshot = self.table.snapshot()
        latest, epochs = snapshot.column("latest"), snapshot.column("latest_epoch")
        if self._target is not None:
            # Partitions discovered after the target was frozen are left to the next run
            # (as Spark's own Kafka source): their moving end would keep this run going.
            target = self._target
            latest = {tp: min(o, target[tp]) for tp, o in latest.items() if tp in target}
        return latest, epochs

    # -- planning --------------------------------------------------------------------------
    def note_fresh_start(self) -> None:
        self._started_fresh = True

    def latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        fresh = off.is_fresh_start(start)
        if not fresh:
            # Spark calls latestOffset(start=end of batch N) only after commits/N is
            # written: the earliest moment batch N is known durable (rule 3).
            self.checkpoint_complete(start)
        if self._drain_requested():
            return start  # no new batch: the runner stops the query between batches
        log_ends, epochs = self._latest()
        if fresh:
            begin = self._resolve_fresh_start(log_ends)
            # a committed position keeps the epoch it was committed with: the one of the log
            # its reader read below it (rule 16), not today's leader's
            begin_epochs = {**off.epochs_at(begin, log_ends, epochs), **self._committed_epochs}
            assert self._fresh_start is not None
            self._check_data_loss(data_loss.resumed_from(self._fresh_start), log_ends)
        else:
            begin, begin_epochs = off.end_positions(start), off.end_epochs(start)
            self._check_data_loss(begin, log_ends)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end, end_epochs = off.plan_end(begin, begin_epochs, log_ends, epochs, max_rows)
        if fresh:
            self.table.plan(end)
            return off.batch_offset(end, begin, end_epochs, begin_epochs)
        if end == begin:
            return start  # unchanged JSON: no new batch
        self.table.plan(end)
        return off.batch_offset(end, epochs=end_epochs)

    def _drain_requested(self) -> bool:
        """The runner creates the drain file on SIGTERM. Spark plans the next batch as soon as
        one ends when batches take longer than the trigger interval, so without this a busy
        query never pauses between batches and a graceful stop would interrupt one."""
        if not self._draining and self.options.drain_path:
            self._draining = os.path.exists(self.options.drain_path)
            if self._draining:
                log.info("graceful stop: no new batch is planned")
        return self._draining

    def _resolve_fresh_start(self, latest: Positions) -> Positions:
        """Resolves the start once per process; batch 0's end offset pins it for replays."""
        if self._fresh_start is None:
            mode = off.parse_starting_offsets(self.options.starting_offsets)
            tps = sorted(latest)
            committed_epochs: Epochs = {}
            committed = (
                self.metadata.committed(tps, epochs=committed_epochs)
                if self.options.group_id
                else dict.fromkeys(tps)
            )
            by_time = self.metadata.offsets_for_time(tps, mode) if isinstance(mode, int) else {}
            self._fresh_start = {
                tp: off.resolve_start(
                    tp,
                    mode,
                    self.options.offset_reset_strategy,
                    self._low.get(tp, 0),
                    latest[tp],
                    committed.get(tp),
                    by_time.get(tp),
                    committed_epochs.get(tp),
                )
                for tp in tps
            }
            self._committed_epochs = {
                tp: committed_epochs[tp]
                for tp, decision in self._fresh_start.items()
                if decision.origin == "committed" and tp in committed_epochs
            }
            log.info("fresh start (no checkpoint): %s", describe_start(self._fresh_start))
            self.write_report()
        return {tp: decision.offset for tp, decision in self._fresh_start.items()}

    def _check_data_loss(self, begin: Positions, latest: Positions) -> None:
        """failOnDataLoss (data_loss.judge); with false each loss is counted and logged once."""
        found = data_loss.losses(begin, latest, self._low)
        data_loss.judge(found, self.options.fail_on_data_loss)
        for loss in found:
            if (loss.tp, loss.offset) not in self._loss_seen:
                self._loss_seen.add((loss.tp, loss.offset))
                if loss.skipped:
                    self.table.record_data_loss(loss.skipped)
                log.warning("%s; continuing (failOnDataLoss=false)", loss.problem)

    def plan_partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        begin = off.start_positions(start, end)
        begin_epochs = off.start_epochs(start, end)  # none in a checkpoint of an older version
        stop, stop_epochs = off.end_positions(end), off.end_epochs(end)
        if off.is_fresh_start(start) and self._fresh_start is None:
            # Batch 0 replayed after a crash: its start was pinned by the earlier run.
            self._fresh_start = {tp: StartDecision(o, "pinned") for tp, o in begin.items()}
            self.write_report()
        self.table.plan(stop)
        client = self.options.client()
        if self.options.group_id:
            client["group.id"] = f"{self.options.group_id}-reader"  # never commits
        dead_letter = self.options.dead_letter
        return [
            KafkaInputPartition(
                topic=tp[0],
                partition=tp[1],
                start=begin.get(tp, 0),
                end=stop[tp],
                start_epoch=begin_epochs.get(tp) if tp in begin else None,
                end_epoch=stop_epochs.get(tp),
                client_config=client,
                fail_on_data_loss=self.options.fail_on_data_loss,
                # a dead-letter copy keeps the record's headers, asked for or not
                include_headers=self.options.include_headers or dead_letter is not None,
                headers_for_dead_letter_only=not self.options.include_headers,
                poll_timeout_ms=self.options.poll_timeout_ms,
                max_records_per_batch=self.options.max_records_per_batch,
                read_path=self.read_path,
                native_engine=self.options.native_engine,
                values=self.values,
                keys=self.keys,
                dead_letter=dead_letter,
                announce_range=self.options.announce_task_ranges,
            )
            for tp in sorted(stop)
            if stop[tp] > begin.get(tp, 0)
        ]

    def checkpoint_complete(self, end: dict) -> None:
        """The batch ending at `end` (its offset dict) is durable: record it, hand its
        positions and their leader epochs to the committer."""
        positions = off.end_positions(end)
        self.table.mark_checkpointed(positions)
        if self.committer is not None:
            self.committer.submit(positions, epochs=off.end_epochs(end))

    def freeze_target(self) -> None:
        self._target, self._fetched_at = None, 0.0
        self._target = self._latest()[0]
        log.info("Trigger.AvailableNow: reading up to %s", off.to_json(self._target))

    def report_latest(self) -> dict | None:
        latest = self.table.snapshot().column("latest")
        self.write_report()
        return off.batch_offset(latest) if latest else None

    # -- reporting -------------------------------------------------------------------------
    def write_report(self) -> None:
        """The source's view for the runner (a different process): atomic JSON file."""
        if not self.options.report_path:
            return
        snap = self.table.snapshot()
        dead = self._dead_letters.counts() if self._dead_letters else {}
        key = (snap.version, self._started_fresh, id(self._fresh_start), sum(dead.values()))
        if key == self._reported_version:
            return  # reportLatestOffset runs ~85 times a second when idle
        self._reported_version = key
        report = source_report.report_of(
            snap, self._started_fresh, self._fresh_start, dead, self.committer is not None
        )
        source_report.write(self.options.report_path, report)

    def close(self, timeout: float = 5.0) -> None:
        self._closed.set()
        if self.committer is not None:
            self.committer.close(timeout)
        self.write_report()
        self.metadata.close()
        if self._dead_letters is not None:
            self._dead_letters.close()


def _log_to_stderr() -> None:
    """The runner process Spark spawns has no logging set up; our INFO lines (start
    decisions, discovered partitions) belong in the driver log."""
    logger = logging.getLogger("spark_app")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _is_spark_source_runner() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (
        threading.current_thread() is threading.main_thread()
        and spec is not None
        and spec.name.endswith("python_streaming_source_runner")
    )


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def describe_start(decisions: dict[TopicPartition, StartDecision]) -> str:
    """'committed offsets for orders-0, orders-1; earliest for orders-2' style summary."""
    by_origin: dict[str, list[TopicPartition]] = {}
    for tp, decision in sorted(decisions.items()):
        by_origin.setdefault(decision.origin, []).append(tp)
    return "; ".join(f"{origin} for {_names(tps)}" for origin, tps in by_origin.items())
