"""A driver process as the runner behaves (spark_app/runner/runner.py), one stage per event.

Its arguments are parsed by the runner's own `parse_args` from the pod the operator built;
its manifest is the job ConfigMap's `job.yaml` as it was when the process started. Where
the runner's logic decides, this calls it: the start point (`start.start_point` over the
simulated checkpoint), the catch-up (`durable_batch` with the sink's own batch by
`group_offsets.sink_batch`, `ahead_of_group`), the start offsets (`offsets.resolve_start`),
the final commit's durable batch, what goes to the dead-letter topic (`dead_letter.
transaction_of`), what failOnDataLoss does with records retention deleted (losses.py). What
Spark does between them (plan a batch, send its poison records to the
dead-letter topic, write the sink, write `commits/N`) is modelled, with a crash possible at
every stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from spark_app.api import offsets as off
from spark_app.api.dead_letter_options import DeadLetterTarget
from spark_app.api.manifest import RunnerManifest, load_manifest
from spark_app.api.offsets import Epochs, Positions
from spark_app.formats.poison import MALFORMED_PAYLOAD
from spark_app.runner.checkpoint_log import ahead_of_group
from spark_app.runner.group_offsets import newest_durable
from spark_app.runner.runner import parse_args
from spark_app.runner.start import start_point
from spark_app.sinks import dead_letter
from streamingjob_operator.api.naming import LABEL_JOB

from .data import Checkpoint
from .driver_world import World
from .fresh_start import FreshStart
from .kafka_out import exactly_once, ranges
from .losses import LossRules, Reporting

EXIT_CATCH_UP_FAILED = 5


@dataclass
class Driver(FreshStart, LossRules, Reporting):
    pod: str
    uid_of_pod: str
    job: str  # the job's name
    uid: str  # the job's uid (the incarnation this driver belongs to)
    node: str
    argv: list[str]
    manifest_yaml: str
    stage: str = "init"
    exit_code: int | None = None
    term_reason: str = ""  # the container's termination reason and message, when not plain
    term_message: str = ""
    stop_requested: bool = False
    counted_lost: bool = False  # its node froze for a grace: the operator may replace it
    # the query
    epoch: int = 0
    attempt: int = 0
    location: str = ""
    previous: list[str] = field(default_factory=list)
    wait_for_go: bool = False
    go_configmap: str = ""  # where the go is read (the report ConfigMap without it)
    manifest: RunnerManifest | None = None
    start_path: str = ""
    batch: int = 0  # the batch being run
    batch_start: Positions = field(default_factory=dict)
    batch_end: Positions = field(default_factory=dict)
    # the leader epochs kept with the batch's start and end (rule 16)
    start_epochs: Epochs = field(default_factory=dict)
    end_epochs: Epochs = field(default_factory=dict)
    pending_commit: Positions | None = None
    pending_epochs: Epochs = field(default_factory=dict)
    dead_done: set[tuple[str, int]] = field(default_factory=set)  # the batch's transactions
    reading: bool = False  # the query runs (reads, writes the sink or commits)
    sink_tasks: int = 0  # the batch's ranges the exactly-once Kafka sink has written
    caught_up_from: str = ""  # the earlier checkpoint whose durable batch it committed
    loss_seen: set[tuple[tuple[str, int], int]] = field(default_factory=set)  # (tp, offset)
    loss_skipped: int = 0  # offsets this run skipped as lost (failOnDataLoss=false)
    stalled_since: float | None = None  # its read made no progress since (rule 16)
    # the runner's report (report.json): its start, then its throughput after each batch
    started: dict[str, Any] = field(default_factory=dict)
    executors: int = 1
    throughput: dict[str, int] = field(
        default_factory=lambda: {"batches": 0, "rows": 0, "busyMs": 0, "executionMs": 0}
    )

    @classmethod
    def of_pod(cls, pod: dict[str, Any], job_yaml: str, uid: str, node: str) -> Driver:
        args: list[str] = pod["spec"]["containers"][0]["args"]
        parsed = parse_args(args[args.index("--manifest") :])
        d = cls(
            pod=pod["metadata"]["name"],
            uid_of_pod=pod["metadata"]["uid"],
            job=pod["metadata"]["labels"][LABEL_JOB],
            uid=uid,
            node=node,
            argv=args,
            manifest_yaml=job_yaml,
            epoch=parsed.epoch,
            attempt=parsed.attempt,
            location=parsed.checkpoint_location,
            previous=list(parsed.previous_checkpoint),
            wait_for_go=parsed.wait_for_go,
            go_configmap=parsed.go_configmap or parsed.report_configmap or "",
        )
        d.manifest = load_manifest(yaml.safe_load(job_yaml))
        return d

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    @property
    def group(self) -> str:
        assert self.manifest is not None
        return self.manifest.spec.job.source.group_id or ""

    def identity(self) -> dict[str, Any]:
        return {"pod": self.pod, "epoch": self.epoch, "attempt": self.attempt}

    # --- one stage ---------------------------------------------------------------------

    def step(self, w: World) -> None:
        """Runs the next stage; a stage whose write cannot be made yet is tried again."""
        getattr(self, f"_{self.stage.replace('-', '_')}")(w)

    def exit(self, code: int) -> None:
        self.exit_code, self.reading, self.stage = code, False, "exited"

    def _init(self, w: World) -> None:
        if self.stop_requested:
            return self.exit(0)
        if self.wait_for_go:
            if w.report(self.job, "handover.json", {**self.identity(), "state": "ready"}):
                self.stage = "waiting"
            return None
        self.stage = "start"
        return None

    def _waiting(self, w: World) -> None:
        if self.stop_requested:
            return self.exit(0)
        go = w.read_go(self.go_configmap)
        if go is not None and (go.get("pod"), go.get("epoch"), go.get("attempt")) == (
            self.pod,
            self.epoch,
            self.attempt,
        ):
            self.stage = "start"
        return None

    def _start(self, w: World) -> None:
        assert self.manifest is not None
        checkpoint = Checkpoint(w.files, self.location)
        start = start_point(checkpoint, self.location, self.manifest)
        self.start_path = start["startPath"]
        self.reading = True  # from here on the driver acts on the job's data
        self.started = {**self.identity(), **start}
        w.report(self.job, "report.json", self.started)
        if self.start_path == "restored":
            self.stage = "restore"
            self._commit_durable(w)  # the restored batch's end, where the group is behind
        elif self.previous and self._catches_up():
            self.stage = "catch-up"
        else:
            self.stage = "resolve"

    def _catches_up(self) -> bool:
        assert self.manifest is not None
        source = self.manifest.spec.job.source
        return source.commit_offsets_on_checkpoints and source.starting_offsets == "committed"

    def _catch_up(self, w: World) -> None:
        """The previous epochs' last durable batch reaches the group where it is ahead
        (group_offsets.catch_up); a failure fails the start (exit 5)."""
        manifest = self.manifest
        assert manifest is not None
        location, batch = newest_durable(
            self.previous,
            lambda at: Checkpoint(w.files, at),
            lambda at: w.sinks.newest(manifest, at),
        )
        batch = w.sinks.topic.caught_up(manifest, w.files, location, batch)
        if batch is not None:
            if w.commit_fails():
                w.log(f"{self.pod}: catch-up commit failed: exit 5")
                return self.exit(EXIT_CATCH_UP_FAILED)
            ahead = ahead_of_group(batch.end, w.kafka.committed(self.group))
            w.kafka.commit(self.group, ahead, batch.epochs)
            self.caught_up_from = location
        self.stage = "resolve"
        return None

    def _restore(self, w: World) -> None:
        """Spark's restore: the newest planned batch is re-run when it has no commit entry,
        else the next one starts where it ended."""
        checkpoint = Checkpoint(w.files, self.location)
        newest = checkpoint.newest("offsets")
        assert newest is not None
        start, end = checkpoint.batch_range(newest)
        start_epochs, end_epochs = checkpoint.batch_epochs(newest)
        if checkpoint.has("commits", newest):
            self.batch, self.batch_start, self.start_epochs = newest + 1, end, end_epochs
            self.stage = "plan"
            # Spark's first latestOffset(start=end) hands it to the committer (rule 3), which
            # sends it again after a failure
            self.pending_commit, self.pending_epochs = dict(end), end_epochs
        else:
            self.batch, self.batch_start, self.batch_end = newest, start, end
            self.start_epochs, self.end_epochs = start_epochs, end_epochs
            self.stage = "dead-letter"

    def _plan(self, w: World) -> None:
        """Between batches: a stop request stops here; else the next batch is planned when
        there is anything to read (offsets/N)."""
        if self.stop_requested:
            self.stage = "final-commit"
            return
        self._group_commit(w)
        if not self._judge_losses(w, self.batch_start):
            return None
        limit = self.manifest.spec.job.source.max_offsets_per_trigger if self.manifest else None
        begin, begin_epochs = self.batch_start, self.start_epochs
        end, epochs = off.plan_end(begin, begin_epochs, w.kafka.end, w.kafka.epochs(), limit)
        if end == begin:
            return  # idle
        checkpoint = Checkpoint(w.files, self.location)
        first = self.batch == 0
        if not checkpoint.write_offsets(
            self.batch, end, begin if first else None, epochs, begin_epochs if first else {}
        ):
            return self.exit(1)  # another driver of the checkpoint planned it: the query fails
        self.batch_end, self.end_epochs = end, epochs
        self.stage = "dead-letter"

    def _dead_letter(self, w: World) -> None:
        """The batch's poison records to the dead-letter topic before the sink is written:
        per partition one transaction (value_decoder._decode_one), what it holds and the
        progress it commits decided by the runner's `dead_letter.transaction_of`; one per
        step, so that a kill may fall between two."""
        for tp in sorted(self.batch_end):
            if tp in self.dead_done:
                continue
            span = self._read(w, {tp: self.batch_start.get(tp, 0)}, {tp: self.batch_end[tp]})
            if span is None:
                return
            self.dead_done.add(tp)
            poison = [r for r in span if w.kafka.poison(r)]
            if not poison:
                continue
            target = DeadLetterTarget("dead-letter", {}, self.job, self.epoch, self.group)
            dead = [
                dead_letter.DeadRecord(t, p, o, None, None, None, MALFORMED_PAYLOAD, "poison")
                for t, p, o, _ in poison
            ]
            progress = w.dead_letter.committed(target.progress_group, tp)
            read = dead_letter.read_name(
                self.batch_start.get(tp, 0), span[0][2], self.end_epochs.get(tp)
            )
            epoch = dead_letter.progress_epoch_to_check(progress, dead, read)
            kept = None if epoch is None else min(progress.offset, w.kafka.epoch_end(tp, epoch))
            transaction = dead_letter.transaction_of(dead, progress, self.batch_end[tp], read, kept)
            if transaction is not None:
                rows, handled = transaction
                by_offset = {r[2]: r for r in poison}  # the records read
                copies = [by_offset[r.offset] for r in rows]
                w.dead_letter.commit(self.group, target.progress_group, tp, copies, handled)
            return
        self.dead_done = set()
        self.stage = "sink"

    def _sink(self, w: World) -> None:
        assert self.manifest is not None
        if exactly_once(self.manifest):  # one task's transaction per step: kills between
            tasks = ranges(self.batch_start, self.batch_end)
            if self.sink_tasks < len(tasks):
                task = tasks[self.sink_tasks]
                tp = (task.topic, task.partition)
                span = self._read(w, {tp: task.start}, {tp: task.end})
                if span is None:
                    return
                rows = [r for r in span if not w.kafka.poison(r)]
                w.sinks.add_range(self.manifest, self.location, task, rows)
                self.sink_tasks += 1
            if self.sink_tasks >= len(tasks):
                self.sink_tasks, self.stage = 0, "commit"
            return
        span = self._read(w, self.batch_start, self.batch_end)
        if span is None:
            return
        rows = [r for r in span if not w.kafka.poison(r)]
        w.sinks.add_batch(self.manifest, self.epoch, self.location, self.batch, rows)
        self.stage = "commit"

    def _commit(self, w: World) -> None:
        if not Checkpoint(w.files, self.location).write_commit(self.batch):
            return self.exit(1)  # another driver of the checkpoint committed it first
        w.data_loss_held.discard(self.uid)  # the job moves on
        self._count(w, sum(e - self.batch_start.get(tp, 0) for tp, e in self.batch_end.items()))
        # the committer's, sent asynchronously
        self.pending_commit, self.pending_epochs = dict(self.batch_end), self.end_epochs
        self.batch, self.batch_start = self.batch + 1, self.batch_end
        self.start_epochs = self.end_epochs
        self.stage = "plan"

    def _group_commit(self, w: World) -> None:
        if self.pending_commit is None:
            return
        if not self._catches_up_on_checkpoints():
            self.pending_commit = None
        elif not w.commit_fails():  # a failed one is sent again (committer.py) unless newer
            w.kafka.commit(self.group, self.pending_commit, self.pending_epochs)
            self.pending_commit = None

    def _catches_up_on_checkpoints(self) -> bool:
        return bool(self.manifest and self.manifest.spec.job.source.commit_offsets_on_checkpoints)

    def _final_commit(self, w: World) -> None:
        """After the query stopped: the last durable batch's end where ahead of the group."""
        self.pending_commit = None
        self._commit_durable(w)
        self.exit(0)

    def _commit_durable(self, w: World) -> None:
        """The checkpoint's last durable batch where ahead of the group
        (group_offsets.commit_durable); a failed commit is logged, never fatal."""
        if not self._catches_up_on_checkpoints():
            return
        batch = Checkpoint(w.files, self.location).durable_batch()
        if batch is not None and not w.commit_fails():
            ahead = ahead_of_group(batch.end, w.kafka.committed(self.group))
            w.kafka.commit(self.group, ahead, batch.epochs)
