"""The transactional writer the exactly-once Kafka sink and the dead-letter topic share
(spark_app/kafka/transactions.py), on a real broker, as the sink uses it: each writer (one per
source partition) commits its progress keyed by partition 0 of the sink topic, in a progress
group of its own, while its records go to any partition of that topic.

What must hold whatever the sink topic's partitions: the progress moves with the records of
every partition the transaction wrote, or not at all (an aborted or fenced transaction's
records stay unseen by read_committed readers and its progress stays), and two writers' progress
on the same key never mix (their groups differ)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka import KafkaException

from spark_app.api.sink_rules import (
    PROGRESS_PARTITION,
    Progress,
    checkpoint_id,
    transactional_id,
)
from spark_app.kafka.transactions import TransactionalWriter, progress_reader
from tests.support.kafka_tools import consume_to_end, new_topic

pytestmark = pytest.mark.integration

CHECKPOINT = checkpoint_id("file:///ckpt/test/orders/uid/epoch-1")


def _writer(bootstrap: str, prefix: str, source_partition: int) -> TransactionalWriter:
    name = transactional_id(prefix, "orders", source_partition)
    return TransactionalWriter({"bootstrap.servers": bootstrap}, name, name, 30.0, 130_000)


def _to(topic: str, partitions: list[int], tag: str):
    """`write(producer)`: one record per sink partition in `partitions`, valued `tag-p`."""

    def write(producer) -> None:
        for p in partitions:
            producer.produce(topic, value=f"{tag}-{p}".encode(), partition=p)

    return write


def test_progress_on_partition_0_moves_with_records_in_every_partition_or_not_at_all(kafka):
    topic = new_topic(kafka.bootstrap, partitions=3, prefix="out")
    prefix = f"streamingjob.orders.{uuid.uuid4().hex[:12]}"
    read = progress_reader({"bootstrap.servers": kafka.bootstrap}, 30.0)
    a, b = _writer(kafka.bootstrap, prefix, 0), _writer(kafka.bootstrap, prefix, 1)
    try:
        for writer in (a, b):
            writer.open()
        # each writer's records in every partition, its progress on the same key
        a.commit(_to(topic, [0, 1, 2], "a1"), topic, PROGRESS_PARTITION, Progress(100, CHECKPOINT))
        b.commit(_to(topic, [2, 1, 0], "b1"), topic, PROGRESS_PARTITION, Progress(40, CHECKPOINT))
        # a's next transaction writes to partitions 1 and 2 only, and fails before its commit
        with pytest.raises(RuntimeError, match="task failed"):

            def fails(producer) -> None:
                _to(topic, [1, 2], "a2")(producer)
                producer.flush(10)  # in the log, not committed
                raise RuntimeError("task failed")

            a.commit(fails, topic, PROGRESS_PARTITION, Progress(200, CHECKPOINT))
        # a zombie of b: a successor with the same id fences it, its commit fails
        b.producer.begin_transaction()
        _to(topic, [0, 2], "b2")(b.producer)
        successor = _writer(kafka.bootstrap, prefix, 1)
        successor.open()
        with pytest.raises(KafkaException, match=r"(?i)fenc"):
            b.producer.commit_transaction(10)
        assert successor.progress(topic, PROGRESS_PARTITION) == Progress(40, CHECKPOINT)
        successor.close()
    finally:
        a.close()
        b.close()
    groups = {w: transactional_id(prefix, "orders", p) for w, p in (("a", 0), ("b", 1))}
    assert read(groups["a"], topic, PROGRESS_PARTITION) == Progress(100, CHECKPOINT)
    assert read(groups["b"], topic, PROGRESS_PARTITION) == Progress(40, CHECKPOINT)
    seen = consume_to_end(kafka.bootstrap, topic, "read_committed")
    assert Counter((m.partition(), m.value().decode()) for m in seen) == Counter(
        (p, f"{tag}-{p}") for tag in ("a1", "b1") for p in range(3)
    )
    everything = consume_to_end(kafka.bootstrap, topic, "read_uncommitted")
    assert {m.value().decode() for m in everything} >= {"a2-1", "a2-2"}  # written, aborted
