"""Throughput, side by side in one run: same broker, same topic, same two cores.

(a) our `kafka_checkpointed` source on its pure-Python read path in a local[2] query, (b)
Spark's built-in `kafka` source in the same query, (c) a raw confluent-kafka consume loop (two
processes, one per core), (d) our source on its native read path (streamingjob_native) with
its `fetch` engine (Kafka's Fetch protocol decoded straight into Arrow), (e) the same with its
`librdkafka` engine (librdkafka's consumer messages into Arrow). For
each query the CPU seconds its processes used (Spark's JVM, its Python workers, the broker)
and the peak RSS of the executor's processes (the JVM, the largest Python worker). Then where
the time goes: the executor-side read path alone on each path, and one extra, untimed run of
(d) profiled on both sides (perf on the Python workers, Java Flight Recorder in the JVM).
Every rate is given twice: wall (the query's start and stop included) and processing (the
seconds in its triggers, Spark's processedRowsPerSecond; the raw loop from its first consume).
Writes bench/results/source.json (unless --no-write); BENCH_RECORDS or --records overrides
the record count (default 5 M).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import itertools
import json
import multiprocessing
import os
import platform
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from produce import produce  # noqa: E402

from devbed.cache import CACHE  # noqa: E402
from devbed.kafka_broker import KafkaBroker  # noqa: E402
from spark_app.source import native_read  # noqa: E402
from spark_app.source.partition_range import FETCH_DEFAULTS, KafkaInputPartition  # noqa: E402
from spark_app.source.partition_reader import read_range  # noqa: E402
from tests.support.kafka_tools import log_end_offsets, new_topic  # noqa: E402

RECORDS = int(os.environ.get("BENCH_RECORDS", 5_000_000))  # --records sets it too
PARTITIONS = 8
VALUE = b"v" * 100
RESULTS = REPO / "bench" / "results" / "source.json"


def builtin_kafka_jars() -> list[str]:
    """spark-sql-kafka and its client jars through the machine's Maven settings, cached."""
    target = CACHE / "bench" / "spark-sql-kafka"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        pom = REPO / "bench" / "spark-kafka"
        subprocess.run(
            [
                "mvn",
                "-q",
                "-B",  # the machine's own Maven settings (its mirror or Maven Central)
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

    from spark_app.source.source import KafkaCheckpointedDataSource

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


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak_rss(spark_pid: int) -> None:
    """Peak RSS (VmHWM) of the JVM and its Python processes starts again from now."""
    for pid in [spark_pid, *_descendants(spark_pid)]:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss_mb(spark_pid: int) -> dict[str, float]:
    """The executor's memory (local mode: the JVM and the Python workers it forked)."""
    workers = [p for p in _descendants(spark_pid) if "python" in _comm(p)]
    return {
        "jvm_peak": round(_status_kb(spark_pid, "VmHWM") / 1024),
        "python_worker_peak": round(
            max((_status_kb(p, "VmHWM") for p in workers), default=0) / 1024
        ),
        "python_processes": len(workers),
    }


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def time_query(spark, fmt: str, options: dict[str, str]) -> tuple[float, float]:
    """One availableNow query to the noop sink over the whole topic: (wall seconds from
    start() to its end, seconds in its triggers). The triggers' time is what Spark's
    processedRowsPerSecond divides by; the rest is the query's start and stop, for a Python
    source mostly the planning process Spark spawns per query."""
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
        triggers = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
        return elapsed, triggers
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
    reading = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes
    while count < remaining:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                count += 1
                size += len(message.value())
    finished = time.perf_counter()
    consumer.close()
    out.put((count, size, reading, finished))


def time_raw_loop(bootstrap: str, topic: str) -> tuple[float, float]:
    """(wall seconds with the processes' start, seconds from the first consume to the last
    record): the latter is the loop's counterpart of a query's trigger time."""
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
    assert sum(c[0] for c in counts) == RECORDS
    return elapsed, max(c[3] for c in counts) - min(c[2] for c in counts)


def profile_read_path(
    bootstrap: str, topic: str, read_path: str, engine: str = "auto"
) -> tuple[float, str]:
    """Our executor-side read of one partition alone: Kafka fetch + Arrow batches."""
    end = log_end_offsets(bootstrap, topic)[0]
    partition = KafkaInputPartition(
        topic=topic,
        partition=0,
        start=0,
        end=end,
        client_config={"bootstrap.servers": bootstrap},
        read_path=read_path,
        native_engine=engine,
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


class Profiled:
    """perf on the Python processes Spark runs and Java Flight Recorder in its JVM, around
    one query; each summary is the top frames by self time."""

    def __init__(self, spark_pid: int, workdir: Path):
        self.spark_pid, self.workdir = spark_pid, workdir
        self.perf: subprocess.Popen | None = None
        self.jfr = workdir / "query.jfr"

    def __enter__(self) -> Profiled:
        # Python workers are reused between queries (spark.python.worker.reuse), so the ones
        # alive now serve the next query; perf follows threads they start.
        workers = [p for p in _descendants(self.spark_pid) if "python" in _comm(p)]
        if shutil.which("perf") and workers:
            self.perf = subprocess.Popen(
                [
                    *("perf", "record", "-q", "-F", "499", "-g"),
                    *("-o", str(self.workdir / "perf.data")),
                    *("-p", ",".join(map(str, workers))),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        self._jcmd("JFR.start", "name=bench", "settings=profile", f"filename={self.jfr}")
        return self

    def _jcmd(self, *args: str) -> None:
        if shutil.which("jcmd"):
            subprocess.run(
                ["jcmd", str(self.spark_pid), *args], capture_output=True, check=False, timeout=60
            )

    def __exit__(self, *exc: object) -> None:
        self._jcmd("JFR.stop", "name=bench")
        if self.perf is not None:
            self.perf.send_signal(signal.SIGINT)
            self.perf.wait(60)

    def python_top(self, limit: int = 12) -> list[str]:
        data = self.workdir / "perf.data"
        if not data.exists():
            return ["perf unavailable"]
        out = subprocess.run(
            [
                *("perf", "report", "-i", str(data), "--stdio", "--no-children"),
                *("--sort", "dso,sym", "--percent-limit", "1.5", "-g", "none"),
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        rows = [line.strip() for line in out.splitlines() if re.match(r"\s+\d+\.\d+%", line)]
        return [re.sub(r"\s+", " ", r) for r in rows[:limit]]

    def jvm_top(self, limit: int = 12) -> dict[str, list[str]]:
        if not self.jfr.exists() or not shutil.which("jfr"):
            return {"self": ["jfr unavailable"]}
        out = subprocess.run(
            [
                "jfr",
                "print",
                "--events",
                "jdk.ExecutionSample",
                "--stack-depth",
                "64",
                str(self.jfr),
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        own: dict[str, int] = {}
        areas: dict[str, int] = {}
        total = 0
        for event in out.split("jdk.ExecutionSample")[1:]:
            frames = re.findall(r"^\s+([\w$.<>]+)\(", event, re.M)
            if not frames:
                continue
            total += 1
            own[frames[0]] = own.get(frames[0], 0) + 1
            area = next((a for a, pattern in _JVM_AREAS if pattern.search(frames[0])), "other")
            areas[area] = areas.get(area, 0) + 1

        def shares(counts: dict[str, int], limit: int) -> list[str]:
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
            return [f"{100 * n / total:.1f}% {name}" for name, n in top]

        return {
            "samples": [str(total)],
            "self_by_area": shares(areas, 10) if total else [],
            "self": shares(own, limit) if total else [],
        }


# What a JVM sample's own (top) frame is doing, by the first pattern that matches it.
_JVM_AREAS = [
    (area, re.compile(pattern))
    for area, pattern in [
        (
            "Arrow buffers and vectors (reading the Python worker's batches)",
            r"^org\.apache\.arrow\.",
        ),
        (
            "Arrow columns to rows (ArrowColumnVector, ColumnarBatch rows)",
            r"vectorized\.|ArrowColumnVector",
        ),
        (
            "row iteration, metrics, the noop writer (DataSourceV2)",
            r"datasources\.v2\.|InputMetrics|noop",
        ),
        (
            "UnsafeRow projection and copies",
            r"UnsafeRow|unsafe\.Platform|codegen|GeneratedClass|GeneratedIterator",
        ),
        (
            "Python worker I/O (Arrow IPC stream, sockets)",
            r"\.python\.|java\.io\.|sun\.nio\.|java\.nio\.",
        ),
        ("Spark's Kafka source and the Kafka client", r"kafka"),
        ("Scala collections", r"^scala\."),
    ]
]


def main(argv: list[str] | None = None) -> None:
    global RECORDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="alternating runs of each; the best one counts (the JVM's JIT warms up over "
        "about two runs, the built-in source's most)",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated parts to leave out: python, builtin, raw, native, librdkafka, "
        "profile",
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS}")
    args = parser.parse_args(argv)
    RECORDS = args.records
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if "native" not in skip and native_read.module() is None:
        raise SystemExit("the native read path is not installed: make native (or --skip native)")
    workdir = Path(tempfile.mkdtemp(prefix="source-bench-"))
    with KafkaBroker(workdir / "broker") as broker:
        topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="bench")
        produce_s = produce(broker.bootstrap, topic, itertools.repeat(VALUE, RECORDS), PARTITIONS)
        print(f"produced {RECORDS:,} x {len(VALUE)} B records in {produce_s:.1f}s", flush=True)
        jars = builtin_kafka_jars()
        spark = spark_session(jars)
        spark_pid = spark.sparkContext._gateway.proc.pid
        broker_pid = broker.process.pid if broker.process else None

        def measured(fmt: str, options: dict[str, str]) -> tuple[float, float, dict, dict]:
            reset_peak_rss(spark_pid)
            before = cpu_by_role(spark_pid, broker_pid)
            elapsed, triggers = time_query(spark, fmt, options)
            after = cpu_by_role(spark_pid, broker_pid)
            used = {k: round(after[k] - before.get(k, 0.0), 1) for k in after}
            return elapsed, triggers, used, peak_rss_mb(spark_pid)

        ours = {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "commitOffsetsOnCheckpoints": "false",
        }
        queries = {  # name: (format, options), run in this order, alternating
            "python": ("kafka_checkpointed", {**ours, "readPath": "python"}),
            "builtin": (
                "kafka",
                {
                    "kafka.bootstrap.servers": broker.bootstrap,
                    "subscribe": topic,
                    "startingOffsets": "earliest",
                },
            ),
            "native": (
                "kafka_checkpointed",
                {**ours, "readPath": "native", "nativeEngine": "fetch"},
            ),
            "librdkafka": (
                "kafka_checkpointed",
                {**ours, "readPath": "native", "nativeEngine": "librdkafka"},
            ),
        }
        queries = {k: v for k, v in queries.items() if k not in skip}
        runs: dict[str, list[float]] = {name: [] for name in [*queries, "raw"]}  # wall
        processing: dict[str, list[float]] = {name: [] for name in runs}  # triggers (raw: reads)
        cpu: dict[str, dict[str, float]] = {}  # CPU seconds of the best run of each query
        rss: dict[str, dict[str, float]] = {}  # peak RSS of the best run of each query
        builtin_error = "skipped" if "builtin" in skip else None
        for _ in range(args.runs):  # alternate, keep the better run of each (a warm JVM for all)
            for name, (fmt, options) in queries.items():
                if name == "builtin" and builtin_error is not None:
                    continue
                try:
                    elapsed, triggers, used, memory = measured(fmt, options)
                except Exception as exc:
                    if name != "builtin":
                        raise
                    builtin_error = str(exc).splitlines()[0][:500]
                    print(f"  builtin failed: {builtin_error}", flush=True)
                    continue
                if not runs[name] or elapsed < min(runs[name]):
                    cpu[name], rss[name] = used, memory
                runs[name].append(elapsed)
                processing[name].append(triggers)
                print(
                    f"  {name}: {RECORDS / elapsed:,.0f} rows/s ({RECORDS / triggers:,.0f} in its "
                    f"trigger), CPU s {used}, RSS MB {memory}",
                    flush=True,
                )
            if "raw" not in skip:
                elapsed, reading = time_raw_loop(broker.bootstrap, topic)
                runs["raw"].append(elapsed)
                processing["raw"].append(reading)
                print(
                    f"  raw loop: {RECORDS / elapsed:,.0f} msg/s ({RECORDS / reading:,.0f} "
                    "consuming)",
                    flush=True,
                )
        profile: dict[str, object] = {}
        if "profile" not in skip and "native" in queries:
            with Profiled(spark_pid, workdir) as profiled:
                time_query(spark, *queries["native"])
            profile = {
                "python_workers_perf_self": profiled.python_top(),
                "jvm_jfr": profiled.jvm_top(),
            }
        spark.stop()
        read_rates: dict[str, float | None] = {}
        read_profiles: dict[str, str] = {}
        read_paths = {"python": ("python", "auto"), "native": ("native", "fetch")}
        read_paths["librdkafka"] = ("native", "librdkafka")
        for path, (read_path, engine) in read_paths.items():
            if "profile" in skip or path in skip:
                read_rates[path] = None
                continue
            read_rates[path], read_profiles[path] = profile_read_path(
                broker.bootstrap, topic, read_path, engine
            )

    def best_rates(times: dict[str, list[float]]) -> dict[str, float | None]:
        return {name: (RECORDS / min(t) if t else None) for name, t in times.items()}

    rates, processing_rates = best_rates(runs), best_rates(processing)

    def rate(name: str, of: dict[str, float | None] = rates) -> int | None:
        return round(of[name]) if of.get(name) else None

    def ratio(a: str, b: str, of: dict[str, float | None] = rates) -> float | None:
        return round(of[a] / of[b], 3) if of.get(a) and of.get(b) else None

    pairs = {"a_over_b": ("python", "builtin"), "a_over_c": ("python", "raw")}
    pairs |= {"d_over_b": ("native", "builtin"), "d_over_c": ("native", "raw")}
    pairs |= {"d_over_a": ("native", "python"), "d_over_e": ("native", "librdkafka")}

    result = {
        "records": RECORDS,
        "valueBytes": len(VALUE),
        "partitions": PARTITIONS,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "librdkafka_native": native_read.module().librdkafka_version()
        if native_read.module()
        else None,
        "producedIn_s": round(produce_s, 1),
        "rates_per_s": {
            "a_kafka_checkpointed_python_local2": rate("python"),
            "b_spark_builtin_kafka_local2": rate("builtin"),
            "c_raw_confluent_consume_2proc": rate("raw"),
            "d_kafka_checkpointed_native_fetch_local2": rate("native"),
            "e_kafka_checkpointed_native_librdkafka_local2": rate("librdkafka"),
            **{
                f"executor_read_path_alone_1partition_{path}": round(r) if r else None
                for path, r in read_rates.items()
            },
        },
        "ratios": {key: ratio(a, b) for key, (a, b) in pairs.items()},
        "processing_rates_per_s": {
            "what": "records / seconds in the query's triggers (Spark's processedRowsPerSecond: "
            "without the query's start and stop); raw loop: from its first consume to its "
            "last record",
            **{name: rate(name, processing_rates) for name in processing},
        },
        "processing_ratios": {key: ratio(a, b, processing_rates) for key, (a, b) in pairs.items()},
        "query_start_and_stop_s_best_run": {
            name: round(min(runs[name]) - processing[name][runs[name].index(min(runs[name]))], 2)
            for name in runs
            if runs[name]
        },
        "targets": {"d_over_b": ">= 2.5", "d_over_c": ">= 1.0"},
        "builtinSource": {"jars": [Path(j).name for j in jars], "error": builtin_error},
        "runs_s": {k: [round(t, 2) for t in v] for k, v in runs.items()},
        "runs_processing_s": {k: [round(t, 2) for t in v] for k, v in processing.items()},
        "cpu_s_best_run": cpu,
        "peak_rss_mb_best_run": rss,
        "profile_extra_native_run": profile,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    for path, text in read_profiles.items():
        print(f"profile of the executor read path, {path} (one partition, in-process):")
        print(text)
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
