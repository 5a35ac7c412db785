"""Fills a benchmark's topic as fast as one producer can: the benches' one produce loop."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import Producer


def produce(bootstrap: str, topic: str, values: Iterable[bytes], partitions: int) -> float:
    """Produces `values` round-robin over `partitions` (record n to partition n % partitions)
    and returns the seconds it took, the values' making included. Large batches and a deep
    queue: the broker, not the loop, sets the pace; a full queue waits for deliveries."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
        }
    )
    started = time.perf_counter()
    for n, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 20_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "records left undelivered after 120 s"
    return time.perf_counter() - started
