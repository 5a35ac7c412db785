"""Table sinks against the Parquet file sink, side by side in one run: same broker, topic, job.

One topic of --records JSON values (~200 B each, 3 partitions) on a real broker. Then the job
runner as a process, as a driver pod runs it (`python -m spark_app`, local[2]), with trigger
availableNow and maxOffsetsPerTrigger (so --batches batches) and the same source, once per
sink and round, the sinks interleaved in every round:
  parquet         Spark's Parquet file sink, checkpoints and output on the local disk
  delta           the Delta sink (spark_app/sinks/delta_sink.py), the same on the local disk
  parquet_s3a     the Parquet file sink with checkpoints and output on MinIO (s3a://)
  delta_s3a       the Delta sink with checkpoints and table on MinIO
  delta_before    the Delta sink of another checkout (--baseline-code-root, e.g. an export of
                  main): a change to delta_sink.py measured side by side
  iceberg         the Iceberg sink (spark_app/sinks/iceberg_sink.py) through a SQL catalog in a
                  SQLite file, checkpoints and table on the local disk
A run's rate is records / the seconds of its batches (the runner's report: the sum of Spark's
triggerExecution over the batches, which availableNow runs back to back: the first batch's
start to the last one's end); the JVM's start and stop are apart (runner_wall_s). Ratios are
taken within a round (delta / parquet of the same round), then their median and spread.
Then where the Delta sink's time goes: one more run of each Delta code on the local disk with
its foreachBatch function profiled (bench/delta_profile.py). Last, the Spark image's size
(docker), against the image without deltalake.
Writes bench/results/table-sink.json (unless --no-write, or --out elsewhere).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from produce import produce  # noqa: E402

from devbed.kafka_broker import KafkaBroker  # noqa: E402
from devbed.object_store import MinioServer, Storage  # noqa: E402
from tests.support.kafka_tools import new_topic  # noqa: E402
from tests.support.runner_process import job_manifest  # noqa: E402

RESULTS = REPO / "bench" / "results" / "table-sink.json"
PARTITIONS = 3
VALUE_BYTES = 200
SINKS = ("parquet", "delta", "parquet_s3a", "delta_s3a", "delta_before", "iceberg")
# streamingjob/spark:0.1.0 built from 65b279b's lock, the last one without deltalake.
IMAGE_BYTES_BEFORE = 1_421_064_548


def json_values(records: int) -> Iterator[bytes]:
    """Order-like JSON values of VALUE_BYTES bytes, every field varying with the record."""
    for n in range(records):
        head = (
            f'{{"id":{n},"customer":"customer-{n % 50_000:05d}",'
            f'"amount":{n % 100_000 / 100:.2f},"status":"{("NEW", "PAID")[n % 2]}","note":"'
        )
        yield (head + "x" * (VALUE_BYTES - len(head) - 2) + '"}').encode()


def manifest(sink: str, name: str, bootstrap: str, topic: str, storage: Storage, batch: int):
    """The same job each time (tests/support/runner_process.py's), but for its sink."""
    job = job_manifest(
        name,
        bootstrap,
        topic,
        Path(),  # unused: `storage` says where
        storage,
        maxOffsetsPerTrigger=batch,
        startingOffsets="earliest",
    )
    spec = job["spec"]
    spec["job"]["trigger"] = {"availableNow": True}
    spec["job"]["sink"] = {"format": "delta" if sink.startswith("delta") else "parquet"}
    spec["job"]["sink"]["path"] = storage.output
    if sink == "iceberg":
        work = Path(storage.output.removeprefix("file://")).parent
        catalog = {"type": "sql", "uri": f"sqlite:///{work}/catalog.db",
                   "warehouse": f"file://{work}/warehouse"}  # fmt: skip
        spec["job"]["sink"] = {"format": "iceberg", "table": "bench.orders", "catalog": catalog}
    spec["sparkConf"] = {"spark.sql.shuffle.partitions": "2"}
    return job


def run_job(job: dict, work: Path, code_root: Path, env: dict[str, str], wrapper: list[str]):
    """The runner (or `wrapper` around it) to its end; its report and its process's wall."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.yaml").write_text(yaml.safe_dump(job))
    report_path = work / "report.json"
    args = [sys.executable, *wrapper] if wrapper else [sys.executable, "-m", "spark_app"]
    args += ["--manifest", str(work / "job.yaml"), "--report-file", str(report_path)]
    started = time.perf_counter()
    with open(work / "runner.log", "wb") as log:
        done = subprocess.run(  # cwd: `-m spark_app` imports from the code root first
            args,
            cwd=code_root,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, "PYTHONPATH": str(code_root), "PYTHONUNBUFFERED": "1"},
            timeout=900,
            check=False,
        )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = (work / "runner.log").read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(f"runner exited {done.returncode} in {work}:\n" + "\n".join(tail))
    return json.loads(report_path.read_text()), wall


class Bed:
    """The broker's topic, the object store and the code roots every run shares."""

    def __init__(self, args: argparse.Namespace, bootstrap: str, topic: str, store):
        self.args, self.bootstrap, self.topic, self.store = args, bootstrap, topic, store
        self.runs = 0

    def storage(self, sink: str, work: Path) -> Storage:
        if not sink.endswith("_s3a"):
            return Storage(work)
        return Storage(work, self.store, self.store.create_bucket(f"run-{self.runs}"))

    def code_root(self, sink: str) -> Path:
        return self.args.baseline_code_root if sink == "delta_before" else REPO

    def run(self, sink: str, workdir: Path, wrapper: list[str] | None = None):
        self.runs += 1
        work = workdir / f"run-{self.runs}-{sink}"
        storage = self.storage(sink, work)
        name = f"{sink.replace('_', '-')}-{self.runs}"
        job = manifest(sink, name, self.bootstrap, self.topic, storage, self.args.batch)
        return run_job(job, work, self.code_root(sink), storage.env, wrapper or [])


def measured(report: dict[str, Any], wall: float, records: int) -> dict[str, Any]:
    throughput = report["throughput"]
    if throughput["rows"] != records:
        raise RuntimeError(f"the job read {throughput['rows']} rows, expected {records}")
    return {
        "records_per_s": round(records / (throughput["busyMs"] / 1000)),
        "batches": throughput["batches"],
        "batches_s": round(throughput["busyMs"] / 1000, 2),
        "sink_s": round(throughput["executionMs"] / 1000, 2),  # addBatch: run + write
        "runner_wall_s": round(wall, 1),
    }


def spread(values: list[float], places: int = 3) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), places),
        "min": round(min(values), places),
        "max": round(max(values), places),
        "runs": [round(v, places) for v in values],
    }


def ratios(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each pair's ratio of rates within a round, then their median and spread."""
    pairs = {
        "delta_over_parquet": ("delta", "parquet"),
        "delta_s3a_over_parquet_s3a": ("delta_s3a", "parquet_s3a"),
        "delta_s3a_over_parquet": ("delta_s3a", "parquet"),
        "delta_over_delta_before": ("delta", "delta_before"),
        "delta_before_over_parquet": ("delta_before", "parquet"),
        "iceberg_over_parquet": ("iceberg", "parquet"),
        "iceberg_over_delta": ("iceberg", "delta"),
    }
    found = {}
    for key, (a, b) in pairs.items():
        if runs.get(a) and runs.get(b):
            found[key] = spread(
                [
                    x["records_per_s"] / y["records_per_s"]
                    for x, y in zip(runs[a], runs[b], strict=True)
                ]
            )
    return found


def arrow_batch(batch_id: int, rows: int):
    """A batch as the sink gets it (the source's columns), `rows` records of VALUE_BYTES."""
    import pyarrow as pa

    first = batch_id * rows
    return pa.table(
        {
            "key": pa.nulls(rows, pa.binary()),
            "value": pa.array(list(itertools.islice(json_values(first + rows), first, None))),
            "topic": pa.array(["tables"] * rows),
            "partition": pa.array([n % PARTITIONS for n in range(rows)], pa.int32()),
            "offset": pa.array(range(first, first + rows), pa.int64()),
        }
    )


def load_before(code_root: Path):
    """The baseline's spark_app/sinks/delta_sink.py as a module of its own (delta_sink_before)."""
    spec = importlib.util.spec_from_file_location(
        "delta_sink_before", code_root / "spark_app" / "delta_sink.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def commit_costs(before_root: Path, base: str, options: dict, commits: int, rows: int) -> dict:
    """The change to delta_sink.py as a table grows, outside Spark: `commits` batches of
    `rows` appended through the sink's writer before (the baseline's DeltaTable.write) and
    now (BatchWriter), alternating, each into a table of its own; the seconds of each
    commit, log reads included, as the medians of three windows (first, middle, last)."""
    from spark_app.sinks.delta_sink import BatchWriter, DeltaTable

    before = load_before(before_root).DeltaTable(f"{base}/before", options)
    now = BatchWriter(DeltaTable(f"{base}/now", options), "bench-app")
    took: dict[str, list[float]] = {"before": [], "now": []}
    batches = [arrow_batch(n, rows) for n in range(10)]
    for batch_id in range(commits):
        batch = batches[batch_id % 10]
        for name, write in (
            ("before", lambda: before.write(batch, "bench-app", batch_id)),  # noqa: B023
            ("now", lambda: now.write(batch, batch_id)),  # noqa: B023
        ):
            started = time.perf_counter()
            assert write()
            took[name].append(time.perf_counter() - started)
    window = min(50, commits // 3)
    middle = commits // 2 - window // 2
    windows = {
        f"commits_1_{window}": slice(0, window),
        f"commits_{middle + 1}_{middle + window}": slice(middle, middle + window),
        f"commits_{commits - window + 1}_{commits}": slice(commits - window, commits),
    }
    ms = {
        name: {w: round(1000 * statistics.median(t[s]), 1) for w, s in windows.items()}
        for name, t in took.items()
    }
    return {
        "commits": commits,
        "rowsPerCommit": rows,
        "median_ms_per_commit": ms,
        "before_over_now": {w: round(ms["before"][w] / ms["now"][w], 2) for w in windows},
        "total_s": {name: round(sum(t), 1) for name, t in took.items()},
    }


def image_bytes() -> int | None:
    """The size docker gives the Spark image the tree builds (images/build.sh spark)."""
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    prefix = os.environ.get("STREAMJOB_IMAGE_PREFIX", "streamingjob")
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", f"{prefix}/spark:{version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stdout) if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=30_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--runs", type=int, default=3, help="rounds, the sinks interleaved")
    parser.add_argument(
        "--baseline-code-root",
        type=Path,
        help="another checkout (e.g. `git archive main spark_app | tar -x -C DIR`): its Delta "
        "sink runs as delta_before",
    )
    parser.add_argument(
        "--skip", default="", help=f"comma-separated sinks to leave out ({', '.join(SINKS)})"
    )
    parser.add_argument("--no-profile", action="store_true", help="no profiled Delta runs")
    parser.add_argument(
        "--alone-commits",
        type=int,
        default=400,
        help="commits per writer outside Spark (with --baseline-code-root; 0: none); on "
        "MinIO a third of them",
    )
    parser.add_argument("--alone-rows", type=int, default=3000, help="rows per such commit")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the results")
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.baseline_code_root is None:
        skip.add("delta_before")
    else:
        args.baseline_code_root = args.baseline_code_root.resolve()
    sinks = [s for s in SINKS if s not in skip]
    load_at_start = round(os.getloadavg()[0], 2)
    workdir = Path(tempfile.mkdtemp(prefix="table-sink-bench-"))
    store = MinioServer(workdir / "minio") if any(s.endswith("_s3a") for s in sinks) else None
    with KafkaBroker(workdir / "broker") as broker:
        if store is not None:
            store.start()
        try:
            topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="tables")
            produce_s = produce(broker.bootstrap, topic, json_values(args.records), PARTITIONS)
            print(f"produced {args.records:,} x {VALUE_BYTES} B in {produce_s:.1f}s", flush=True)
            bed = Bed(args, broker.bootstrap, topic, store)
            runs: dict[str, list[dict[str, Any]]] = {sink: [] for sink in sinks}
            for _ in range(args.runs):
                for sink in sinks:
                    run = measured(*bed.run(sink, workdir), args.records)
                    runs[sink].append(run)
                    print(f"  {sink}: {run}", flush=True)
            profiles = {}
            if not args.no_profile:
                for sink in (s for s in ("delta", "delta_before") if s in sinks):
                    out = workdir / f"profile-{sink}.json"
                    wrapper = [str(REPO / "bench" / "delta_profile.py"), str(out)]
                    report, wall = bed.run(sink, workdir, wrapper)
                    profiles[sink] = {**measured(report, wall, args.records)}
                    profiles[sink]["foreachBatch"] = json.loads(out.read_text())
                    print(f"  profiled {sink}: {profiles[sink]}", flush=True)
            alone = {}
            if args.baseline_code_root and args.alone_commits:
                alone = writers_alone(args, workdir, store)
        finally:
            if store is not None:
                store.stop()
    result = _result(args, sinks, runs, profiles, alone, produce_s, load_at_start)
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


def writers_alone(args: argparse.Namespace, workdir: Path, store) -> dict[str, Any]:
    """commit_costs on the local disk and, with the object store up, on MinIO."""
    from spark_app.sinks.delta_sink import storage_options

    found = {}
    found["local_disk"] = commit_costs(
        args.baseline_code_root, f"file://{workdir}/alone", {}, args.alone_commits, args.alone_rows
    )
    print(f"  writers alone, local disk: {found['local_disk']}", flush=True)
    if store is not None:
        base = f"s3a://{store.create_bucket('alone')}"
        hadoop = {"fs.s3a.endpoint": store.endpoint, "fs.s3a.path.style.access": "true"}
        options = {**storage_options(hadoop, base), **store.credentials_env}
        commits = max(30, args.alone_commits // 3)
        found["minio"] = commit_costs(
            args.baseline_code_root, base, options, commits, args.alone_rows
        )
        print(f"  writers alone, MinIO: {found['minio']}", flush=True)
    return found


def _result(args, sinks, runs, profiles, alone, produce_s, load_at_start) -> dict[str, Any]:
    import deltalake
    import pyiceberg
    import pyspark

    after = image_bytes()
    return {
        "records": args.records,
        "valueBytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "maxOffsetsPerTrigger": args.batch,
        "trigger": "availableNow",
        "runner": "python -m spark_app (the driver's runner), local[2]",
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "deltalake": deltalake.__version__,
        "pyiceberg": pyiceberg.__version__,
        "producedIn_s": round(produce_s, 1),
        "rates_per_s": {
            "what": "records / seconds of the run's batches (the sum of triggerExecution: "
            "availableNow runs them back to back), median of the rounds",
            **{s: round(statistics.median(r["records_per_s"] for r in runs[s])) for s in sinks},
        },
        "rates_per_s_spread": {s: spread([r["records_per_s"] for r in runs[s]], 0) for s in sinks},
        "ratios": ratios(runs),
        "runs": runs,
        "profile_foreachBatch": profiles,
        "writers_alone": {
            "what": "outside Spark: the Delta sink's writer before (--baseline-code-root) and "
            "now, alternating commits, each into a table of its own; ms per commit, log reads "
            "included, as the table grows",
            **alone,
        },
        "image_bytes": {
            "before": IMAGE_BYTES_BEFORE,
            "before_what": "streamingjob/spark:0.1.0 from 65b279b (no deltalake)",
            "after": after,
            "after_what": "streamingjob/spark:<version> as docker has it (images/build.sh spark)",
            "added": after - IMAGE_BYTES_BEFORE if after else None,
        },
        "machine": "shared: other helpers' brokers and tests ran beside this bench",
        "loadavg_1m_at_start": load_at_start,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    main()
