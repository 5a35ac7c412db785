"""Kafka sinks side by side in one run: the exactly-once sink, the at-least-once sink and
Spark's built-in Kafka sink, on the same broker, topic, source and Spark session.

One input topic of --records values (VALUE_BYTES each, 2 partitions) on a real broker, read by
our source (native read path, fetch engine) with trigger availableNow and maxOffsetsPerTrigger
set to each --batches size in turn, so the same records arrive in small and in large batches.
Each query writes `key, value` to an output topic of its own:
  exactly_once   spark_app/sinks/kafka_eos_sink.py: one transaction per source partition and
                 batch, the range's end committed with it (deliveryGuarantee: exactly-once)
  at_least_once  spark_app/sinks/kafka_sink.py: an idempotent producer, flushed per task
  builtin        Spark's own Kafka sink (spark-sql-kafka, bench/spark-kafka/pom.xml)
The sinks are interleaved in every round, so a drift in the machine's load falls on all alike.
A query's rate is records / the seconds of its batches (the sum of Spark's triggerExecution:
availableNow runs them back to back); the latency a sink adds to a batch is its median
addBatch (the batch's job: the read, and the write) less the at-least-once sink's of the same
round. Every output topic is then read with `read_committed`: each sink must show every
record exactly once (no failure happens here, so the at-least-once sinks write once too).
Ratios are taken within a round, then their median and spread.

First, what the exactly-once sink's per-task writer costs to open (`writer_open_ms`): the
same transactional id opened, given a one-record transaction and closed, OPENS times with
librdkafka's default sparse connections and as the sink opens it (every broker connected at
once), interleaved.

    python bench/kafka_sink_bench.py               writes bench/results/kafka-sink.json
    python bench/kafka_sink_bench.py --opens-only  only the opens, into that file
    python bench/kafka_sink_bench.py --quick       a smoke check, writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from latency_bench import spark_session  # noqa: E402
from produce import produce  # noqa: E402
from source_bench import builtin_kafka_jars  # noqa: E402
from table_sink_bench import spread  # noqa: E402

from devbed.kafka_broker import KafkaBroker  # noqa: E402
from spark_app.source.source import FORMAT  # noqa: E402
from tests.support.kafka_tools import new_topic  # noqa: E402

RESULTS = REPO / "bench" / "results" / "kafka-sink.json"
PARTITIONS = 2
VALUE_BYTES = 200
SINKS = ("exactly_once", "at_least_once", "builtin")
OPENS = 12
CONNECTIONS = {"sparse (librdkafka's default)": "true", "eager (the sink's)": "false"}


def values(records: int):
    """Values of VALUE_BYTES bytes that name their record: the output check reads them back."""
    for n in range(records):
        head = b"%012d|" % n
        yield head + b"x" * (VALUE_BYTES - len(head))


def sink_options(sink: str, bootstrap: str, topic: str, name: str) -> tuple[str, dict]:
    """The writer's format and options for `sink`, as the runner sets them
    (spark_app/runner/query.py: kafka_sink_options)."""
    if sink == "builtin":
        return "kafka", {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    if sink == "exactly_once":
        options |= {
            "deliveryGuarantee": "exactly-once",
            "transactionalIdPrefix": f"bench.{name}",
            "checkpointId": name,
            "transactionTimeoutMs": "60000",
        }
    return FORMAT, options


def run_query(spark, bootstrap: str, topic: str, sink: str, batch: int, work: Path) -> dict:
    """One query from the topic's start to its end into a new output topic; its progress."""
    out = new_topic(bootstrap, partitions=PARTITIONS, prefix=f"out-{sink.replace('_', '-')}")
    fmt, options = sink_options(sink, bootstrap, out, out)
    source = {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.group.id": f"bench-{out}",
        "subscribe": topic,
        "startingOffsets": "earliest",
        "readPath": "native",
        "nativeEngine": "fetch",
        "maxOffsetsPerTrigger": str(batch),
        # the read tells the exactly-once sink its task's range (spark_app/kafka/config.py
        # sets it for that sink's jobs)
        "announceTaskRanges": str(sink == "exactly_once").lower(),
    }
    query = (
        spark.readStream.format(FORMAT)
        .options(**source)
        .load()
        .select("key", "value")
        .writeStream.format(fmt)
        .options(**options)
        .option("checkpointLocation", str(work / f"cp-{out}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(900)
    if query.exception() is not None:
        raise RuntimeError(f"{sink}: {str(query.exception()).splitlines()[0]}")
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    return {"out": out, "progress": progress}


def measured(progress: list[dict], records: int) -> dict[str, Any]:
    rows = sum(p["numInputRows"] for p in progress)
    if rows != records:
        raise RuntimeError(f"the query read {rows} rows, expected {records}")
    busy_ms = sum(p["durationMs"]["triggerExecution"] for p in progress)
    add_batch = [p["durationMs"]["addBatch"] for p in progress]
    return {
        "records_per_s": round(records / (busy_ms / 1000)),
        "batches": len(progress),
        "add_batch_ms_median": statistics.median(add_batch),
        "trigger_ms_median": statistics.median(
            p["durationMs"]["triggerExecution"] for p in progress
        ),
    }


def output_check(bootstrap: str, topic: str, records: int) -> dict[str, int]:
    """The output topic as a read_committed consumer sees it: every record once, or why not."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(PARTITIONS)}  # fmt: skip
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: Counter[int] = Counter()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    seen[int(message.value()[:12])] += 1
            at = consumer.position([TopicPartition(topic, p) for p in ends])
            if all(tp.offset >= ends[tp.partition] for tp in at):  # past the last marker too
                break
    finally:
        consumer.close()
    missing = sum(1 for n in range(records) if n not in seen)
    return {"distinct": len(seen), "duplicates": sum(seen.values()) - len(seen), "missing": missing}


def writer_opens(bootstrap: str, topic: str) -> dict[str, Any]:
    """Milliseconds to open the sink's transactional writer (`init_transactions`), each way
    of connecting, OPENS times interleaved; each open follows a committed transaction."""
    from spark_app.kafka.transactions import Progress, TransactionalWriter

    took: dict[str, list[float]] = {way: [] for way in CONNECTIONS}
    for n in range(OPENS):
        for way, sparse in CONNECTIONS.items():
            client = {"bootstrap.servers": bootstrap, "enable.sparse.connections": sparse}
            writer_id = f"bench-open-{sparse}"
            writer = TransactionalWriter(client, writer_id, writer_id, 60.0, 60_000)
            began = time.monotonic()
            writer.open()
            took[way].append((time.monotonic() - began) * 1000)
            writer.commit(lambda p: p.produce(topic, b"x"), topic, 0, Progress(n + 1, "bench"))
            writer.close()
    return {way: {"mean": round(statistics.mean(t), 1), **spread(t, 1)} for way, t in took.items()}


def summary(runs: dict[str, list[dict]]) -> dict[str, Any]:
    """Per sink the median rate; within a round, the rates' ratios and the latency the sink
    adds to a batch over the at-least-once sink's."""
    out: dict[str, Any] = {
        sink: spread([r["records_per_s"] for r in rs], 0) for sink, rs in runs.items()
    }
    for a, b in (("exactly_once", "at_least_once"), ("exactly_once", "builtin"),
                 ("at_least_once", "builtin")):  # fmt: skip
        out[f"{a}_over_{b}"] = spread(
            [x["records_per_s"] / y["records_per_s"] for x, y in zip(runs[a], runs[b], strict=True)]
        )
    for sink in ("exactly_once", "builtin"):
        out[f"{sink}_added_ms_per_batch"] = spread(
            [
                x["add_batch_ms_median"] - y["add_batch_ms_median"]
                for x, y in zip(runs[sink], runs["at_least_once"], strict=True)
            ],
            1,
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batches", default="5000,50000", help="maxOffsetsPerTrigger sizes")
    parser.add_argument("--runs", type=int, default=3, help="rounds, the sinks interleaved")
    parser.add_argument("--quick", action="store_true", help="a smoke check; writes nothing")
    parser.add_argument("--opens-only", action="store_true", help="only the writer's opens")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the results")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.batches, args.runs = 20_000, "5000", 1
    sizes = [int(b) for b in args.batches.split(",")]
    load_at_start = round(os.getloadavg()[0], 2)
    workdir = Path(tempfile.mkdtemp(prefix="kafka-sink-bench-"))
    with KafkaBroker(workdir / "broker") as broker:
        opens = writer_opens(broker.bootstrap, new_topic(broker.bootstrap, 1, prefix="opens"))
        print(f"the writer's open, ms: {json.dumps(opens)}", flush=True)
        if args.opens_only:
            result = json.loads(args.out.read_text())
            args.out.write_text(json.dumps({**result, "writer_open_ms": opens}, indent=1) + "\n")
            return
        topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="sinkin")
        produce_s = produce(broker.bootstrap, topic, values(args.records), PARTITIONS)
        print(f"produced {args.records:,} x {VALUE_BYTES} B in {produce_s:.1f}s", flush=True)
        spark = spark_session(builtin_kafka_jars())
        by_size: dict[str, Any] = {}
        try:
            for size in sizes:
                runs: dict[str, list[dict]] = {sink: [] for sink in SINKS}
                for _ in range(args.runs):
                    for sink in SINKS:
                        query = run_query(spark, broker.bootstrap, topic, sink, size, workdir)
                        run = measured(query["progress"], args.records)
                        run["output"] = output_check(broker.bootstrap, query["out"], args.records)
                        if run["output"] != {
                            "distinct": args.records,
                            "duplicates": 0,
                            "missing": 0,
                        }:
                            raise RuntimeError(f"{sink}: not every record once: {run['output']}")
                        run["loadavg_1m"] = round(os.getloadavg()[0], 2)
                        runs[sink].append(run)
                        print(f"  batch {size}, {sink}: {run}", flush=True)
                by_size[str(size)] = {"runs": runs, "summary": summary(runs)}
                print(f"batch {size}: {json.dumps(by_size[str(size)]['summary'])}", flush=True)
        finally:
            spark.stop()
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "loadavg_1m_at_start": load_at_start,
        "records": args.records,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "writer_open_ms": opens,
        "by_batch_size": by_size,
    }
    if not args.quick:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
