"""Where one small micro-batch's milliseconds go: our source (native and pure-Python read
paths) beside Spark's built-in Kafka source, trigger 0, 1 k records/s, text file sink.

Three views of the same batches, lined up by time:
- Spark's StreamingQueryProgress durationMs (latestOffset, walCommit, queryPlanning,
  getBatch, addBatch, commitOffsets, triggerExecution), for both sources;
- the stage of each batch from Spark's REST API (submission → first task launched, the task's
  deserialisation and run time, submission → completion), for both sources;
- our source's own stopwatch (bench/latency_probe.py): the runner's latestOffset, partitions
  and commit; each executor read() from its call to its first Arrow batch and its last; from
  these, the gaps between them: partitions() → the first read() call (task scheduling and
  launch, handing the pickled reader and partition to a Python worker) and the last read()'s
  end → the trigger's end (Arrow to rows, the sink's write and commit, commits/N).
Medians over the batches after a warm-up. Writes bench/results/latency-profile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency_bench import (
    PARTITIONS,
    REPO,
    reader,
    spark_session,
    start_query,
    wait_started,
)
from latency_load import PacedProducer, file_sink_watcher
from latency_probe import LOG_ENV, ProbeDataSource
from latency_stats import summary_ms
from source_bench import builtin_kafka_jars

from devbed.kafka_broker import KafkaBroker
from tests.support.kafka_tools import new_topic

RESULTS = REPO / "bench" / "results" / "latency-profile.json"
DURATIONS = (
    "latestOffset",
    "walCommit",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _epoch(text: str) -> float:
    """Spark's REST times ("2026-11-29T05:20:01.123GMT") in epoch seconds."""
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def stage_metrics(ui: str, window: tuple[float, float]) -> dict[str, float | None]:
    """Medians (ms) over the completed stages submitted inside `window`."""
    base = f"{ui}/api/v1/applications"
    with urllib.request.urlopen(base, timeout=10) as response:
        app = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{base}/{app}/stages?status=complete", timeout=30) as response:
        stages = json.load(response)
    rows: dict[str, list[float]] = {k: [] for k in ("launch", "deserialize", "run", "stage")}
    for stage in stages:
        submitted = _epoch(stage["submissionTime"])
        if not window[0] <= submitted < window[1] or not stage.get("firstTaskLaunchedTime"):
            continue
        tasks = max(1, stage["numCompleteTasks"])
        rows["launch"].append((_epoch(stage["firstTaskLaunchedTime"]) - submitted) * 1000)
        rows["deserialize"].append(stage["executorDeserializeTime"] / tasks)
        rows["run"].append(stage["executorRunTime"] / tasks)
        rows["stage"].append((_epoch(stage["completionTime"]) - submitted) * 1000)
    return {
        "stages": len(rows["stage"]),
        "submitted_to_first_task_launched_ms": _median(rows["launch"]),
        "task_deserialize_ms_per_task": _median(rows["deserialize"]),
        "task_run_ms_per_task": _median(rows["run"]),
        "stage_submitted_to_completed_ms": _median(rows["stage"]),
    }


def probe_breakdown(lines: list[dict], progress: list[dict], window) -> dict:
    """Our stopwatch's segments of each batch (ms), medians; see the module's docstring."""
    seg: dict[str, list[float]] = {
        k: []
        for k in (
            "runner_latestOffset",
            "trigger_start_to_partitions_call",
            "runner_partitions",
            "partitions_to_first_read_call",
            "read_call_to_first_arrow_batch",
            "read_first_call_to_last_end",
            "last_read_end_to_trigger_end",
            "runner_commit",
        )
    }
    by_call: dict[str, list[dict]] = {}
    for line in lines:
        by_call.setdefault(line["call"], []).append(line)
    for call in ("latestOffset", "commit"):
        seg[f"runner_{call}"] = [
            (x["ended"] - x["began"]) * 1000
            for x in by_call.get(call, [])
            if window[0] <= x["began"] < window[1]
        ]
    pids = set()
    for p in progress:
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        end = start + p["durationMs"]["triggerExecution"] / 1000
        if not (window[0] <= start < window[1]) or p["numInputRows"] == 0:
            continue
        inside = [x for x in by_call.get("partitions", []) if start <= x["began"] < end]
        reads = [x for x in by_call.get("read", []) if start <= x["began"] < end]
        if not inside or not reads:
            continue
        planned = inside[0]
        first_call = min(r["began"] for r in reads)
        last_end = max(r["ended"] for r in reads)
        pids |= {r["pid"] for r in reads}
        seg["trigger_start_to_partitions_call"].append((planned["began"] - start) * 1000)
        seg["runner_partitions"].append((planned["ended"] - planned["began"]) * 1000)
        seg["partitions_to_first_read_call"].append((first_call - planned["ended"]) * 1000)
        seg["read_call_to_first_arrow_batch"] += [
            (r["first"] - r["began"]) * 1000 for r in reads if r["first"]
        ]
        seg["read_first_call_to_last_end"].append((last_end - first_call) * 1000)
        seg["last_read_end_to_trigger_end"].append((end - last_end) * 1000)
    return {
        **{f"{k}_ms": _median(v) for k, v in seg.items()},
        "batches_matched": len(seg["runner_partitions"]),
        "python_worker_pids_serving_reads": len(pids),
    }


# (name, source, our extra options): the last one asks for the log ends at every trigger, as
# Spark's own source does, where our default caches them for minFetchIntervalMs (100 ms)
QUERIES = (
    ("native", "native", {}),
    ("python", "python", {}),
    ("builtin", "builtin", {}),
    ("native, minFetchIntervalMs=0", "native", {"minFetchIntervalMs": "0"}),
)


def profile_one(spark, broker, producer, query, workdir: Path, args) -> dict:
    name, source, extra = query
    topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="prof")
    out = workdir / f"out-{topic}"
    where = {"checkpoint": str(workdir / f"cp-{topic}"), "path": str(out)}
    watcher = file_sink_watcher(out, workdir)
    fmt = "kafka_checkpointed_probe"
    started = time.time()
    running = start_query(
        spark, reader(spark, source, broker.bootstrap, topic, fmt, extra), "file", 0, where
    )
    wait_started(running)
    primed = producer.phase(topic, PARTITIONS, 20, 1.0)["sent"]  # as in latency_bench.py
    watcher.wait_for(primed, 90)
    start_s = time.time() - started
    phase = producer.phase(topic, PARTITIONS, args.rate, args.warm + args.seconds)
    watcher.wait_for(primed + phase["sent"], 20)
    progress = running.recentProgress
    running.stop()
    produced, visible = watcher.stop()
    window = (phase["began_s"] + args.warm, phase["ended_s"])
    begin_ns = int(window[0] * 1e9)
    busy = [p for p in progress if p["numInputRows"] > 0]
    in_window = [
        p
        for p in busy
        if window[0]
        <= datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        < window[1]
    ]
    result = {
        "query": name,
        "query_start_to_ready_s": round(start_s, 2),
        "latency": summary_ms(
            sorted(v - p for p, v in zip(produced, visible, strict=True) if p >= begin_ns)
        ),
        "batches": len(in_window),
        "rows_per_batch_median": _median([p["numInputRows"] for p in in_window]),
        "durationMs_median": {
            k: _median([p["durationMs"].get(k, 0) for p in in_window]) for k in DURATIONS
        },
        "stages": stage_metrics(spark.sparkContext.uiWebUrl, window),
        "batches_per_s": round(len(in_window) / (window[1] - window[0]), 2),
    }
    if source != "builtin":
        log = Path(os.environ[LOG_ENV])
        lines = [json.loads(x) for x in log.read_text().splitlines()]
        lines = [x for x in lines if x.get("topic") == topic]
        result["ours"] = probe_breakdown(lines, in_window, window)
    print(json.dumps(result, indent=1), flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--warm", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="latency-profile-"))
    os.environ[LOG_ENV] = str(workdir / "probe.jsonl")
    load_before = os.getloadavg()
    jars = builtin_kafka_jars()
    with KafkaBroker(workdir / "broker") as broker:
        producer = PacedProducer(broker.bootstrap)
        spark = spark_session(jars, ui=True)
        spark.dataSource.register(ProbeDataSource)
        # once untimed: the session's first query runs on a cold JVM (its JIT), which would
        # fall on whichever query came first
        profile_one(spark, broker, producer, QUERIES[0], workdir, args)
        profiles = [profile_one(spark, broker, producer, query, workdir, args) for query in QUERIES]
        spark.stop()
        producer.close()
    result = {
        "what": "one small micro-batch, where its milliseconds go (medians)",
        "rate_per_s": args.rate,
        "trigger": "0 ms",
        "sink": "text file sink",
        "measure_s": args.seconds,
        "partitions": PARTITIONS,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "profiles": profiles,
    }
    if not args.no_write:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
