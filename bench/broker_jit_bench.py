"""A test broker's CPU under the JIT settings the tests could give it, side by side in one run:
C1 only (what `tests/conftest.py` gives every test JVM: half a short JVM's CPU) against the
default tiered compilation (C1, then C2 for hot code). The tests' brokers live for minutes and
serve SASL_SSL readers, where steady-state code and the crypto intrinsics (C2's) count.

    python -m bench.broker_jit_bench [--seconds 120] [--rate 500]

Per setting: a fresh single-node broker, a producer at `rate` records/s on PLAINTEXT and a
consumer reading them over SASL_SSL, for `seconds`. Printed: the broker's CPU seconds until
ready, during the load, and the ratio of the two settings."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer

from devbed.kafka_broker import KafkaBroker
from tests.support.kafka_tools import ContinuousProducer, new_topic

SETTINGS = {
    "C1 only": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "tiered (C1 + C2)": "-XX:+UseSerialGC",
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_over_sasl_ssl(broker: KafkaBroker, topic: str, stop: threading.Event) -> None:
    consumer = Consumer(
        broker.secured_client(**{"group.id": "bench", "auto.offset.reset": "earliest"})
    )
    consumer.subscribe([topic])
    while not stop.is_set():
        consumer.consume(1000, 0.5)
    consumer.close()


def measure(options: str, seconds: float, rate: int) -> dict[str, float]:
    os.environ["JDK_JAVA_OPTIONS"] = options
    with tempfile.TemporaryDirectory(prefix="jit-bench-") as workdir:
        broker = KafkaBroker(Path(workdir)).start()
        try:
            return _load(broker, seconds, rate)
        finally:
            broker.stop()


def _load(broker: KafkaBroker, seconds: float, rate: int) -> dict[str, float]:
    """The broker's CPU until ready, then under the load of `seconds`."""
    assert broker.process is not None
    pid = broker.process.pid
    ready = cpu_seconds(pid)
    topic = new_topic(broker.bootstrap, 3, prefix="load")
    stop = threading.Event()
    reader = threading.Thread(target=read_over_sasl_ssl, args=(broker, topic, stop))
    reader.start()
    before = cpu_seconds(pid)
    with ContinuousProducer(broker.bootstrap, topic, rate=rate):
        time.sleep(seconds)
    stop.set()
    reader.join(30)
    load = cpu_seconds(pid) - before
    return {"startCpuSeconds": round(ready, 1), "loadCpuSeconds": round(load, 1),
            "loadCpuPercent": round(100 * load / seconds, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--rate", type=int, default=500)
    args = parser.parse_args()
    results = {name: measure(opts, args.seconds, args.rate) for name, opts in SETTINGS.items()}
    for name, figures in results.items():
        print(f"{name:18s} {json.dumps(figures)}")
    c1, tiered = results["C1 only"], results["tiered (C1 + C2)"]
    print(f"tiered / C1: start {tiered['startCpuSeconds'] / c1['startCpuSeconds']:.2f}, "
          f"under load {tiered['loadCpuSeconds'] / c1['loadCpuSeconds']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
