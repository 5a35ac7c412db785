"""Throughput, side by side in one run: same broker, same topic, same two cores.

(a) our `kafka_checkpointed` source in a local[2] query, (b) Spark's built-in `kafka`
source in the same query, (c) a raw confluent-kafka consume loop (two processes, one per
core). Then a profile of the executor-side read path, to show where the time goes, and for each
query the CPU seconds its processes used (Spark's JVM, its Python workers, the broker).
Writes bench/results/source.json (unless --no-write); BENCH_RECORDS or --records overrides
the record count (default 5 M).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spark_app.partition_reader import (  # noqa: E402
    FETCH_DEFAULTS,
    KafkaInputPartition,
    read_range,
)
from tests.support.kafka_broker import CACHE, KafkaBroker  # noqa: E402
from tests.support.kafka_tools import log_end_offsets, new_topic  # noqa: E402

RECORDS = int(os.environ.get("BENCH_RECORDS", 5_000_000))  # --records sets it too
PARTITIONS = 8
VALUE = b"v" * 100
RESULTS = REPO / "bench" / "results" / "source.json"


def produce(bootstrap: str, topic: str) -> float:
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
    for n in range(RECORDS):
        while True:
            try:
                producer.produce(topic, VALUE, partition=n % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 20_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def builtin_kafka_jars() -> list[str]:
    """spark-sql-kafka and its client jars from Maven Central, cached."""
    target = CACHE / "bench" / "spark-sql-kafka"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        pom = REPO / "bench" / "spark-kafka"
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",
                "-s",
                str(pom / "settings.xml"),
                "-f",
                str(pom / "pom.xml"),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={target}",
            ],
            check=True,
        )
        (target / ".complete").touch()
    wanted = ("spark-sql-kafka", "spark-token-provider", "kafka-clients", "commons-pool2")
    return sorted(str(p) for p in target.glob("*.jar") if p.name.startswith(wanted))


def spark_session(jars: list[str]):
    from pyspark.sql import SparkSession

    from spark_app.source import KafkaCheckpointedDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("source-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars", ",".join(jars))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaCheckpointedDataSource)
    return spark


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_by_role(spark_pid: int, broker_pid: int | None) -> dict[str, float]:
    """CPU seconds used so far by Spark's JVM, the Python processes it started (workers,
    daemon, source runner; exited children included through the parents' counters) and the
    broker: where a query's cycles go on a shared machine."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        own = int(fields[11]) + int(fields[12])
        waited = int(fields[13]) + int(fields[14])
        ticks[pid] = (own, waited)

    def tree(pid: int) -> float:
        own, waited = ticks.get(pid, (0, 0))
        return own + waited + sum(tree(c) for c in children.get(pid, []))

    jvm = ticks.get(spark_pid, (0, 0))[0]
    result = {
        "spark_jvm": jvm / _CLK_TCK,
        "spark_python": (tree(spark_pid) - jvm) / _CLK_TCK,
    }
    if broker_pid is not None:
        result["broker"] = tree(broker_pid) / _CLK_TCK
    return result


def time_query(spark, fmt: str, options: dict[str, str]) -> float:
    """One availableNow query to the noop sink over the whole topic; returns seconds."""
    checkpoint = tempfile.mkdtemp(prefix=f"bench-{fmt}-")
    try:
        started = time.perf_counter()
        query = (
            spark.readStream.format(fmt)
            .options(**options)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if rows != RECORDS:
            raise RuntimeError(f"{fmt} read {rows} rows, expected {RECORDS}")
        return elapsed
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def _raw_consume(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    partitions: list[int],
    out: multiprocessing.Queue,
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **FETCH_DEFAULTS,  # our executors' fetch settings: the client's ceiling
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    remaining = sum(ends[p] for p in partitions)
    count = size = 0
    while count < remaining:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                count += 1
                size += len(message.value())
    consumer.close()
    out.put((count, size))


def time_raw_loop(bootstrap: str, topic: str) -> float:
    ends = log_end_offsets(bootstrap, topic)
    queue: multiprocessing.Queue = multiprocessing.Queue()
    halves = [list(range(0, PARTITIONS, 2)), list(range(1, PARTITIONS, 2))]
    started = time.perf_counter()
    workers = [
        multiprocessing.Process(target=_raw_consume, args=(bootstrap, topic, ends, h, queue))
        for h in halves
    ]
    for worker in workers:
        worker.start()
    counts = [queue.get() for _ in workers]
    elapsed = time.perf_counter() - started
    for worker in workers:
        worker.join()
    assert sum(c for c, _ in counts) == RECORDS
    return elapsed


def profile_read_path(bootstrap: str, topic: str) -> tuple[float, str]:
    """Our executor-side read of one partition alone: Kafka fetch + Arrow batches."""
    end = log_end_offsets(bootstrap, topic)[0]
    partition = KafkaInputPartition(
        topic=topic, partition=0, start=0, end=end, client_config={"bootstrap.servers": bootstrap}
    )
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    rows = sum(batch.num_rows for batch in read_range(partition))
    profiler.disable()
    elapsed = time.perf_counter() - started
    assert rows == end
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(8)
    return rows / elapsed, text.getvalue()


def main(argv: list[str] | None = None) -> None:
    global RECORDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument(
        "--runs", type=int, default=2, help="alternating runs of each; the best one counts"
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to leave out: builtin, raw, profile (for quick comparisons)",
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS}")
    args = parser.parse_args(argv)
    RECORDS = args.records
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    workdir = Path(tempfile.mkdtemp(prefix="source-bench-"))
    with KafkaBroker(workdir / "broker") as broker:
        topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="bench")
        produce_s = produce(broker.bootstrap, topic)
        print(f"produced {RECORDS:,} x {len(VALUE)} B records in {produce_s:.1f}s", flush=True)
        jars = builtin_kafka_jars()
        spark = spark_session(jars)
        spark_pid = spark.sparkContext._gateway.proc.pid
        broker_pid = broker.process.pid if broker.process else None

        def measured(fmt: str, options: dict[str, str]) -> tuple[float, dict[str, float]]:
            before = cpu_by_role(spark_pid, broker_pid)
            elapsed = time_query(spark, fmt, options)
            after = cpu_by_role(spark_pid, broker_pid)
            return elapsed, {k: round(after[k] - before.get(k, 0.0), 1) for k in after}

        ours_options = {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "commitOffsetsOnCheckpoints": "false",
        }
        builtin_options = {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
        }
        runs: dict[str, list[float]] = {"ours": [], "builtin": [], "raw": []}
        cpu: dict[str, dict[str, float]] = {}  # CPU seconds of the best run of each query
        builtin_error = "skipped" if "builtin" in skip else None
        for _ in range(args.runs):  # alternate, keep the better run of each (a warm JVM for both)
            elapsed, used = measured("kafka_checkpointed", ours_options)
            if not runs["ours"] or elapsed < min(runs["ours"]):
                cpu["ours"] = used
            runs["ours"].append(elapsed)
            print(f"  ours: {RECORDS / elapsed:,.0f} rows/s, CPU s {used}", flush=True)
            if builtin_error is None:
                try:
                    elapsed, used = measured("kafka", builtin_options)
                    if not runs["builtin"] or elapsed < min(runs["builtin"]):
                        cpu["builtin"] = used
                    runs["builtin"].append(elapsed)
                    print(f"  builtin: {RECORDS / elapsed:,.0f} rows/s, CPU s {used}", flush=True)
                except Exception as exc:
                    builtin_error = str(exc).splitlines()[0][:500]
                    print(f"  builtin failed: {builtin_error}", flush=True)
            if "raw" not in skip:
                runs["raw"].append(time_raw_loop(broker.bootstrap, topic))
                print(f"  raw loop: {RECORDS / runs['raw'][-1]:,.0f} msg/s", flush=True)
        spark.stop()
        read_rate, profile = (
            (None, "") if "profile" in skip else profile_read_path(broker.bootstrap, topic)
        )

    rates = {name: (RECORDS / min(times) if times else None) for name, times in runs.items()}
    result = {
        "records": RECORDS,
        "valueBytes": len(VALUE),
        "partitions": PARTITIONS,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "producedIn_s": round(produce_s, 1),
        "rates_per_s": {
            "a_kafka_checkpointed_local2": round(rates["ours"]),
            "b_spark_builtin_kafka_local2": round(rates["builtin"]) if rates["builtin"] else None,
            "c_raw_confluent_consume_2proc": round(rates["raw"]) if rates["raw"] else None,
            "executor_read_path_alone_1partition": round(read_rate) if read_rate else None,
        },
        "ratios": {
            "a_over_b": round(rates["ours"] / rates["builtin"], 3) if rates["builtin"] else None,
            "a_over_c": round(rates["ours"] / rates["raw"], 3) if rates["raw"] else None,
        },
        "targets": {"a_over_b": ">= 1.0", "a_over_c": ">= 0.6"},
        "builtinSource": {"jars": [Path(j).name for j in jars], "error": builtin_error},
        "runs_s": {k: [round(t, 2) for t in v] for k, v in runs.items()},
        "cpu_s_best_run": cpu,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if profile:
        print("profile of the executor read path (one partition, in-process):")
        print(profile)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
