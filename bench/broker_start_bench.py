"""A test broker's start, side by side in one run: Kafka's way (a JVM for the storage
format, then the broker's JVM) against the tests' (devbed/broker_jvm.py: one JVM that
formats and runs, mapping the version's class-data-sharing archive). Both with the JVM
options every test JVM gets (tests/conftest.py: C1 only, the serial collector).

    python -m bench.broker_start_bench [--starts 5]

Per way and start: a fresh single-node broker of the default version until it answers its
first metadata request; printed: CPU seconds (both JVMs) and seconds to that answer, the
medians and their ratios."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.broker_jit_bench import cpu_seconds
from devbed import broker_jvm
from devbed.kafka_broker import KafkaBroker
from devbed.kafka_jars import broker_jars
from tests.conftest import TEST_JVM_OPTIONS


class KafkasWay(KafkaBroker):
    """The storage formatted by StorageTool's own JVM, then kafka.Kafka, no archive."""

    def _command(self, props: Path) -> list[str]:
        ours = super()._command(props)
        at = ours.index(broker_jvm.LAUNCHER)
        java = [o for o in ours[:at] if not o.startswith(("-XX:SharedArchive", "-Xshare"))]
        java[java.index("-cp") + 1] = f"{broker_jars(self.version)}/*"
        subprocess.run([*java, "kafka.tools.StorageTool", *ours[at + 3 :]], check=True,
                       stdout=subprocess.DEVNULL, env=broker_jvm.environment())  # fmt: skip
        return [*java, "kafka.Kafka", str(props)]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_start(kind: type[KafkaBroker]) -> tuple[float, float]:
    """(CPU seconds, seconds) until the broker's first answer."""
    with tempfile.TemporaryDirectory(prefix="start-bench-") as workdir:
        began, before = time.monotonic(), children_cpu()
        broker = kind(Path(workdir)).start()
        seconds = time.monotonic() - began
        assert broker.process is not None
        cpu = children_cpu() - before + cpu_seconds(broker.process.pid)
        broker.stop(kill=True)
        return cpu, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    os.environ["JDK_JAVA_OPTIONS"] = TEST_JVM_OPTIONS
    KafkaBroker(Path(tempfile.mkdtemp(prefix="start-bench-"))).start().stop()  # the archive
    medians = {}
    for name, kind in (("Kafka's way (two JVMs)", KafkasWay), ("one JVM + archive", KafkaBroker)):
        runs = [one_start(kind) for _ in range(args.starts)]  # alternating would mix caches
        medians[name] = [statistics.median(r[i] for r in runs) for i in (0, 1)]
        print(f"{name:24s} CPU s {[round(r[0], 2) for r in runs]}, "
              f"s {[round(r[1], 2) for r in runs]}")  # fmt: skip
    (kafka_cpu, kafka_s), (ours_cpu, ours_s) = medians.values()
    print(
        f"medians: CPU {kafka_cpu:.2f} -> {ours_cpu:.2f} s ({kafka_cpu / ours_cpu:.2f}x less), "
        f"to the first answer {kafka_s:.2f} -> {ours_s:.2f} s ({kafka_s / ours_s:.2f}x)"
    )


if __name__ == "__main__":
    main()
