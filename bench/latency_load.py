"""The latency benchmark's processes beside Spark: a paced producer and the two sink watchers.

Each runs in a process of its own (the bench's main process holds Spark's py4j client), so the
producer's pace and the watchers' clocks do not wait on it. Every record's value carries its
produce time (bench/latency_stats.py); a watcher notes when the record becomes visible to a
reader of the sink and keeps the pair. Times are CLOCK_REALTIME on one machine.

- The producer sends `rate` records per second for `seconds`, catching up after a stall in a
  burst (so the rate is the rate, not "at most"); it reports what it reached.
- The file sink watcher lists the sink's `_spark_metadata` log every POLL_S: a data file is
  visible to a reader once a log entry names it (Spark writes the entry atomically after the
  batch's files), so each of its records is visible at the listing that found the entry.
- The Kafka sink watcher is a consumer assigned to every partition of the output topic; a
  record is visible when poll() hands it over.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from array import array
from pathlib import Path
from urllib.parse import unquote, urlparse

from confluent_kafka import Consumer, Producer, TopicPartition
from latency_stats import due, next_due_s, stamp_of, stamped

# Spawned, not forked: the bench's main process runs py4j threads by the time a watcher starts.
_MP = multiprocessing.get_context("spawn")
POLL_S = 0.002  # the file watcher's listing interval: its figures are late by up to this


# -- the producer ----------------------------------------------------------------------------
def _paced(producer: Producer, topic: str, partitions: int, rate: int, seconds: float) -> dict:
    total = int(rate * seconds)
    sent = 0
    began_ns = time.time_ns()
    start = time.perf_counter()
    while sent < total:
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break  # could not keep up: the phase ends on time, its rate is what was reached
        target = due(rate, elapsed, total)
        while sent < target:
            try:
                producer.produce(topic, stamped(time.time_ns()), partition=sent % partitions)
            except BufferError:
                producer.poll(0.001)
                continue
            sent += 1
        producer.poll(0)
        wait = next_due_s(rate, sent) - (time.perf_counter() - start)
        if wait > 0:
            time.sleep(min(wait, 0.005))
    elapsed = time.perf_counter() - start
    producer.flush(30)
    return {
        "rate": rate,
        "sent": sent,
        "reached_per_s": round(sent / elapsed),
        "began_s": began_ns / 1e9,
        "ended_s": began_ns / 1e9 + elapsed,
    }


def _producer_main(bootstrap: str, conn) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 1,  # the producer's own wait counts in every latency alike: kept short
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
        }
    )
    while True:
        command = conn.recv()
        if command is None:
            break
        topic, partitions, rate, seconds = command
        conn.send(_paced(producer, topic, partitions, rate, seconds))
    producer.flush(30)


class PacedProducer:
    """One producer process for the whole run; `phase()` blocks until the phase is sent."""

    def __init__(self, bootstrap: str):
        self._conn, child = _MP.Pipe()
        self._process = _MP.Process(target=_producer_main, args=(bootstrap, child), daemon=True)
        self._process.start()

    def phase(self, topic: str, partitions: int, rate: int, seconds: float) -> dict:
        self._conn.send((topic, partitions, rate, seconds))
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send(None)
        self._process.join(60)


# -- the watchers ----------------------------------------------------------------------------
class Watcher:
    """A sink watcher's process: `seen` counts the records it found so far; `stop()` returns
    every (produced_ns, visible_ns) pair as two arrays of int64."""

    def __init__(self, target, args: tuple, workdir: Path):
        self.seen = _MP.Value("q", 0, lock=False)
        self._stop = _MP.Event()
        self._out = workdir / f"watch-{os.getpid()}-{time.monotonic_ns()}.bin"
        self._process = _MP.Process(
            target=target, args=(*args, self.seen, self._stop, str(self._out)), daemon=True
        )
        self._process.start()

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.seen.value < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> tuple[array, array]:
        self._stop.set()
        self._process.join(60)
        if not self._out.exists():
            raise RuntimeError(f"the sink watcher ended with exit code {self._process.exitcode}")
        produced, visible = array("q"), array("q")
        with open(self._out, "rb") as pairs:
            count = int.from_bytes(pairs.read(8), "little")
            produced.fromfile(pairs, count)
            visible.fromfile(pairs, count)
        self._out.unlink()
        return produced, visible


def _save(out: str, produced: array, visible: array) -> None:
    with open(out, "wb") as pairs:
        pairs.write(len(produced).to_bytes(8, "little"))
        produced.tofile(pairs)
        visible.tofile(pairs)


def _file_sink_main(sink_dir: str, seen, stop, out: str) -> None:
    log_dir = Path(sink_dir) / "_spark_metadata"
    entries: set[str] = set()  # log files read (a .compact one repeats the earlier entries)
    files: set[str] = set()  # data files read
    produced, visible = array("q"), array("q")
    while not stop.is_set():
        try:
            names = [n for n in os.listdir(log_dir) if not n.startswith(".")]
        except FileNotFoundError:
            names = []
        now = time.time_ns()
        for name in sorted(set(names) - entries, key=lambda n: int(n.split(".")[0])):
            entries.add(name)
            for line in (log_dir / name).read_text().splitlines()[1:]:  # after "v1"
                path = unquote(urlparse(json.loads(line)["path"]).path)
                if path in files:
                    continue
                files.add(path)
                with open(path, "rb") as data:
                    for record in data:
                        produced.append(stamp_of(record))
                        visible.append(now)
        seen.value = len(produced)
        time.sleep(POLL_S)
    _save(out, produced, visible)


def _kafka_sink_main(bootstrap: str, topic: str, partitions: int, seen, stop, out: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "latency-watcher",  # never commits: assign() only
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    produced, visible = array("q"), array("q")
    while not stop.is_set():
        first = consumer.poll(0.05)  # returns as soon as one record is there
        if first is None:
            continue
        # consume(n, 0) takes what is queued already (consume(n, t>0) would wait for n)
        messages = [first, *consumer.consume(10_000, 0)]
        now = time.time_ns()
        for message in messages:
            if message.error() is None:
                produced.append(stamp_of(message.value()))
                visible.append(now)
        seen.value = len(produced)
    consumer.close()
    _save(out, produced, visible)


def file_sink_watcher(sink_dir: Path, workdir: Path) -> Watcher:
    return Watcher(_file_sink_main, (str(sink_dir),), workdir)


def kafka_sink_watcher(bootstrap: str, topic: str, partitions: int, workdir: Path) -> Watcher:
    return Watcher(_kafka_sink_main, (bootstrap, topic, partitions), workdir)
