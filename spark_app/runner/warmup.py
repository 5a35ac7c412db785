"""Warming a driver that waits for its go (the warm hand-over,
spark_app/runner/handover_signals.py): its
executors registered, their Python workers started with the source's modules imported, one
throwaway micro-batch through Spark's streaming engine, the checkpoint storage reachable.
Nothing here reads a Kafka record, commits an offset or touches the job's checkpoint or
sink: the old driver is still running batches.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

from spark_app.runner.error_text import first_line

log = logging.getLogger(__name__)

EXECUTORS_TIMEOUT_S = 150.0  # below the operator's default readiness deadline (180 s)
_LOOK_S = 0.25


class WarmingFailed(RuntimeError):
    """A warming step did not succeed; the message names the step and why."""


def expected_executors(spark) -> int:
    """spark.executor.instances, or none in local mode (the driver runs the tasks)."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        return 0
    try:
        return int(context.getConf().get("spark.executor.instances", "0"))
    except ValueError:
        return 0  # Spark itself refuses such a setting at the first job


def registered_executors(spark) -> int:
    """Executors the driver knows now (its status tracker lists the driver too)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(len(infos) - 1, 0)


def wait_for_executors(spark, timeout_s: float, stop: threading.Event) -> int:
    """Waits until the expected executors registered (or `stop` is set); WarmingFailed
    past `timeout_s`. Returns how many registered."""
    expected = expected_executors(spark)
    deadline = time.monotonic() + timeout_s
    while (registered := registered_executors(spark)) < expected and not stop.is_set():
        if time.monotonic() > deadline:
            raise WarmingFailed(
                f"{registered} of {expected} executors (spark.executor.instances) registered "
                f"within {timeout_s:g}s: not enough room in the cluster, or the executors "
                "fail to start (see their pods)"
            )
        stop.wait(_LOOK_S)
    return registered


# The source's executor-side modules and what they import lazily (the Kafka client, Arrow).
WARM_MODULES = (
    "confluent_kafka",
    "pyarrow",
    "pyarrow.compute",
    "pyspark.sql.pandas.types",
    "spark_app.source.source",
    "spark_app.source.partition_reader",
    "spark_app.source.value_decoder",
    "spark_app.sinks.dead_letter",
    "spark_app.source.native_read",
)


def import_source_modules(_: int) -> str:
    """Runs in an executor's Python worker: the imports the first batch would pay for are
    done before the go, the native read path's module loaded where it loads."""
    for name in WARM_MODULES:
        importlib.import_module(name)
    importlib.import_module("spark_app.source.native_read").module()  # cached per worker
    return socket.gethostname()


def warm_python_workers(spark) -> list[str]:
    """A tiny job, one task per core, that imports the source's modules in the Python
    workers (reused by the query's tasks). Returns the hosts that ran it."""
    context = spark.sparkContext
    slots = max(int(context.defaultParallelism), 1)
    hosts = context.parallelize(range(slots), slots).map(import_source_modules).collect()
    return sorted(set(hosts))


FILE_FORMATS = ("parquet", "json", "csv", "orc")  # Spark's file sink (sink_spec.SinkSpec)
WARMUP_FORMAT = "streamingjob_warmup"


class WarmupSource(DataSource):
    """A Python streaming source of one batch of a few rows, read in the executors' Python
    workers like the job's source: the warm-up query's input."""

    @classmethod
    def name(cls) -> str:
        return WARMUP_FORMAT

    def schema(self) -> str:
        return "value BIGINT"

    def streamReader(self, schema) -> DataSourceStreamReader:
        return OneBatch()


class OneBatch(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(end["batch"])] if end["batch"] > start["batch"] else []

    def read(self, partition) -> Iterator[tuple]:
        yield from ((n,) for n in range(10))


def warm_streaming_engine(spark, sink_format: str, timeout_s: float = 60.0) -> None:
    """One throwaway micro-batch: a few rows from a Python streaming source into the job's
    file format in a scratch directory (`noop` for other sinks), with a scratch checkpoint;
    the job's own checkpoint and sink are not touched. Spark's first streaming query pays
    seconds of class loading and code generation that the first batch after the go then
    does not. Best effort: a failure is logged, never fails the warm-up."""
    scratch = tempfile.mkdtemp(prefix="streamingjob-warmup-")
    fmt = sink_format if sink_format in FILE_FORMATS else "noop"
    try:
        spark.dataSource.register(WarmupSource)
        writer = spark.readStream.format(WARMUP_FORMAT).load().writeStream.format(fmt)
        if fmt != "noop":
            writer = writer.option("path", f"file://{scratch}/output")
        writer = writer.option("checkpointLocation", f"file://{scratch}/checkpoint")
        query = writer.trigger(availableNow=True).start()
        if not query.awaitTermination(timeout_s):
            query.stop()
        took = ((query.lastProgress or {}).get("durationMs") or {}).get("triggerExecution")
        log.info("the warm-up query ran its batch in %s ms", took)
    except Exception as exc:
        log.warning("the warm-up query did not run (the first batch starts colder): %s", exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def checkpoint_base_reachable(spark, location: str) -> str:
    """Creates (if need be) and lists the directory the checkpoint `location` lies in,
    with the job's own storage settings; reads nothing inside `location`. Returns it."""
    path = spark._jvm.org.apache.hadoop.fs.Path(location.rstrip("/")).getParent()
    try:
        store = path.getFileSystem(spark._jsc.hadoopConfiguration())
        store.mkdirs(path)
        store.listStatus(path)
    except Exception as exc:  # py4j: denied, unknown scheme, the store away
        first = first_line(exc)
        raise WarmingFailed(f"the checkpoint storage {path} is not reachable: {first}") from None
    return str(path)
