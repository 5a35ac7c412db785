"""End-to-end latency, side by side in one run: same broker, same Spark session, same two cores.

A record's latency is from the moment a paced producer sends it (its value carries the time)
to the moment a reader of the sink can see it: for the file sink, the `_spark_metadata` entry
naming its file; for the Kafka sink, a consumer of the output topic receiving it
(bench/latency_load.py). Queries, each on a topic of its own:

- `native`: our `kafka_checkpointed` source, native read path, fetch engine;
- `python`: our source on its pure-Python read path;
- `builtin`: Spark's built-in Kafka source (spark-sql-kafka, bench/spark-kafka/pom.xml);

each in micro-batch mode with triggers of 0, 100 ms and 1 s, into a text file sink and into
Spark's built-in Kafka sink; and `realtime`: the built-in source in Spark's real-time mode
(Kafka sink only: the mode allows no file sink), the anchor. Every query runs the rates
1 k, 10 k and 100 k records/s in turn; the first WARM_S of each phase are left out; p50, p99
and max of the rest, and the batches per second with input. Our source runs as users run it
(its defaults: minFetchIntervalMs=100, offsets committed to a group on each checkpoint).

    python bench/latency_bench.py            the full matrix (about 13 min, after an untimed
                                             query per source that warms the JVM), writes
                                             bench/results/latency.json
    python bench/latency_bench.py --quick    a smoke check (about 2 min), writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from latency_load import PacedProducer, Watcher, file_sink_watcher, kafka_sink_watcher  # noqa: E402
from latency_stats import batches_per_s, ratio, summary_ms  # noqa: E402
from source_bench import builtin_kafka_jars  # noqa: E402

from devbed.kafka_broker import KafkaBroker  # noqa: E402
from spark_app.source import native_read  # noqa: E402
from tests.support.kafka_tools import new_topic  # noqa: E402

RESULTS = REPO / "bench" / "results" / "latency.json"
PARTITIONS = 2  # one per core; real-time mode holds one task slot per input partition
SOURCES = ("native", "python", "builtin")
TRIGGERS_MS = (0, 100, 1000)
RATES = (1_000, 10_000, 100_000)
SINKS = ("file", "kafka")
REALTIME_CHECKPOINT = "5 seconds"  # real-time mode's batch: a checkpoint interval, not a wait


@dataclass(frozen=True)
class Plan:
    rates: tuple[int, ...]
    triggers_ms: tuple[int, ...]
    sinks: tuple[str, ...]
    sources: tuple[str, ...]
    warm_s: float
    measure_s: float
    drain_s: float


def spark_session(jars: list[str], ui: bool = False):
    from pyspark.sql import SparkSession

    from spark_app.source.source import KafkaCheckpointedDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # the executors' Python workers import the bench's probe source (bench/latency_probe.py)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "bench")])
    spark = (
        SparkSession.builder.master(f"local[{PARTITIONS}]")
        .appName("latency-bench")
        .config("spark.ui.enabled", str(ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .config("spark.jars", ",".join(jars))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaCheckpointedDataSource)
    return spark


def reader(
    spark,
    source: str,
    bootstrap: str,
    topic: str,
    fmt: str = "kafka_checkpointed",
    extra: dict[str, str] | None = None,
):
    if source in ("builtin", "realtime"):
        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
        return spark.readStream.format("kafka").options(**options, startingOffsets="earliest")
    paths = {"native": {"readPath": "native", "nativeEngine": "fetch"}, "python": {}}
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.group.id": f"latency-{topic}",  # the default: commit on each checkpoint
        "subscribe": topic,
        "startingOffsets": "earliest",
        "readPath": "python" if source == "python" else "native",
        **paths[source],
        **(extra or {}),
    }
    return spark.readStream.format(fmt).options(**options)


def start_query(spark, stream, sink: str, trigger_ms: int | None, where: dict[str, str]):
    """`trigger_ms` None: real-time mode. `where`: checkpoint, path (file) or topic (Kafka)."""
    df = stream.load()
    if sink == "file":
        writer = (
            df.selectExpr("CAST(value AS STRING) AS value")
            .writeStream.format("text")
            .option("path", where["path"])
        )
    else:
        writer = (
            df.select("value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", where["bootstrap"])
            .option("topic", where["topic"])
        )
    writer = writer.option("checkpointLocation", where["checkpoint"])
    if trigger_ms is None:
        writer = writer.outputMode("update").trigger(realTime=REALTIME_CHECKPOINT)
    else:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


def wait_started(query, timeout_s: float = 60.0) -> None:
    """Until the query has started its sources (a real-time batch runs from then on)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        message = query.status["message"]
        if query.lastProgress is not None or not message.startswith(("Init", "Start")):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the query did not start within {timeout_s} s: {query.status}")


def progress_batches(query) -> list[tuple[float, int]]:
    """(start in epoch seconds, input rows) of each batch the query reported."""
    out = []
    for progress in query.recentProgress:
        started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
        out.append((started.timestamp(), int(progress["numInputRows"])))
    return out


def cells_of(
    phases: list[dict], produced: array, visible: array, batches, plan: Plan
) -> list[dict]:
    """One cell per phase: the latencies of records sent after its warm-up."""
    cells = []
    for phase in phases:
        begin_ns = int((phase["began_s"] + plan.warm_s) * 1e9)
        end_ns = int(phase["ended_s"] * 1e9)
        latencies = sorted(
            v - p for p, v in zip(produced, visible, strict=True) if begin_ns <= p < end_ns
        )
        window = (phase["began_s"] + plan.warm_s, phase["ended_s"])
        cells.append(
            {
                "rate": phase["rate"],
                "reached_per_s": phase["reached_per_s"],
                **summary_ms(latencies),
                # False: the sink had not shown every record sent so far `drain_s` after the
                # phase ended; the query fell behind, so p99 and max are lower bounds
                "caught_up": phase["caught_up"],
                "batches_per_s": batches_per_s(batches, window),
                "loadavg_1m": phase["loadavg_1m"],
            }
        )
    return cells


def run_query(spark, broker, producer, source, sink, trigger_ms, plan, workdir) -> dict:
    """One query through every rate of the plan; its cells, or the error that stopped it."""
    topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="lat")
    where = {"checkpoint": str(workdir / f"cp-{topic}"), "bootstrap": broker.bootstrap}
    if sink == "file":
        where["path"] = str(workdir / f"out-{topic}")
        watcher: Watcher = file_sink_watcher(Path(where["path"]), workdir)
    else:
        where["topic"] = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="latout")
        watcher = kafka_sink_watcher(broker.bootstrap, where["topic"], PARTITIONS, workdir)
    label = f"{source} -> {sink}, trigger " + (
        "real-time" if trigger_ms is None else f"{trigger_ms} ms"
    )
    query = None
    phases: list[dict] = []
    try:
        query = start_query(
            spark, reader(spark, source, broker.bootstrap, topic), sink, trigger_ms, where
        )
        wait_started(query)
        # A few records first, seen at the sink before any phase: the one-off costs of a
        # query's first batches (our source's planner process, the Python workers, the JIT)
        # fall on them, not on the first phase.
        sent = producer.phase(topic, PARTITIONS, 20, 1.0)["sent"]
        if not watcher.wait_for(sent, 90):
            raise RuntimeError(f"the first {sent} records did not reach the sink in 90 s")
        for rate in plan.rates:
            seconds = plan.warm_s + plan.measure_s
            phase = producer.phase(topic, PARTITIONS, rate, seconds)
            phase["seconds"] = seconds
            sent += phase["sent"]
            caught_up = watcher.wait_for(sent, plan.drain_s)
            phase["loadavg_1m"] = round(os.getloadavg()[0], 2)
            phase["caught_up"] = caught_up
            phases.append(phase)
            print(
                f"  {label}: {rate}/s (reached {phase['reached_per_s']}/s), "
                f"{'caught up' if caught_up else 'behind'}",
                flush=True,
            )
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()).splitlines()[0])
        batches = progress_batches(query)
        error = None
    except Exception as exc:  # a query that cannot run here is a result, said as such
        error, batches = str(exc).splitlines()[0][:600], []
        print(f"  {label}: FAILED {error}", flush=True)
    finally:
        if query is not None:
            query.stop()
        produced, visible = watcher.stop()
    cells = cells_of(phases, produced, visible, batches, plan) if phases else []
    for cell in cells:
        print(f"    {cell}", flush=True)
    trigger = "real-time" if trigger_ms is None else f"{trigger_ms} ms"
    sent_total = sent if phases else 0
    return {
        "source": source,
        "sink": sink,
        "trigger": trigger,
        "cells": cells,
        "unseen_at_stop": max(0, sent_total - len(produced)),
        "error": error,
    }


def ratios(queries: list[dict]) -> list[dict]:
    """Ours / built-in for each sink, trigger and rate (p50, p99); and ours / real-time mode
    (Kafka sink), the issue's anchor."""
    cells = {
        (q["source"], q["sink"], q["trigger"], c["rate"]): c for q in queries for c in q["cells"]
    }
    out = []
    for (source, sink, trigger, rate), cell in sorted(cells.items(), key=lambda kv: str(kv[0])):
        if source not in ("native", "python"):
            continue
        row = {"source": source, "sink": sink, "trigger": trigger, "rate": rate}
        builtin = cells.get(("builtin", sink, trigger, rate))
        realtime = cells.get(("realtime", sink, "real-time", rate))
        for q in ("p50_ms", "p99_ms"):
            row[f"{q[:3]}_over_builtin"] = ratio(cell.get(q), builtin.get(q) if builtin else None)
            if realtime:
                row[f"{q[:3]}_over_realtime"] = ratio(cell.get(q), realtime.get(q))
        out.append(row)
    return out


def the_plan(quick: bool) -> tuple[Plan, list[tuple[str, str, int | None]]]:
    """The plan and its queries (source, sink, trigger), sources interleaved within each
    sink and trigger so a drift in the machine's load falls on all alike."""
    if quick:
        plan = Plan((1_000, 10_000), (0,), ("kafka",), SOURCES, 2.0, 4.0, 10.0)
    else:
        plan = Plan(RATES, TRIGGERS_MS, SINKS, SOURCES, 3.0, 7.0, 15.0)
    queries: list[tuple[str, str, int | None]] = []
    for sink in plan.sinks:
        for trigger in plan.triggers_ms:
            queries += [(source, sink, trigger) for source in plan.sources]
        if sink == "kafka":
            queries.append(("realtime", "kafka", None))
    return plan, queries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke check; writes nothing")
    parser.add_argument("--only", default="", help="comma-separated sources to run")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS}")
    args = parser.parse_args(argv)
    if native_read.module() is None:
        raise SystemExit("the native read path is not installed: make native")
    plan, queries = the_plan(args.quick)
    if args.only:
        queries = [q for q in queries if q[0] in args.only.split(",")]
    began, load_before = time.monotonic(), os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="latency-bench-"))
    jars = builtin_kafka_jars()
    with KafkaBroker(workdir / "broker") as broker:
        producer = PacedProducer(broker.bootstrap)
        spark = spark_session(jars)
        # an untimed query per source first: the JVM's JIT warms on them, not on the first
        # measured cell (the run of 2026-11-30 without it: that cell at 5.68x, its profile
        # with a warm JVM at 1.39x)
        warm_up = Plan((1_000,), (0,), ("file",), SOURCES, 1.0, 3.0, 10.0)
        for source in SOURCES if not args.quick else ():
            run_query(spark, broker, producer, source, "file", 0, warm_up, workdir)
        done = [
            run_query(spark, broker, producer, source, sink, trigger, plan, workdir)
            for source, sink, trigger in queries
        ]
        spark.stop()
        producer.close()
    import pyspark

    result = {
        "what": "end-to-end latency: the producer's send → visible to a reader of the sink",
        "quick": args.quick,
        "plan": {**plan.__dict__, "partitions": PARTITIONS, "valueBytes": 100},
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "spark": pyspark.__version__,
        "builtinKafkaJars": [Path(j).name for j in jars],
        "realtimeCheckpointInterval": REALTIME_CHECKPOINT,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "run_minutes": round((time.monotonic() - began) / 60, 1),
        "queries": done,
        "ratios": ratios(done),
    }
    if not (args.quick or args.no_write):
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratios"], indent=1))
    print(
        f"run: {result['run_minutes']} min, load before {result['loadavg_before']}, "
        f"after {result['loadavg_after']}"
    )
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
