"""A job's CPU with its checkpoint and file sink on a local disk, side by side in one run:
Hadoop's own local file system (which, without Hadoop's native library, runs a `chmod` per file
it writes and a `readlink` per rename of Spark's checkpoint) against jvm/localfs, which spark_app
uses where Spark's jars have it (scripts/localfs-jar.sh).

    python -m bench.local_fs_bench [--seconds 60] [--rate 50]

Per setting: a runner process (the fetch read path, a batch every 2 s) on a fresh topic of a
session broker, `rate` records/s produced; after its first batch and 10 s more, the CPU of the
runner's whole process tree (the driver JVM and its ended children included) over `seconds`.
Printed: CPU seconds and batches per setting, and their ratio."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

from devbed.kafka_broker import KafkaBroker
from spark_app.api.options import NATIVE_ENGINE_ENV, READ_PATH_ENV
from spark_app.runner.query import LOCAL_FS_CONF, local_file_system_conf
from tests.support.kafka_tools import new_topic, produce
from tests.support.runner_process import RunnerProcess, job_manifest

HADOOPS_OWN = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}
SETTINGS = {"Hadoop's own": HADOOPS_OWN, "jvm/localfs": LOCAL_FS_CONF}
FETCH = {READ_PATH_ENV: "native", NATIVE_ENGINE_ENV: "fetch"}


def tree_cpu_seconds(root: int) -> float:
    """CPU of a process and its descendants, the ended children each waited for included."""
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            for task in os.listdir(f"/proc/{pid}/task"):
                pending += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    return total / os.sysconf("SC_CLK_TCK")


def measure(broker: KafkaBroker, conf: dict[str, str], seconds: float, rate: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="localfs-bench-") as workdir:
        topic = new_topic(broker.bootstrap, partitions=3)
        manifest = job_manifest("localfs", broker.bootstrap, topic, Path(workdir))
        manifest["spec"]["job"]["trigger"] = {"processingTime": "2 seconds"}
        manifest["spec"]["sparkConf"].update(conf)
        runner = RunnerProcess(manifest, Path(workdir), env=FETCH).start()
        try:
            produce(broker.bootstrap, topic, range(100))
            first = runner.wait_for_batch(0)["latestBatch"]["batchId"]
            time.sleep(10)
            assert runner.process is not None
            before, produced = tree_cpu_seconds(runner.process.pid), 100
            began = time.monotonic()
            while time.monotonic() - began < seconds:
                produce(broker.bootstrap, topic, range(produced, produced + rate))
                produced += rate
                time.sleep(1)
            spent = tree_cpu_seconds(runner.process.pid) - before
            batches = runner.report()["latestBatch"]["batchId"] - first
        finally:
            runner.terminate()
    return {"cpuSeconds": round(spent, 1), "batches": batches,
            "cpuSecondsPerBatch": round(spent / max(batches, 1), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=50)
    args = parser.parse_args()
    assert local_file_system_conf(), "jvm/localfs is not in Spark's jars: bash scripts/venv.sh"
    with (
        tempfile.TemporaryDirectory(prefix="localfs-bench-broker-") as workdir,
        KafkaBroker(Path(workdir)) as broker,
    ):
        results = {
            name: measure(broker, conf, args.seconds, args.rate) for name, conf in SETTINGS.items()
        }
    for name, figures in results.items():
        print(f"{name:14s} {json.dumps(figures)}")
    own, ours = (results[name]["cpuSecondsPerBatch"] for name in SETTINGS)
    print(f"Hadoop's own / jvm/localfs, CPU per batch: {own / ours:.2f}")


if __name__ == "__main__":
    main()
