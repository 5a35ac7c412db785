"""Avro decoding, side by side in one run: same broker, same topic, same local[2] Spark.

One topic of Avro records in the Confluent wire format (an order: 11 fields with a decimal,
a timestamp, an enum, an optional string, a nested record with an optional field, an array),
the schema registered in a real Apicurio registry. Then, alternating, best run of each:
(a) our `kafka_checkpointed` source with valueFormat=avro on its native `fetch` read path,
(b) the same source raw (valueFormat raw): the read alone, (c) Spark's built-in `kafka` source
with Spark's own `from_avro` over the value with the 5-byte header stripped (the reader
schema's JSON, as a user of `from_avro` writes it). Every query hashes its whole `value`
column (xxhash64 of the struct, or of the bytes) into the noop sink, so every decoded field is
touched. Per query the wall and processing rates (as bench/source_bench.py gives them) and the
CPU seconds of Spark's JVM, its Python workers and the broker. Then (d) our decoder alone
outside Spark, `decode_value_column` over the same raw Arrow batches the fetch path reads (one
core), split into its steps, and profiled with cProfile, with the Python decoder; and (e) the
same with the Rust decoder (native/src/avro.rs; checked to give the same column first). (a)
decodes in Rust when the native module has the Avro decoder (`ours_decodes_in`).
Writes bench/results/decode.json (unless --no-write); BENCH_RECORDS or --records overrides
the record count (default 1 M).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import decimal
import gc
import io
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from produce import produce  # noqa: E402
from source_bench import builtin_kafka_jars, cpu_by_role, spark_session  # noqa: E402

from devbed.cache import CACHE  # noqa: E402
from devbed.kafka_broker import KafkaBroker  # noqa: E402
from devbed.schema_registry import SchemaRegistry  # noqa: E402
from spark_app.formats.avro_types import arrow_column  # noqa: E402
from spark_app.formats.decoding import AvroDecoder, decode_value_column, resolve_reader_schema  # noqa: E402
from spark_app.formats.schema_registry_client import SchemaRegistryClient  # noqa: E402
from spark_app.source import native_read  # noqa: E402
from spark_app.source.partition_range import KafkaInputPartition  # noqa: E402
from spark_app.source.partition_reader import read_range  # noqa: E402
from tests.support.kafka_tools import log_end_offsets, new_topic  # noqa: E402

RECORDS = int(os.environ.get("BENCH_RECORDS", 1_000_000))  # --records sets it too
PARTITIONS = 4
RESULTS = REPO / "bench" / "results" / "decode.json"

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "bench.avro",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "quantity", "type": "int"},
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]},
        },
        {"name": "note", "type": ["null", "string"], "default": None},
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [
                    {"name": "street", "type": "string"},
                    {"name": "city", "type": "string"},
                    {"name": "zip", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "score", "type": "double"},
        {"name": "express", "type": "boolean"},
    ],
}
_EPOCH = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
_CITIES = ("Berlin", "Lisbon", "Oslo", "Turin", "Ghent")
_STATUS = ("NEW", "PAID", "SHIPPED")


def order(n: int) -> dict[str, Any]:
    """Record `n`: every field varies with n, the optional ones null every third record."""
    return {
        "id": n,
        "customer": f"customer-{n % 50_000:05d}",
        "placed": _EPOCH + datetime.timedelta(milliseconds=n * 37),
        "price": decimal.Decimal(n % 1_000_000) / 100,
        "quantity": n % 17 + 1,
        "status": _STATUS[n % 3],
        "note": None if n % 3 == 0 else f"leave at door {n % 7}",
        "address": {
            "street": f"{n % 300} Main Street",
            "city": _CITIES[n % 5],
            "zip": None if n % 3 == 1 else f"{10_000 + n % 90_000}",
        },
        "tags": [f"t{n % 4}", "bench"][: n % 3],
        "score": n / 7.0,
        "express": n % 2 == 0,
    }


def wire_values(schema_id: int) -> Iterator[bytes]:
    """RECORDS wire-format values: magic byte, schema id, Avro binary."""
    parsed = fastavro.parse_schema(ORDER, named_schemas={})
    header = b"\x00" + schema_id.to_bytes(4, "big")
    out = io.BytesIO()
    for n in range(RECORDS):
        out.seek(0)
        out.truncate()
        fastavro.schemaless_writer(out, parsed, order(n))
        yield header + out.getvalue()


def spark_avro_jars() -> list[str]:
    """spark-avro (Spark's from_avro) through the machine's Maven settings, cached."""
    target = CACHE / "bench" / "spark-avro"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run(
            [
                *("mvn", "-q", "-B", "-f", str(REPO / "bench" / "spark-avro" / "pom.xml")),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={target}",
            ],
            check=True,
        )
        (target / ".complete").touch()
    return sorted(str(p) for p in target.glob("spark-avro*.jar"))


def time_query(spark, name: str, stream, decode) -> tuple[float, float]:
    """One availableNow query: `decode` turns the source's frame into one with a `value`
    column; its xxhash64 goes to the noop sink (every field of it read). Returns (wall
    seconds from start() to its end, seconds in its triggers)."""
    from pyspark.sql import functions as F

    checkpoint = tempfile.mkdtemp(prefix=f"decode-bench-{name}-")
    try:
        started = time.perf_counter()
        query = (
            decode(stream())
            .select(F.xxhash64("value").alias("h"))
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if rows != RECORDS:
            raise RuntimeError(f"{name} read {rows} rows, expected {RECORDS}")
        triggers = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
        return elapsed, triggers
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def raw_batches(bootstrap: str, topic: str) -> list[Any]:
    """Every partition's records as the native fetch path reads them: the raw Arrow batches
    the executors decode."""
    batches = []
    for partition, end in sorted(log_end_offsets(bootstrap, topic).items()):
        p = KafkaInputPartition(
            topic=topic,
            partition=partition,
            start=0,
            end=end,
            client_config={"bootstrap.servers": bootstrap},
            read_path="native",
            native_engine="fetch",
        )
        batches.extend(read_range(p))
    assert sum(b.num_rows for b in batches) == RECORDS
    return batches


def native_alone(batches: list[Any], rust: AvroDecoder, python: AvroDecoder) -> dict[str, Any]:
    """(e): the same as (d) with the Rust decoder (`spark_app.formats.native_avro`), best of 3 by
    CPU and by wall time; first checked to give the Python decoder's column on every batch."""
    for batch in batches:
        ours = decode_value_column(batch, rust).column("value")
        if not ours.equals(decode_value_column(batch, python).column("value")):
            raise RuntimeError("the Rust decoder's column differs from the Python one's")
    with gc_paused_here():
        cpu, wall = best_of_3(batches, rust)
    return {
        "records_per_cpu_s": round(RECORDS / cpu),
        "records_per_s_wall": round(RECORDS / wall),
        "cpu_us_per_record": round(1e6 * cpu / RECORDS, 3),
    }


def best_of_3(batches: list[Any], decoder: Any) -> tuple[float, float]:
    """(CPU s, wall s) of decode_value_column over every batch, each the best of 3 runs."""
    cpu = wall = float("inf")
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        rows = sum(decode_value_column(b, decoder).num_rows for b in batches)
        cpu = min(cpu, time.process_time() - started_cpu)
        wall = min(wall, time.perf_counter() - started)
        assert rows == RECORDS
    return cpu, wall


def decoder_alone(batches: list[Any], decoder: AvroDecoder) -> dict[str, Any]:
    """(d): decode_value_column over the batches in this one process (one core, the
    collector paused as on the executors), best of 3 by CPU time (the machine is shared) and
    by wall time; its steps apart: the values out of Arrow, then the batch path it takes for
    records of the reader's own schema id (`WireDecoder.decode_batch`: Avro timestamps as longs) and
    the per-record path it takes otherwise (`decode`, then `arrow_column`); a cProfile run."""
    with gc_paused_here():
        cpu, wall = best_of_3(batches, decoder)
        steps = {"values_to_pylist": 0.0, "decode_batch": 0.0, "decode_per_record": 0.0}
        steps["arrow_column"] = 0.0
        for batch in batches:
            t0 = time.process_time()
            values = batch.column("value").to_pylist()
            t1 = time.process_time()
            decoder.decode_batch(values)
            t2 = time.process_time()
            rows_ = [decoder.decode(v) for v in values]
            t3 = time.process_time()
            arrow_column(rows_, decoder.column_type)
            t4 = time.process_time()
            for key, took in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                steps[key] += took
        profiler = cProfile.Profile()
        profiler.enable()
        for batch in batches:
            decode_value_column(batch, decoder)
        profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
    return {
        "records_per_cpu_s": round(RECORDS / cpu),
        "records_per_s_wall": round(RECORDS / wall),
        "cpu_us_per_record": round(1e6 * cpu / RECORDS, 2),
        "steps_cpu_us_per_record": {k: round(1e6 * v / RECORDS, 2) for k, v in steps.items()},
        "per_record_path_over_decode_batch": round(
            (steps["decode_per_record"] + steps["arrow_column"]) / steps["decode_batch"], 2
        ),
        "cprofile_top_tottime": _profile_rows(text.getvalue()),
    }


@contextlib.contextmanager
def gc_paused_here() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _profile_rows(text: str) -> list[str]:
    """pstats' table rows, one string each (ncalls tottime percall cumtime percall where)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
    return [" ".join(line.split()) for line in lines[start + 1 :] if line.strip()]


def main(argv: list[str] | None = None) -> None:
    global RECORDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--runs", type=int, default=3, help="alternating runs; the best counts")
    parser.add_argument(
        "--skip", default="", help="comma-separated parts to leave out: ours, raw, spark, alone"
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS}")
    args = parser.parse_args(argv)
    RECORDS = args.records
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if native_read.module() is None:
        raise SystemExit("the native read path is not installed: make native")
    load_at_start = round(os.getloadavg()[0], 2)
    workdir = Path(tempfile.mkdtemp(prefix="decode-bench-"))
    with KafkaBroker(workdir / "broker") as broker, SchemaRegistry(workdir / "registry") as reg:
        topic = new_topic(broker.bootstrap, partitions=PARTITIONS, prefix="decode")
        schema_id = reg.register(f"{topic}-value", ORDER)
        produce_s = produce(broker.bootstrap, topic, wire_values(schema_id), PARTITIONS)
        print(f"produced {RECORDS:,} Avro orders in {produce_s:.1f}s", flush=True)
        client = SchemaRegistryClient(reg.url)
        reader = resolve_reader_schema(client, f"{topic}-value")
        jars = builtin_kafka_jars() + spark_avro_jars()
        spark = spark_session(jars)
        spark_pid = spark.sparkContext._gateway.proc.pid
        broker_pid = broker.process.pid if broker.process else None
        queries = _queries(spark, broker.bootstrap, topic, reg.url, reader.schema)
        queries = {k: v for k, v in queries.items() if k not in skip}
        wall: dict[str, list[float]] = {name: [] for name in queries}
        processing: dict[str, list[float]] = {name: [] for name in queries}
        cpu: dict[str, dict[str, float]] = {}
        spark_cpu: dict[str, list[float]] = {name: [] for name in queries}  # JVM + Python
        for _ in range(args.runs):  # alternate, keep the best run of each (a warm JVM for all)
            for name, (stream, decode) in queries.items():
                before = cpu_by_role(spark_pid, broker_pid)
                elapsed, triggers = time_query(spark, name, stream, decode)
                after = cpu_by_role(spark_pid, broker_pid)
                used = cpu_by_role_delta(before, after)
                if not wall[name] or elapsed < min(wall[name]):
                    cpu[name] = used
                wall[name].append(elapsed)
                spark_cpu[name].append(used["spark_jvm"] + used["spark_python"])
                processing[name].append(triggers)
                print(
                    f"  {name}: {RECORDS / elapsed:,.0f} rows/s ({RECORDS / triggers:,.0f} in "
                    f"its triggers), CPU s {used}",
                    flush=True,
                )
        spark.stop()
        alone = rust = None
        if "alone" not in skip:
            batches = raw_batches(broker.bootstrap, topic)
            python = AvroDecoder(client, reader, native=False)
            alone = decoder_alone(batches, python)
            rate = alone["records_per_cpu_s"]
            print(f"  Python decoder alone: {rate:,} records per CPU second", flush=True)
            rust = native_alone(batches, AvroDecoder(client, reader), python)
            rate = rust["records_per_cpu_s"]
            print(f"  Rust decoder alone: {rate:,} records per CPU second", flush=True)
    result = _result(wall, processing, cpu, spark_cpu, alone, produce_s, jars, load_at_start)
    result["native_decoder_alone"] = rust
    if alone and rust:
        result["rates_per_s"]["e_native_decoder_alone_one_core"] = rust["records_per_cpu_s"]
        ratio = rust["records_per_cpu_s"] / alone["records_per_cpu_s"]
        result["ratios"]["e_over_d"] = round(ratio, 2)
    result["ours_decodes_in"] = decodes_in(client, reader)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


def decodes_in(client: SchemaRegistryClient, reader: Any) -> str:
    """Where query (a)'s values decode: its Python workers load the module this process does."""
    return "rust" if AvroDecoder(client, reader).native is not None else "python"


def cpu_by_role_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    # A Python process that exited unwaited takes its CPU seconds along: never below 0.
    return {k: max(0.0, round(after[k] - before.get(k, 0.0), 1)) for k in after}


def _queries(spark, bootstrap: str, topic: str, registry_url: str, reader_json: str) -> dict:
    """name → (the source's streaming frame, what makes its `value` the decoded one)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    ours = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "commitOffsetsOnCheckpoints": "false",
        "readPath": "native",
        "nativeEngine": "fetch",
    }

    def source(fmt: str, **options: str):
        return lambda: spark.readStream.format(fmt).options(**options).load()

    def unchanged(frame):
        return frame

    def spark_from_avro(frame):
        payload = F.expr("substring(value, 6, length(value) - 5)")  # the header stripped
        return frame.select(from_avro(payload, reader_json, {"mode": "FAILFAST"}).alias("value"))

    avro = {"valueFormat": "avro", "schemaRegistryUrl": registry_url}
    builtin = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    return {  # run in this order, alternating
        "ours": (source("kafka_checkpointed", **ours, **avro), unchanged),
        "raw": (source("kafka_checkpointed", **ours), unchanged),
        "spark": (source("kafka", **builtin, startingOffsets="earliest"), spark_from_avro),
    }


def _result(
    wall, processing, cpu, spark_cpu, alone, produce_s, jars, load_at_start
) -> dict[str, Any]:
    def best(times: dict[str, list[float]]) -> dict[str, float | None]:
        return {name: (RECORDS / min(t) if t else None) for name, t in times.items()}

    rates, processing_rates = best(wall), best(processing)
    per_cpu = {name: round(RECORDS / min(used)) for name, used in spark_cpu.items() if used}

    def ratios(of: dict[str, float | None]) -> dict[str, float | None]:
        pairs = {"a_over_c": ("ours", "spark"), "a_over_b": ("ours", "raw")}
        return {
            key: round(of[a] / of[b], 3) if of.get(a) and of.get(b) else None
            for key, (a, b) in pairs.items()
        }

    return {
        "records": RECORDS,
        "partitions": PARTITIONS,
        "schema": "bench.avro.Order: 11 fields (long, string, timestamp-millis, decimal(10,2), "
        "int, enum, optional string, nested record with an optional field, array<string>, "
        "double, boolean)",
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "fastavro": fastavro.__version__,
        "producedIn_s": round(produce_s, 1),
        "rates_per_s": {
            "a_ours_avro_native_fetch_local2": _round(rates.get("ours")),
            "b_ours_raw_native_fetch_local2": _round(rates.get("raw")),
            "c_spark_kafka_from_avro_local2": _round(rates.get("spark")),
            "d_decoder_alone_one_core": alone["records_per_cpu_s"] if alone else None,
        },
        "ratios": ratios(rates),
        "processing_rates_per_s": {
            "what": "records / seconds in the query's triggers (Spark's processedRowsPerSecond: "
            "without the query's start and stop)",
            **{name: _round(r) for name, r in processing_rates.items()},
        },
        "processing_ratios": ratios(processing_rates),
        "records_per_cpu_s": {
            "what": "records / CPU seconds of Spark's JVM and its Python processes in the best "
            "run by that measure (the broker's apart): what a loaded, shared machine "
            "distorts least",
            **per_cpu,
        },
        "cpu_ratios": ratios(per_cpu),
        "cpu_s_best_run": cpu,
        "spark_cpu_s_runs": {k: [round(t, 1) for t in v] for k, v in spark_cpu.items()},
        "decoder_alone": alone,
        "sparkAvro": {"jars": [Path(j).name for j in jars if "avro" in Path(j).name]},
        "runs_s": {k: [round(t, 2) for t in v] for k, v in wall.items()},
        "runs_processing_s": {k: [round(t, 2) for t in v] for k, v in processing.items()},
        "machine": "shared: other helpers' brokers, registries and tests ran beside this bench",
        "loadavg_1m_at_start": load_at_start,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }


def _round(value: float | None) -> int | None:
    return round(value) if value else None


if __name__ == "__main__":
    main()
