"""Small, real Kafka operations for tests: topics, records with known ids, group offsets."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


def new_topic(
    bootstrap: str, partitions: int = 3, prefix: str = "t", replicas: int = 1, **config: str
) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, replicas, config=config)
    admin.create_topics([topic])[name].result(timeout=30)
    return name


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(timeout=30)


def produce(
    bootstrap: str, topic: str, ids: Iterable[int], partition: int | None = None, **config: object
) -> None:
    """Produces records whose value is {"id": n}; keys spread them over partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for n in ids:
        kwargs = {"partition": partition} if partition is not None else {}
        producer.produce(topic, key=str(n).encode(), value=json.dumps({"id": n}).encode(), **kwargs)
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    """The group's committed offsets (None: none); a group's coordinator still loading (a
    fresh broker, a group never asked about) is asked again for up to 30 s."""
    return {p: offset for p, (offset, _) in group_positions(bootstrap, group, topic).items()}


def group_positions(
    bootstrap: str, group: str, topic: str
) -> dict[int, tuple[int | None, int | None]]:
    """The group's committed offsets with the leader epoch committed beside each (None:
    none), as `group_offsets` asks for them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + 30
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        while True:
            try:
                answer = consumer.committed(
                    [TopicPartition(topic, p) for p in partitions], timeout=10
                )
                return {
                    tp.partition: (
                        tp.offset if tp.offset >= 0 else None,
                        tp.leader_epoch
                        if tp.leader_epoch is not None and tp.leader_epoch >= 0
                        else None,
                    )
                    for tp in answer
                }
            except KafkaException as exc:
                if time.monotonic() > deadline or exc.args[0].code() not in _COORDINATOR_NOT_READY:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


_COORDINATOR_NOT_READY = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}


def commit_may_retry(error: KafkaError) -> bool:
    """A commit refused for now: retriable, or the group's coordinator still loading (a
    fresh broker's offsets topic on a busy machine)."""
    return error.retriable() or error.code() in _COORDINATOR_NOT_READY


def commit_offsets(
    bootstrap: str,
    group: str,
    topic: str,
    offsets: dict[int, int],
    epochs: dict[int, int] | None = None,
) -> None:
    """Commits as a consumer of `group`, each offset with its leader epoch in `epochs` (as a
    reader commits) or none (as set by hand); a retriable refusal (the group's coordinator
    still loading on a busy broker) is retried for up to 30 s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    deadline = time.monotonic() + 30
    known = epochs or {}
    positions = [
        TopicPartition(topic, p, o, leader_epoch=known[p])
        if p in known
        else TopicPartition(topic, p, o)
        for p, o in offsets.items()
    ]
    try:
        while True:
            try:
                consumer.commit(offsets=positions, asynchronous=False)
                return
            except KafkaException as exc:
                if time.monotonic() > deadline or not commit_may_retry(exc.args[0]):
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def log_end_offsets(
    bootstrap: str, topic: str, isolation: str = "read_committed"
) -> dict[int, int]:
    """Each partition's end for a reader of that isolation level: read_committed stops at the
    last stable offset (before an open transaction, or one whose markers are not written
    yet), read_uncommitted at the log's end."""
    config = {"bootstrap.servers": bootstrap, "group.id": "log-end-probe"}
    consumer = Consumer({**config, "isolation.level": isolation})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def consume_to_end(bootstrap: str, topic: str, isolation: str) -> list:
    """Every message a reader of that isolation level sees, from the start to the log's end
    (a read_committed reader passes a committed transaction once its markers are written)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    ends = log_end_offsets(bootstrap, topic, isolation="read_uncommitted")
    ends = {p: end for p, end in ends.items() if end > 0}  # an empty one has no position
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    seen, deadline = [], time.monotonic() + 60
    try:
        while any(
            tp.offset < ends[tp.partition] for tp in consumer.position(consumer.assignment())
        ):
            assert time.monotonic() < deadline, f"{topic} not read to its end within 60 s"
            seen += [m for m in consumer.consume(100, 0.5) if m.error() is None]
        return seen
    finally:
        consumer.close()


def consume_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every value in the topic, read from the beginning to the current log end."""
    ends = log_end_offsets(bootstrap, topic)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    values: list[bytes] = []
    remaining = sum(ends.values())
    deadline = time.monotonic() + 60
    try:
        while remaining > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{remaining} records of {topic} not read within 60s")
            for message in consumer.consume(1000, 1.0):
                if message.error() is None:
                    values.append(message.value())
                    remaining -= 1
        return values
    finally:
        consumer.close()


# What users run on a replicated cluster: every record on min.insync.replicas before it is
# acknowledged, retries written once and in order.
DURABLE = {"acks": "all", "enable.idempotence": True}


class ContinuousProducer:
    """Records with ids 0, 1, 2, … arriving continuously at about `rate` per second, from a
    thread, until `stop()` (which returns how many were produced: ids range(0, n)). `config`:
    producer settings on top (e.g. DURABLE); a record Kafka failed to deliver fails `stop()`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: int = 500,
        first_id: int = 0,
        config: dict[str, object] | None = None,
    ):
        import threading

        self.failed: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "on_delivery": self._delivered,
                **(config or {}),
            }
        )
        self._topic, self._rate, self._next = topic, rate, first_id
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def __enter__(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def produced(self) -> int:
        return self._next

    def _delivered(self, error, _message) -> None:
        if error is not None:
            self.failed.append(str(error))

    def _run(self) -> None:
        tick, per_tick = 0.02, max(1, self._rate // 50)
        while not self._stopped.wait(tick):
            for n in range(self._next, self._next + per_tick):
                self._producer.produce(
                    self._topic, key=str(n).encode(), value=json.dumps({"id": n}).encode()
                )
            self._next += per_tick
            self._producer.poll(0)

    def stop(self) -> int:
        if not self._stopped.is_set():
            self._stopped.set()
            self._thread.join(10)
            assert self._producer.flush(120) == 0
        assert not self.failed, f"{len(self.failed)} records not delivered: {self.failed[:3]}"
        return self._next
