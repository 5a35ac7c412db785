"""What a simulated driver (driver.py) tells: failOnDataLoss, the driver's check while
planning and an executor's read by the runner's own rules (`spark_app.source.data_loss`,
`partition_range.offsets_lost`), with what they tell recorded for the checker; and its report
(throughput after each batch, the offsets it skipped as lost)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark_app.api.manifest import RunnerManifest
from spark_app.api.offsets import Epochs, Positions
from spark_app.source import data_loss
from spark_app.source.partition_range import (
    DataLossError,
    KafkaInputPartition,
    log_truncated,
    no_progress,
    offsets_lost,
    written_after_the_plan,
)

from .data import Record
from .driver_world import World

EXIT_FAILED = 1
POLL_TIMEOUT_S = 120.0  # pollTimeoutMs, as the job's manifests leave it


class LossRules:
    """Mixed into driver.Driver, whose fields these are."""

    manifest: RunnerManifest | None
    uid: str
    pod: str
    term_message: str
    loss_seen: set[tuple[tuple[str, int], int]]
    loss_skipped: int
    start_epochs: Epochs
    end_epochs: Epochs
    stalled_since: float | None
    counted_lost: bool

    if TYPE_CHECKING:  # the Driver's own (and Reporting's)

        def exit(self, code: int) -> None: ...

        def _write_report(self, w: World) -> bool: ...

    def _fails_on_data_loss(self) -> bool:
        assert self.manifest is not None
        return self.manifest.spec.job.source.fail_on_data_loss

    def _judge_losses(self, w: World, begin: Positions) -> bool:
        """The driver's check while planning (data_loss): fails the query, or counts what
        retention deleted before it was read (once per position) in the run's report."""
        found = data_loss.losses(begin, w.kafka.end, w.kafka.low)
        try:
            data_loss.judge(found, self._fails_on_data_loss())
        except DataLossError as exc:
            return self._lost_data(w, exc)
        new = [loss for loss in found if (loss.tp, loss.offset) not in self.loss_seen]
        for loss in new:
            self.loss_seen.add((loss.tp, loss.offset))
            self.loss_skipped += loss.skipped
            # deleted records (a log that ends before the position has none to tell)
            last = min(loss.offset + loss.skipped, w.kafka.end[loss.tp])
            w.kafka.lost_told.update(w.kafka.records({loss.tp: loss.offset}, {loss.tp: last}))
        if new and self._write_report(w):
            w.failed(self, "OffsetsSkipped")  # the DataLoss condition and an Event name it
        return True

    def _read(self, w: World, start: Positions, end: Positions) -> list[Record] | None:
        """A task's read of its ranges: its start validated with the leader epoch kept with
        it (a log truncated below it: partition_range.log_truncated), then what retention
        deleted since the plan (partition_range.offsets_lost); either fails the query, or is
        read on from the divergence or skipped with a line in the executor's log. It ends at
        a later leader's first record below its end. None: the driver failed, or the log
        does not reach the range's end yet (the read waits)."""
        rows: list[Record] = []
        for tp, stop in sorted(end.items()):
            if stop <= start.get(tp, 0):
                continue  # no task: the source plans none for an empty range
            p = KafkaInputPartition(
                topic=tp[0],
                partition=tp[1],
                start=start.get(tp, 0),
                end=stop,
                client_config={},
                fail_on_data_loss=self._fails_on_data_loss(),
                start_epoch=self.start_epochs.get(tp),
                end_epoch=self.end_epochs.get(tp),
            )
            try:
                first = self._validated(w, p)
            except DataLossError as exc:
                self._lost_data(w, exc)
                return None
            stop = max(first, self._end_before_later_leaders(w, p))
            if w.kafka.end[tp] < stop:  # the read waits for records up to its end
                if not self._ended_with_its_epoch(w, p):
                    return None
                stop = w.kafka.end[tp]
            self.stalled_since = None
            span = w.kafka.records({tp: first}, {tp: stop})
            gone = {r for r in span if w.kafka.deleted(r)}
            w.kafka.lost_logged.update(gone - w.kafka.lost_told)
            rows += [r for r in span if r not in gone]
        return rows

    @staticmethod
    def _end_before_later_leaders(w: World, p: KafkaInputPartition) -> int:
        """Where the read of `p` ends: at the first record it meets below its end of a
        leader elected after the plan (a later epoch's first offset, where the log holds
        one), else at its end."""
        tp = (p.topic, p.partition)
        at = p.end if p.end_epoch is None else w.kafka.epoch_end(tp, p.end_epoch)
        if at < min(p.end, w.kafka.end[tp]) and written_after_the_plan(
            p, w.kafka.written_in(tp, at)
        ):
            return at
        return p.end

    def _ended_with_its_epoch(self, w: World, p: KafkaInputPartition) -> bool:
        """A read stalled at the log end, short of its planned end, waits pollTimeoutMs, then
        asks where its plan's leader's log ends and ends there if that is at or below its
        position (`leader_epochs.ended_with_its_epoch`); else it fails (no progress)."""
        if self.stalled_since is None:
            self.stalled_since = w.now
        if w.now - self.stalled_since <= POLL_TIMEOUT_S:
            return False
        tp, self.stalled_since = (p.topic, p.partition), None
        if p.end_epoch is None or min(p.end, w.kafka.epoch_end(tp, p.end_epoch)) > w.kafka.end[tp]:
            w.log(f"{self.pod}: {no_progress(p, w.kafka.end[tp])}")
            self.exit(EXIT_FAILED)
            return False
        return True

    def _validated(self, w: World, p: KafkaInputPartition) -> int:
        """Where the read of `p` starts: the broker's OffsetsForLeaderEpoch for its start's
        epoch, then its log start (each raising DataLossError per failOnDataLoss)."""
        tp, first = (p.topic, p.partition), p.start
        if p.start_epoch is not None:
            divergence = w.kafka.epoch_end(tp, p.start_epoch)
            if divergence < first:
                log_truncated(p, first, divergence)
                first = divergence
        low = w.kafka.low[tp]
        if first < min(low, p.end):
            offsets_lost(p, first, low)
        return first

    def _lost_data(self, w: World, exc: DataLossError) -> bool:
        """The query fails (failOnDataLoss=true); the termination message names the loss."""
        w.log(f"{self.pod}: {exc}")
        self.term_message = f"DataLossError: {exc}"
        w.data_loss_held.add(self.uid)
        self.exit(EXIT_FAILED)
        return False


class Reporting:
    """Mixed into driver.Driver: the runner's report (report.json)."""

    job: str
    executors: int
    started: dict[str, Any]
    throughput: dict[str, int]
    loss_skipped: int

    def _count(self, w: World, rows: int) -> None:
        """The batch in the report's totals: each record costs an executor a second of task
        time, the executors share a batch (what the autoscaler's model reads)."""
        t = self.throughput
        execution = 1000 * rows // self.executors + 100
        t["batches"] += 1
        t["rows"] += rows
        t["executionMs"] += execution
        t["busyMs"] += execution
        t["taskMs"] = t.get("taskMs", 0) + 1000 * rows
        self._write_report(w)

    def _write_report(self, w: World) -> bool:
        report = {**self.started, "throughput": dict(self.throughput)}
        return w.report(self.job, "report.json", report | self._loss_report())

    def _loss_report(self) -> dict[str, int]:
        return {"dataLossSkippedOffsets": self.loss_skipped} if self.loss_skipped else {}
