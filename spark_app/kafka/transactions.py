"""One Kafka transaction that writes records and commits the progress they cover.

Shared by the dead-letter topic (`spark_app.sinks.dead_letter`) and the exactly-once Kafka sink
(`spark_app.sinks.kafka_eos_sink`): Kafka's own read-process-write pattern. A writer is named by a
`transactional.id` that is stable for the unit of work it owns (a job's source partition),
so that:

* `open()` fences every earlier writer with that id (a retried task, a zombie of a lost
  executor, a killed driver's task) and aborts the transaction it left open: its records
  never reach a `read_committed` reader, and its commit, if it still tries one, fails;
* the progress (an offset and a short text) is committed to a progress group in the same
  transaction as the records: read back with `progress()`, it says exactly which output
  is committed, and a replay of the same work can be skipped (the caller's decision).

A step that fails raises `TransactionError` (after an abort): the task fails and Spark
retries it; the batch is not done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from spark_app.api.sink_rules import Progress
from spark_app.kafka.retry import Attempts, GaveUp, retrying

__all__ = [
    "Progress",
    "TransactionError",
    "TransactionalWriter",
    "produce",
    "progress_reader",
    "read_progress",
]

T = TypeVar("T")


# A writer lives for one task, so its first calls are its cost. librdkafka connects to a broker
# it learned from the metadata only once something needs it, and its producer asks for a
# transaction coordinator only when one is up: a race its 500 ms coordinator timer ends. With
# every broker connected at once, opening a writer took 18 ms instead of 178 on average, 58
# at most instead of 1070 (bench/kafka_sink_bench.py: writer_open_ms).
_EAGER_CONNECTIONS = {"enable.sparse.connections": False}


class TransactionError(RuntimeError):
    pass


def produce(producer: Any, topic: str, value: Any, key: Any = None, headers: Any = None) -> None:
    """One record into the producer's queue; a full queue is served, then tried again."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers)
            producer.poll(0)
            return
        except BufferError:  # local queue full: serve delivery callbacks, then retry
            producer.poll(0.1)


class TransactionalWriter:
    """A transactional producer (`transactional_id`) and a reader of the progress group it
    commits to (`progress_group`), both on the cluster `client` reaches. Every call waits at
    most `timeout_s`; `transaction_timeout_ms` bounds how long an open transaction of a dead
    writer can hold `read_committed` readers back (the broker aborts it then)."""

    def __init__(
        self,
        client: Mapping[str, str],
        transactional_id: str,
        progress_group: str,
        timeout_s: float,
        transaction_timeout_ms: int,
    ):
        from confluent_kafka import Producer

        self.transactional_id = transactional_id
        self.timeout_s = timeout_s
        self.producer = Producer(
            {
                "linger.ms": 5,
                **_EAGER_CONNECTIONS,
                **client,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": transaction_timeout_ms,
                "log_level": 3,
            }
        )
        self.progress_group = progress_group
        self.progress_reader = _progress_consumer(client, progress_group)

    def _retried(self, call: Callable[[float], T]) -> T:
        """`call(timeout)` again while its failure is transient (a coordinator or leader
        moving, a timed-out request), within `timeout_s` in all (`spark_app.kafka.retry`);
        librdkafka allows each of these transactional calls to be retried so. Each attempt
        may take what is left: a commit that is slow is not a commit that is stuck."""
        whole = Attempts(
            deadline_s=self.timeout_s, first_s=self.timeout_s, longest_s=self.timeout_s
        )
        try:
            return retrying(call, whole)
        except GaveUp as exc:
            raise exc.last from None

    def open(self) -> None:
        """Fences earlier writers of this id and aborts what they left open."""
        self._retried(self.producer.init_transactions)

    def progress(self, topic: str, partition: int) -> Progress:
        return self._retried(
            lambda left: read_progress(
                self.progress_reader, self.progress_group, topic, partition, left
            )
        )

    def commit(
        self, write: Callable[[Any], None], topic: str, partition: int, progress: Progress
    ) -> None:
        """`write(producer)`'s records and `progress` (for `topic`[`partition`] in the
        progress group), in one transaction; aborted on any failure, which is raised."""
        from confluent_kafka import TopicPartition

        self.producer.begin_transaction()
        try:
            write(self.producer)
            handled = TopicPartition(topic, partition, progress.offset, progress.metadata)
            metadata = self.progress_reader.consumer_group_metadata()
            self._retried(
                lambda left: self.producer.send_offsets_to_transaction([handled], metadata, left)
            )
            self._retried(self.producer.commit_transaction)
        except Exception:
            # fenced or gone, the abort fails too: the next writer's open() aborts it
            with contextlib.suppress(Exception):
                self.producer.abort_transaction(self.timeout_s)
            raise

    def close(self) -> None:
        self.progress_reader.close()


def _progress_consumer(client: Mapping[str, str], group: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **_EAGER_CONNECTIONS,
            **client,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",  # an open transaction's offsets wait
            "log_level": 3,
        }
    )


def read_progress(
    consumer: Any, group: str, topic: str, partition: int, timeout_s: float
) -> Progress:
    """The progress group `group` (`consumer`'s) committed for `topic`[`partition`]; -1: none."""
    from confluent_kafka import TopicPartition

    [done] = consumer.committed([TopicPartition(topic, partition)], timeout=timeout_s)
    if done.error is not None:
        raise TransactionError(f"reading the progress of group {group}: {done.error}")
    return Progress(done.offset if done.offset >= 0 else -1, done.metadata or "")


def progress_reader(
    client: Mapping[str, str], timeout_s: float
) -> Callable[[str, str, int], Progress]:
    """`read(group, topic, partition)`: a progress group's committed progress, through one
    short-lived consumer per group (read_committed: an open transaction's is not yet)."""

    def read(group: str, topic: str, partition: int) -> Progress:
        consumer = _progress_consumer(client, group)
        try:
            return read_progress(consumer, group, topic, partition, timeout_s)
        finally:
            consumer.close()

    return read
