"""Group offsets under continuous production: commit lag and records re-read per redeploy.

One job (the runner as a real process on local Spark, like `make run`: 3 partitions, a
2 s processing-time trigger, records arriving at --rate per second throughout) goes through
three epochs on a real broker:

1. epoch 1 runs for --seconds while a probe reads the group's committed offsets every 20 ms:
   commit lag = a batch's commit-log entry (its file's mtime) → the first probe that sees
   the group at or past that batch's end; p50/p99 over the run. Then SIGTERM (graceful).
2. epoch 2 (a redeploy) starts; records re-read = ids in both epochs' output. It is then
   killed with SIGKILL right after a batch became durable (a crashed driver).
3. epoch 3 starts; records re-read after the crash = ids in both epoch 2 and epoch 3 output.
   The producer stops, epoch 3 reaches the log end, and nothing may be missing.

--code-root runs another checkout's runner (e.g. an export of main, for the figures before a
change); --baseline passes no --previous-checkpoint (a runner without it). Writes
bench/results/offsets.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devbed.kafka_broker import KafkaBroker  # noqa: E402
from tests.support.file_sink import committed_rows  # noqa: E402
from tests.support.kafka_tools import (  # noqa: E402
    ContinuousProducer,
    group_offsets,
    log_end_offsets,
    new_topic,
)

RESULTS = REPO / "bench" / "results" / "offsets.json"
GROUP = "bench-offsets-group"


def manifest(bootstrap: str, topic: str, work: Path) -> dict:
    return {
        "apiVersion": "sparkkafka.dev/v1alpha1",
        "kind": "StreamingJob",
        "metadata": {"name": "offsets", "namespace": "bench"},
        "spec": {
            "job": {
                "source": {
                    "bootstrapServers": bootstrap,
                    "subscribe": [topic],
                    "groupId": GROUP,
                    "startingOffsets": "committed",
                    "offsetResetStrategy": "earliest",
                },
                "sink": {"format": "parquet", "path": f"file://{work}/output"},
                "trigger": {"processingTime": "2 seconds"},
            },
            "checkpoint": {"location": f"file://{work}/checkpoints"},
            "sparkConf": {"spark.sql.shuffle.partitions": "1"},
        },
    }


class Runner:
    def __init__(self, code_root: Path, work: Path, epoch: int, previous: str | None):
        self.work, self.epoch = work, epoch
        self.report_path = work / f"report-{epoch}.json"
        self.log = open(work / f"runner-{epoch}.log", "wb")  # noqa: SIM115
        args = [sys.executable, "-m", "spark_app", "--manifest", str(work / "job.yaml")]
        args += ["--epoch", str(epoch), "--report-file", str(self.report_path)]
        if previous:
            args += ["--previous-checkpoint", previous]
        env = {**os.environ, "PYTHONPATH": str(code_root), "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(  # cwd: `-m` imports from the code root first
            args, cwd=code_root, stdout=self.log, stderr=subprocess.STDOUT, env=env
        )

    def report(self) -> dict:
        try:
            return json.loads(self.report_path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def wait_for_batch(self, batch_id: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while (self.report().get("latestBatch") or {}).get("batchId", -1) < batch_id:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"epoch {self.epoch}: no batch {batch_id}; see {self.log.name}")
            time.sleep(0.2)

    def stop(self, sig: int) -> int:
        self.process.send_signal(sig)
        return self.process.wait(120)

    def checkpoint(self) -> Path:
        return self.work / "checkpoints" / "bench" / "offsets" / f"epoch-{self.epoch}"

    def ids(self) -> Counter:
        rows = committed_rows(self.work / "output")  # every epoch's directory
        return Counter(row["id"] for row in rows if row["epoch"] == f"epoch-{self.epoch}")


class GroupProbe:
    """The group's committed offsets every 20 ms, with the time each change was first seen."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.seen: list[tuple[float, dict[int, int | None]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP})
        tps = [TopicPartition(self.topic, p) for p in range(3)]
        while not self._stop.wait(0.02):
            answer = consumer.committed(tps, timeout=5)
            offsets = {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in answer}
            if not self.seen or self.seen[-1][1] != offsets:
                self.seen.append((time.time(), offsets))
        consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def first_reaching(self, end: dict[int, int]) -> float | None:
        for at, offsets in self.seen:
            if all((offsets.get(p) or -1) >= o for p, o in end.items()):
                return at
        return None


def batch_ends(checkpoint: Path, topic: str) -> dict[int, tuple[float, dict[int, int]]]:
    """Per durable batch: its commit-log entry's mtime and its end offsets."""
    ends = {}
    for entry in (checkpoint / "commits").iterdir():
        if entry.name.isdigit():
            lines = (checkpoint / "offsets" / entry.name).read_text().splitlines()
            offsets = json.loads(lines[-1])["offsets"][topic]
            ends[int(entry.name)] = (
                entry.stat().st_mtime,
                {int(p): o for p, o in offsets.items()},
            )
    return ends


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(code_root: Path, baseline: bool, seconds: float, rate: int, work: Path) -> dict:
    with KafkaBroker(work / "broker") as broker:
        topic = new_topic(broker.bootstrap, partitions=3)
        (work / "job.yaml").write_text(yaml.safe_dump(manifest(broker.bootstrap, topic, work)))

        def previous(runner: Runner) -> str | None:
            return None if baseline else f"file://{runner.checkpoint()}"

        with ContinuousProducer(broker.bootstrap, topic, rate=rate) as producer:
            probe = GroupProbe(broker.bootstrap, topic)
            first = Runner(code_root, work, 1, None)
            first.wait_for_batch(1)
            time.sleep(seconds)  # batches under continuous production
            assert first.stop(signal.SIGTERM) == 0
            probe.stop()
            ends = batch_ends(first.checkpoint(), topic)
            lags, never = [], []
            for batch_id, (written, end) in sorted(ends.items()):
                reached = probe.first_reaching(end)
                if reached is None:
                    never.append(batch_id)
                else:
                    lags.append(max(0.0, reached - written))
            last = ends[max(ends)][1]
            after_stop = group_offsets(broker.bootstrap, GROUP, topic)
            behind_at_stop = sum(o - (after_stop.get(p) or 0) for p, o in last.items())

            second = Runner(code_root, work, 2, previous(first))
            second.wait_for_batch(2)
            graceful_reread = len(set(first.ids()) & set(second.ids()))
            # A crash right after a batch became durable: between two triggers, where a
            # driver spends most of its time under a processing-time trigger.
            second.wait_for_batch(second.report()["latestBatch"]["batchId"] + 1)
            second.stop(signal.SIGKILL)

            third = Runner(code_root, work, 3, previous(second))
            third.wait_for_batch(1)
            produced = producer.stop()
        target = {p: o for p, o in log_end_offsets(broker.bootstrap, topic).items()}
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            batch = third.report().get("latestBatch") or {}
            if {int(p): o for p, o in batch.get("endOffsets", {}).get(topic, {}).items()} == (
                target
            ):
                break
            time.sleep(0.2)
        assert third.stop(signal.SIGTERM) == 0
        crash_reread = len(set(second.ids()) & set(third.ids()))
        seen = set(first.ids()) | set(second.ids()) | set(third.ids())
        return {
            "code": "baseline" if baseline else "this checkout",
            "ratePerS": rate,
            "trigger": "processingTime 2 s (as make run)",
            "batchesMeasured": len(lags),
            "batchesNeverCommitted": never,
            "commitLag_s": {
                "p50": round(percentile(lags, 0.5), 3),
                "p99": round(percentile(lags, 0.99), 3),
                "max": round(max(lags), 3),
            },
            "gracefulStop": {
                "lastDurableBatch": max(ends),
                "groupBehindLastDurableBatch_records": behind_at_stop,
                "finalCommit": first.report().get("finalCommit"),
            },
            "recordsReread": {"gracefulRedeploy": graceful_reread, "crashRedeploy": crash_reread},
            "catchUp": {
                "epoch2": second.report().get("previousCheckpoint"),
                "epoch3": third.report().get("previousCheckpoint"),
            },
            "produced": produced,
            "lost": len(set(range(produced)) - seen),
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code-root", type=Path, default=REPO)
    parser.add_argument("--baseline", action="store_true")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="offsets-bench-") as tmp:
        result = run(args.code_root.resolve(), args.baseline, args.seconds, args.rate, Path(tmp))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
