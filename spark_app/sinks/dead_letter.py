"""The dead-letter topic: source records that cannot be decoded, each written exactly once.

A dead record keeps its original key, value and headers, and gains headers naming where it
came from and why it could not be read (`streamingjob.*`, below), so a consumer of the
dead-letter topic can repair it and produce it back.

Exactly once, with Kafka's own read-process-write transactions (`spark_app.kafka.transactions`,
which the exactly-once Kafka sink shares). The dead records of one source partition are
written by a transactional producer whose `transactional.id` names the job and that
partition, and the same transaction commits, for a progress group of the job
(`<group>.dead-letter`), the source offset after the last record it handled. So:
* a dead record below the progress offset was written by a committed transaction: skipped
  (a batch re-read after a restore, a redeploy from older committed offsets, a retried task);
* a writer that died mid-transaction is fenced by the next one with the same id, whose
  `init_transactions` aborts the open transaction: its records never reach a
  `read_committed` consumer (the dead-letter topic's consumers must read that way).
A transaction that fails raises: the task fails and Spark retries it, the batch is not done.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from spark_app.api.dead_letter_options import DeadLetterTarget
from spark_app.formats.poison import DeadRecord
from spark_app.kafka.transactions import Progress, TransactionalWriter, produce

log = logging.getLogger("spark_app.source.source")

# how long one transaction step may take before the task fails (and is retried)
_TIMEOUT_S = 60.0
HEADER_PREFIX = "streamingjob."


class DeadLetterError(RuntimeError):
    pass


def dead_letter_headers(record: DeadRecord, target: DeadLetterTarget) -> list:
    """The record's own headers, then where it came from and why it is here."""
    named = {
        "source.topic": record.topic,
        "source.partition": record.partition,
        "source.offset": record.offset,
        "source.timestamp": record.timestamp,
        "error.reason": record.reason,
        "error.column": record.column,
        "error.message": record.message,
        "job": target.job,
        "epoch": target.epoch,
    }
    ours = [(HEADER_PREFIX + k, str(v).encode()) for k, v in named.items() if v is not None]
    return [*record.headers, *ours]


def transaction_of(
    records: list[DeadRecord],
    progress: Progress,
    end: int,
    read: str = "",
    kept_below: int | None = None,
) -> tuple[list[DeadRecord], Progress] | None:
    """What one partition's dead-letter transaction holds, the pure part of
    `write_dead_records` (the simulation runs it too): the dead records no committed
    transaction wrote (at or past the partition's progress offset; negative: none committed)
    and the progress committed with them (`end`: the read handled up to there). None:
    nothing to write, the progress stays.

    `read` names the read (`read_name`). One that began below its batch's start (an unclean
    election truncated the log, failOnDataLoss=false, rule 16) reads another leader's records
    below the progress than those it counts, unless that same read committed it (an earlier
    attempt): so only then does the progress skip any. `kept_below`: where the log the
    progress was made in ends now, when a later leader may have written below it
    (`progress_epoch_to_check`); the progress counts none of the records from there on."""
    diverged = read.startswith(_DIVERGED)
    floor = progress.offset if not diverged or progress.metadata == read else -1
    if kept_below is not None:
        floor = min(floor, kept_below)
    new = [r for r in records if r.offset >= max(floor, 0)]
    return (new, Progress(end, read)) if new else None


_DIVERGED = "diverged "
_EPOCH = re.compile(r"(?:^| )epoch (\d+)$")


def read_name(planned_start: int, first_read: int, end_epoch: int | None = None) -> str:
    """The name `transaction_of` knows a read by, committed with the progress it makes: a
    read that began at `first_read`, below the batch's `planned_start` (a divergence point),
    says so; and the leader epoch its batch's end was planned in (the records it handles are
    of that leader's log)."""
    parts = [f"{_DIVERGED}{planned_start}->{first_read}"] if first_read < planned_start else []
    return " ".join(parts + ([f"epoch {end_epoch}"] if end_epoch is not None else []))


def progress_epoch_to_check(progress: Progress, records: list[DeadRecord], read: str) -> int | None:
    """The leader epoch to ask where its log ends now before the progress skips any of
    `records` (semantics rule 16): the progress's, when this read was planned in a later one
    (a leader elected since; after an unclean election its records below the progress are
    not those the progress counts) and some record lies below it. None: no question."""
    made_in, now = _EPOCH.search(progress.metadata), _EPOCH.search(read)
    if made_in is None or now is None or int(now.group(1)) <= int(made_in.group(1)):
        return None
    below = any(r.offset < progress.offset for r in records)
    return int(made_in.group(1)) if below else None


def write_dead_records(
    target: DeadLetterTarget,
    topic: str,
    partition: int,
    records: list[DeadRecord],
    end: int,
    read: str = "",
    epoch_end: Callable[[int, int], int] | None = None,
) -> int:
    """Writes the dead records of one source partition read up to offset `end` (exclusive)
    that no committed transaction wrote before (`read`: see `transaction_of`); returns how
    many it wrote. `epoch_end(epoch, offset)`: `offset`, or where the source's log of that
    leader epoch ends now if below it (`progress_epoch_to_check`)."""
    writer = TransactionalWriter(
        target.client,
        target.transactional_id(topic, partition),
        target.progress_group,
        _TIMEOUT_S,
        int(_TIMEOUT_S * 1000),
    )
    try:
        writer.open()  # fences and aborts an earlier writer's
        progress = writer.progress(topic, partition)
        epoch = progress_epoch_to_check(progress, records, read)
        kept = None if epoch is None or epoch_end is None else epoch_end(epoch, progress.offset)
        transaction = transaction_of(records, progress, end, read, kept)
        if transaction is None:
            return 0
        new, handled = transaction

        def write(producer: Any) -> None:
            for r in new:
                produce(producer, target.topic, r.value, r.key, dead_letter_headers(r, target))

        writer.commit(write, topic, partition, handled)
        return len(new)
    except Exception as exc:
        raise DeadLetterError(
            f"could not write {len(records)} dead record(s) of {topic}[{partition}] to the "
            f"dead-letter topic {target.topic}: {exc}"
        ) from exc
    finally:
        writer.close()


class DeadLetterTally:
    """The driver's count of this job's dead records by reason, since the run started: it
    reads the dead-letter topic as its consumers do (read_committed), from the log ends it
    found at the start, and counts the copies that name this job. Non-blocking; a Kafka
    problem is logged and counted again at the next call (the count is for status, never a
    reason to stop the job)."""

    _BATCH = 5000  # copies read per call at most: a report is never held up for long
    _RETRY_S = 10.0  # between looks for a topic that does not exist yet, or a failed start
    _EVERY_S = 1.0  # the report asks ~85 times a second when idle: read at most this often

    def __init__(self, target: DeadLetterTarget):
        self.target = target
        self.by_reason: dict[str, int] = {}
        self._consumer: Any = None
        self._from_start = False  # the topic did not exist when the run began: all is new
        self._began_ms = int(time.time() * 1000)  # the run's start, as record timestamps
        self._tried = False  # a start was tried: a later one finds the run's start by time
        self._next_start = 0.0
        self._next_read = 0.0

    def counts(self) -> dict[str, int]:
        if time.monotonic() < self._next_read:
            return dict(self.by_reason)
        self._next_read = time.monotonic() + self._EVERY_S
        try:
            self._read_new()
        except Exception as exc:
            log.warning("could not count the dead-letter topic %s: %s", self.target.topic, exc)
        return dict(self.by_reason)

    def _read_new(self) -> None:
        if self._consumer is None:
            if time.monotonic() < self._next_start:
                return
            self._next_start = time.monotonic() + self._RETRY_S
            self._consumer = self._start()
            if self._consumer is None:
                return  # the topic does not exist yet: no copy was written
        job = self.target.job.encode()
        for message in self._consumer.consume(self._BATCH, 0):
            if message.error() is not None:
                continue
            headers = dict(message.headers() or [])
            if headers.get(HEADER_PREFIX + "job") == job:
                reason = (headers.get(HEADER_PREFIX + "error.reason") or b"unknown").decode()
                self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def _start(self) -> Any:
        """A consumer from the log ends at the run's start (found again by time when the first
        start failed: the broker away, slow), or from the beginning of a topic that did not
        exist then; None while it does not exist."""
        from confluent_kafka import Consumer, TopicPartition

        retried, self._tried = self._tried, True
        consumer = Consumer(
            {
                **self.target.client,
                "group.id": f"{self.target.progress_group}.tally",  # never commits
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "log_level": 3,
            }
        )
        topic = consumer.list_topics(self.target.topic, timeout=10).topics.get(self.target.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            consumer.close()
            self._from_start = True
            return None
        start = [TopicPartition(self.target.topic, p, 0) for p in topic.partitions]
        if not self._from_start:
            ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in start]
            if retried:  # copies may have come since the run began: its first one by time
                times = [TopicPartition(tp.topic, tp.partition, self._began_ms) for tp in start]
                found = consumer.offsets_for_times(times, timeout=10)
                ends = [
                    t.offset if t.offset >= 0 else end for t, end in zip(found, ends, strict=True)
                ]
            for tp, offset in zip(start, ends, strict=True):
                tp.offset = offset
        consumer.assign(start)
        return consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
