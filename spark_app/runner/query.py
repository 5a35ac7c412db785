"""The manifest → Spark mapping: the session (with the job's settings and our source
registered) and the query (source → optional transform or SQL query → sink, per epoch)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from spark_app.api import sink_rules
from spark_app.api.job_spec import JobSpec
from spark_app.api.manifest import RunnerManifest, epoch_sink_path
from spark_app.api.sink_spec import TABLE_SINKS, SinkSpec
from spark_app.kafka.config import job_options, sink_client
from spark_app.runner.error_text import first_line
from spark_app.runner.sql_transform import SqlRefused, apply_sql
from spark_app.sinks.delta_sink import SchemaIncompatible, app_id
from spark_app.sinks.tables import batch_writer, sink_table

log = logging.getLogger(__name__)

# in the run's work directory
SOURCE_REPORT, SINK_REPORT, DRAIN_FILE = "source-report.json", "sink-report.json", "drain"


class NotStarted(RuntimeError):
    """The source could not resolve its columns at the start (the registry away, a subject
    not registered yet), or the sink's catalog did not answer: a restart may succeed, so it
    is a failure (exit 1, its message in the termination message), not invalid input."""


class InvalidJob(ValueError):
    """Input that cannot run, named by its manifest field."""


def load_transform(reference: str):
    module_name, _, function_name = reference.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise InvalidJob(
            f"spec.job.transform: cannot load {reference!r} ({exc}); the module must be "
            "importable in the driver image"
        ) from None
    if not callable(function):
        raise InvalidJob(f"spec.job.transform: {reference!r} is not a function")
    return function


def query_options(
    job: JobSpec, name: str, epoch: int, workdir: Path, pinned: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The source's options; it reports to and takes drain requests from files in `workdir`.
    `pinned`: the epoch's reader schema versions (valueSchemaVersion, keySchemaVersion)."""
    options = {**job_options(job), **(pinned or {})}
    # The runner commits the group's offsets itself (GroupOffsets): as soon as a batch is
    # durable, at a graceful stop and for the previous epoch. One writer, no race.
    options["commitOffsetsOnCheckpoints"] = "false"
    options["reportPath"] = str(workdir / SOURCE_REPORT)
    options["drainPath"] = str(workdir / DRAIN_FILE)
    options["jobName"], options["jobEpoch"] = name, str(epoch)  # named by dead-letter copies
    return options


def source_frame(
    spark,
    job: JobSpec,
    name: str,
    epoch: int,
    workdir: Path,
    pinned: Mapping[str, str] | None = None,
):
    """The source's DataFrame (load() resolves its columns: a reader schema at the registry)."""
    from spark_app.source.source import FORMAT

    options = query_options(job, name, epoch, workdir, pinned)
    return spark.readStream.format(FORMAT).options(**options).load()


def transformed(spark, job: JobSpec, frame):
    """The source's DataFrame through the job's SQL query or transform, analysed but not
    started: one that cannot run fails here (InvalidJob), before anything is read."""
    if job.sql:
        try:
            return apply_sql(spark, frame, job.sql)
        except SqlRefused as exc:
            raise InvalidJob(str(exc)) from None
    if job.transform:
        frame = _call_transform(job.transform, frame)
        if not hasattr(frame, "writeStream"):
            raise InvalidJob(f"spec.job.transform: {job.transform} must return a DataFrame")
    return frame


def _call_transform(reference: str, frame):
    """The transform's DataFrame. An error it raises while the query is planned (a package
    the image lacks, a bug) would raise again at every restart: InvalidJob, nothing read.
    Spark's own rejections of what it built pass on (the runner names them)."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    try:
        return load_transform(reference)(frame)
    except (InvalidJob, AnalysisException, IllegalArgumentException):
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise InvalidJob(
            f"spec.job.transform: {reference} raised {type(exc).__name__}: {first}"
        ) from None


def start_query(
    frame,
    job: JobSpec,
    name: str,
    epoch: int,
    location: str,
    workdir: Path,
    sink_options: Mapping[str, str] | None = None,
):
    """The query writing `frame` (`transformed`'s) to the job's sink, started; the sink
    counts what it did in `workdir` (SINK_REPORT); `sink_options`: a typed Kafka sink's
    resolved schema (spark_app/runner/sink_schema.py)."""
    writer = frame.writeStream.queryName(name).outputMode(job.sink.output_mode)
    writer = writer.option("checkpointLocation", location)
    writer = _to_sink(writer, frame.sparkSession, job, (name, epoch, workdir), location)
    writer = writer.options(**(sink_options or {}))
    if job.trigger.processing_time:
        writer = writer.trigger(processingTime=job.trigger.processing_time)
    elif job.trigger.available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def check_sink(spark, job: JobSpec, frame) -> None:
    """The sink's checks of the query (`frame`, analysed) before it starts: InvalidJob
    naming what does not fit. The Kafka sink writes `value` (and `key`), strings or bytes,
    exactly-once only from a query without a shuffle (`check_one_range_per_task`); a Delta
    or Iceberg table that exists takes the columns it has and compatible changes
    (`delta_sink.schema_change`, `iceberg_sink.evolve`)."""
    schema = frame.schema
    if job.sink.format == "kafka":
        check_one_range_per_task(job, frame)
        _check_kafka_columns(job, schema)
    if job.sink.format in TABLE_SINKS:
        try:
            sink_table(spark, job.sink).check(schema)
        except SchemaIncompatible as exc:
            raise InvalidJob(f"spec.job.sink: {exc}") from None
        except Exception as exc:
            if job.sink.catalog is not None:  # every batch needs the catalog: not started
                raise catalog_unreachable(job.sink.catalog.uri, exc) from None
            log.warning("cannot check the table's schema before the start: %s", exc)


def catalog_unreachable(uri: str, exc: Exception) -> NotStarted:
    first = first_line(exc)
    return NotStarted(
        f"spec.job.sink.catalog: the Iceberg catalog at {uri} could not be read "
        f"({type(exc).__name__}: {first[:300]}); check catalog.uri, that the driver reaches "
        "it and catalog.credentialsSecret. Nothing was read; the start is retried with "
        "restartPolicy.backoff"
    )


def _check_kafka_columns(job: JobSpec, schema) -> None:
    from pyspark.sql.types import BinaryType, StringType

    fields = {field.name: field.dataType for field in schema.fields}
    typed = job.sink.value_format != "raw"
    for column in ("value", "key"):
        kind = fields.get(column)
        if typed and column == "value" and kind is not None:
            continue  # encoded with its schema: sink_schema.writer_options checks it
        if (column == "value" and kind is None) or (
            kind is not None and not isinstance(kind, (BinaryType, StringType))
        ):
            raise InvalidJob(
                f"spec.job.sink: the kafka sink writes a column {column} of type string "
                f"or binary{' (key is optional)' if column == 'key' else ''}; the query "
                f"gives {kind.simpleString() if kind else 'none'} (columns: "
                f"{', '.join(fields)}): cast or rename it in spec.job.sql or the transform"
            )
    headers = fields.get("headers")
    if job.sink.guarantee != "exactly-once" or headers is None:
        return
    if problem := sink_rules.headers_problem(headers.simpleString()):
        raise InvalidJob(problem)


def check_one_range_per_task(job: JobSpec, frame) -> None:
    """The exactly-once Kafka sink writes each source range's output in its own transaction:
    InvalidJob, before anything is read, for a query that mixes ranges in a task."""
    if job.sink.format == "kafka" and job.sink.guarantee == "exactly-once":
        plan = frame._jdf.queryExecution().analyzed().toString()
        if problem := sink_rules.mixing_problem(plan):
            raise InvalidJob(problem)


def kafka_sink_options(
    sink: SinkSpec, job: str, location: str, workdir: Path | None = None
) -> dict[str, str]:
    """The kafka sink's guarantee and, for exactly-once, its writers' names
    (spark_app/sinks/kafka_eos_sink.py), transaction timeout and counts' file in `workdir`."""
    if sink.guarantee != "exactly-once":
        return {"deliveryGuarantee": sink.guarantee}
    timeout = sink.transaction_timeout_ms or sink_rules.DEFAULT_TRANSACTION_TIMEOUT_MS
    return {
        "deliveryGuarantee": "exactly-once",
        "transactionalIdPrefix": sink_rules.transactional_prefix(job, location),
        "checkpointId": sink_rules.checkpoint_id(location),
        "transactionTimeoutMs": str(timeout),
        **({"tallyPath": str(workdir / SINK_REPORT)} if workdir else {}),
    }


def _to_sink(writer, spark, job: JobSpec, run: tuple[str, int, Path], location: str):
    """`writer` aimed at the job's sink: a Delta or Iceberg table (one commit per batch, keyed
    by this checkpoint), our Kafka writer (`run`: the job's name, epoch and work directory), or
    a Spark sink (files: one directory per epoch)."""
    from spark_app.source.source import FORMAT

    sink = job.sink
    if sink.format in TABLE_SINKS:
        return writer.foreachBatch(batch_writer(spark, sink, app_id(location)))
    if sink.format == "kafka":
        writer = writer.format(FORMAT).option("topic", sink.topic or "")
        writer = writer.options(**{f"kafka.{k}": v for k, v in sink_client(job).items()})
        writer = writer.options(**kafka_sink_options(sink, run[0], location, run[2]))
    else:
        writer = writer.format(sink.format)
        if sink.path:
            # a location the operator did not lay out (a local run's override): per epoch
            directory = epoch_sink_path(sink.path, location)
            epoch_dir = f"{sink.path.rstrip('/')}/epoch-{run[1]}"
            writer = writer.option("path", directory or epoch_dir)
    return writer.options(**sink.options)


# Hadoop's local file system without child processes (jvm/localfs): without Hadoop's native
# library, which pyspark does not ship, Hadoop's own runs a chmod process for every file it
# writes and a readlink for every rename Spark's checkpoint makes, ~30 a micro-batch of a job
# checkpointing to a local disk: 1.44x the CPU per batch (bench/local_fs_bench.py). Used
# where Spark's jars have it (scripts/localfs-jar.sh); a job's sparkConf may still set either
# key.
LOCAL_FS_JAR = "streamingjob-localfs.jar"
LOCAL_FS_CONF = {
    "spark.hadoop.fs.file.impl": "dev.sparkkafka.localfs.NoForkLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "dev.sparkkafka.localfs.NoForkLocalFs",
}


def local_file_system_conf() -> dict[str, str]:
    import pyspark

    spark_home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    return LOCAL_FS_CONF if os.path.isfile(os.path.join(spark_home, "jars", LOCAL_FS_JAR)) else {}


# How long the JVM and a Python process it starts (a worker, the streaming source's runner)
# wait for each other to connect and authenticate (Spark's default 15 s): on a loaded machine
# a Python runner started later than that and the query failed "Python worker failed to
# connect back" (CI run 83, load average 54).
AUTH_SOCKET_TIMEOUT = ("spark.python.authenticate.socketTimeout", "60s")


def local_master(conf: Mapping[str, str]) -> str:
    """Spark in this process, two threads. `local[N]` gives a task no retry (one failure fails
    the query); `local[N,F]` retries it as a cluster's scheduler does (spark.task.maxFailures,
    4 by default), so that a task failed by something transient (a transaction's commit
    through a broker's restart, CI's chaos test) costs a pause here as on Kubernetes."""
    return f"local[2,{conf.get('spark.task.maxFailures', '4')}]"


def build_session(manifest: RunnerManifest, master: str | None):
    from pyspark.sql import SparkSession

    from spark_app.source.source import KafkaCheckpointedDataSource

    conf = manifest.spec.session_conf()
    # Python workers must run this interpreter (it has pyarrow and confluent-kafka).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(manifest.metadata.name)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit
    if master or not under_submit:
        builder = builder.master(master or conf.pop("spark.master", None) or local_master(conf))
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        conf.setdefault("spark.ui.enabled", "false")
        conf.setdefault("spark.ui.showConsoleProgress", "false")
        conf.setdefault("spark.sql.shuffle.partitions", "2")
    conf.setdefault(*AUTH_SOCKET_TIMEOUT)
    for key, value in {**local_file_system_conf(), **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(KafkaCheckpointedDataSource)
    return spark
