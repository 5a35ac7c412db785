"""The exactly-once Kafka sink (`deliveryGuarantee: exactly-once`): the output of each source
partition's range in a batch is written by one Kafka transaction, which commits the range's
end as its progress (`spark_app.kafka.transactions`, shared with the dead-letter topic).

* Who writes: a producer whose `transactional.id` names the job (its checkpoints' root, so
  stable across epochs) and the source partition (`transactional_id`). A retried task, a
  restored batch's task and a redeployed epoch's task of that partition take the same id:
  opening it fences every earlier writer (a zombie on a lost executor cannot commit) and
  aborts what a dead one left open.
* What is committed with the records: offset = the range's end, metadata = this checkpoint
  (`checkpoint_id`), in the progress group named like the writer, on the sink's cluster
  (keyed by the sink topic's partition 0, which exists there even when the source is on
  another cluster).
* Replays: Spark replays batch N of a checkpoint with the same ranges; a range whose output
  this checkpoint's query committed already is skipped (`already_committed`). A new epoch
  (a redeploy) starts where the group is, which the catch-up (rule 9) moved to the sink's
  progress first (`spark_app.runner.eos_progress`): it writes on from there.
* Which range a task writes: told by the read in the same task (`spark_app.sinks.task_ranges`); a
  query whose output mixes source partitions (a shuffle) is refused, naming the setting.

A `read_committed` consumer of the topic sees each record's output once; the group's offsets
move only after `commits/N` (rule 3), so never past committed output.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_app.api.sink_rules import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    PROGRESS_PARTITION,
    TIMEOUT_FIELD,
    already_committed,
    transactional_id,
)
from spark_app.formats.value_encoder import ValueEncoder
from spark_app.kafka.transactions import Progress, TransactionalWriter, produce
from spark_app.sinks import sink_tally, task_ranges
from spark_app.sinks.kafka_sink import KafkaSinkError, encoded
from spark_app.sinks.task_ranges import TaskRange

CRASH_AFTER_COMMIT_ENV = "STREAMJOB_TEST_CRASH_AFTER_KAFKA_COMMIT"
_STEP_TIMEOUT_S = 60.0  # one client call (open, progress, commit) before the task fails
GUARANTEE_FIELD = "spec.job.sink.deliveryGuarantee"


@dataclass(frozen=True)
class EosSinkOptions:
    topic: str
    client: Mapping[str, str]
    prefix: str
    checkpoint: str
    transaction_timeout_ms: int
    tally_path: str = ""  # the run's counts (spark_app/sinks/sink_tally.py); none: uncounted

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> EosSinkOptions:
        lower = {k.lower(): v for k, v in options.items()}
        client = {k[6:]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        for name in ("topic", "transactionalIdPrefix", "checkpointId"):
            if not lower.get(name.lower()):
                raise KafkaSinkError(f"option {name} is required for the exactly-once kafka sink")
        if not client.get("bootstrap.servers"):
            raise KafkaSinkError("option kafka.bootstrap.servers is required for the kafka sink")
        timeout = lower.get("transactiontimeoutms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
        if not timeout.isdigit():
            raise KafkaSinkError(f"{TIMEOUT_FIELD}: {timeout!r} is not a whole number of ms")
        return cls(
            lower["topic"],
            client,
            lower["transactionalidprefix"],
            lower["checkpointid"],
            int(timeout),
            lower.get("tallypath", ""),
        )


@dataclass
class SinkTaskResult(WriterCommitMessage):
    topic: str
    partition: int
    records: int
    skipped: bool  # a replayed range whose output was committed already


class ExactlyOnceKafkaWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str]):
        self.options = EosSinkOptions.parse(options)
        self.encoder = ValueEncoder.of_options(options)  # None: the value as it is

    def write(self, iterator: Iterator) -> SinkTaskResult:
        batches = iter(iterator)
        first = next(batches, None)  # the read of this task has begun: its range is told
        try:
            task_range = task_ranges.the_one(task_ranges.claim())
        except task_ranges.NoTaskRange as exc:
            raise KafkaSinkError(
                f"{GUARANTEE_FIELD}: exactly-once writes the output of each source partition in "
                f"its own transaction, but {exc}: remove the shuffle from spec.job.sql or the "
                "transform, or set deliveryGuarantee: at-least-once"
            ) from None
        o = self.options
        writer = TransactionalWriter(
            o.client,
            transactional_id(o.prefix, task_range.topic, task_range.partition),
            transactional_id(o.prefix, task_range.topic, task_range.partition),
            _STEP_TIMEOUT_S,
            o.transaction_timeout_ms,
        )
        try:
            try:
                writer.open()
                done = writer.progress(o.topic, PROGRESS_PARTITION)
            except Exception as exc:
                raise KafkaSinkError(
                    f"the writer of {task_range.topic}[{task_range.partition}]'s output to "
                    f"{o.topic} could not start its transactions or read its progress ({exc}); "
                    "the task fails and Spark retries it"
                ) from exc
            if already_committed(done, o.checkpoint, task_range):
                for _ in batches:  # the read ends as it does in every task (it is rare)
                    pass
                return SinkTaskResult(task_range.topic, task_range.partition, 0, True)
            count = self._commit(writer, task_range, first, batches)
            return SinkTaskResult(task_range.topic, task_range.partition, count, False)
        finally:
            writer.close()

    def _commit(self, writer: TransactionalWriter, task_range: TaskRange, first, rest) -> int:
        o, count, began = self.options, 0, time.monotonic()

        def write(producer) -> None:
            nonlocal count
            batch = first
            while batch is not None:
                count += _produce_batch(producer, o.topic, batch, self.encoder)
                batch = next(rest, None)

        try:
            writer.commit(
                write, o.topic, PROGRESS_PARTITION, Progress(task_range.end, o.checkpoint)
            )
        except KafkaSinkError:
            raise
        except Exception as exc:
            took = time.monotonic() - began
            late = took * 1000 >= o.transaction_timeout_ms
            hint = (
                f"it ran {took:.0f}s, past {TIMEOUT_FIELD} ({o.transaction_timeout_ms} ms): the "
                "broker aborted it; raise the timeout or lower source.maxOffsetsPerTrigger"
                if late
                else "the task fails and Spark retries it"
            )
            raise KafkaSinkError(
                f"the transaction writing the output of {task_range.topic}[{task_range.partition}] "
                f"offsets {task_range.start}-{task_range.end} to {o.topic} did not commit "
                f"({exc}); {hint}"
            ) from exc
        return count

    def commit(self, messages: list, batchId: int) -> None:
        results = [m for m in messages if isinstance(m, SinkTaskResult)]
        sink_tally.add(
            self.options.tally_path,
            transactions=sum(1 for r in results if not r.skipped),
            replaysSkipped=sum(1 for r in results if r.skipped),
            records=sum(r.records for r in results),
        )
        if os.environ.get(CRASH_AFTER_COMMIT_ENV) == str(batchId):
            _crash_the_driver()  # a test's crash between the sink's transactions and commits/N

    def abort(self, messages: list, batchId: int) -> None:
        # a task's transaction is committed or aborted by the task (or its successor)
        sink_tally.add(self.options.tally_path, batchesAborted=1)


def _crash_the_driver() -> None:
    """SIGKILL to the runner's process group (its JVM with it), as a node loss would. This
    worker runs under PySpark's daemon, in a process group of its own: the runner's is the
    first one up the parents (Linux' /proc)."""
    own, pid = os.getpgid(0), os.getpid()
    while pid > 1 and os.getpgid(pid) == own:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])  # the parent's pid
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    os.killpg(own, signal.SIGKILL)


def _produce_batch(producer, topic: str, batch, encoder: ValueEncoder | None) -> int:
    names = batch.schema.names
    if "value" not in names:
        raise KafkaSinkError(f"the kafka sink needs a value column (binary or string); got {names}")
    values = encoded(encoder, batch.column("value").to_pylist())
    keys = batch.column("key").to_pylist() if "key" in names else [None] * len(values)
    headers = batch.column("headers").to_pylist() if "headers" in names else [None] * len(values)
    for key, value, header in zip(keys, values, headers, strict=True):
        produce(producer, topic, value, key, _headers(header))
    return len(values)


def _headers(raw) -> list | None:
    """A headers column as the source reads it: a list of {key, value} structs."""
    if not raw:
        return None
    return [(h["key"], h["value"]) for h in raw]
