"""Build-time training run of the Spark image's class-data-sharing (AppCDS) archive.

images/spark/Dockerfile runs this once through spark-submit (local mode) with
`-XX:ArchiveClassesAtExit=/opt/streamingjob/jvm/spark.jsa`: every class the JVM loaded is
written, parsed and verified, into that archive when the JVM exits, and every JVM of the image
maps it at start (JDK_JAVA_OPTIONS in the Dockerfile). The run mirrors what a StreamingJob's
driver and executors do on a (re)start: SparkContext + SparkSession, a Python streaming data
source with Arrow batches, a parquet sink with its metadata log, a restart of the query from
its checkpoint, Hadoop FileSystem listings of the checkpoint. Classes of a cluster run that this
local run does not load (the Kubernetes client, the executor backend) come from
`jvm-classes.txt` next to this file when it exists: one binary class name per line, loaded
(not initialized) through the Py4J gateway; names that do not exist are skipped.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

SCHEMA = "id long, value string"


class WarmupPartition(InputPartition):
    def __init__(self, start: int, end: int):
        self.start, self.end = start, end


class WarmupReader(DataSourceStreamReader):
    """Ten rows per batch, as Arrow record batches (what the Kafka source yields)."""

    def __init__(self) -> None:
        self.position = 0

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        self.position += 10
        return {"n": self.position}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        middle = (start["n"] + end["n"]) // 2
        return [WarmupPartition(start["n"], middle), WarmupPartition(middle, end["n"])]

    def read(self, partition: WarmupPartition):
        ids = list(range(partition.start, partition.end))
        yield pa.RecordBatch.from_pydict(
            {"id": ids, "value": [str(i) for i in ids]},
            schema=pa.schema([("id", pa.int64()), ("value", pa.string())]),
        )

    def commit(self, end: dict) -> None:
        pass


class WarmupSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "streamingjob_warmup"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> WarmupReader:
        return WarmupReader()


def run_query(spark: SparkSession, base: Path, batches: int) -> None:
    query = (
        spark.readStream.format(WarmupSource.name())
        .load()
        .writeStream.format("parquet")
        .option("path", str(base / "out"))
        .option("checkpointLocation", str(base / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while (query.lastProgress or {}).get("batchId", -1) < batches:
            query.awaitTermination(0.2)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
    finally:
        query.stop()


def load_listed_classes(spark: SparkSession, listing: Path) -> int:
    if not listing.exists():
        return 0
    jvm = spark._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    loaded = 0
    for line in listing.read_text().splitlines():
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        try:
            jvm.java.lang.Class.forName(name, False, loader)
            loaded += 1
        except Exception:  # a class of another Spark version: skipped
            pass
    return loaded


def main() -> int:
    base = Path(tempfile.mkdtemp(prefix="jvm-warmup-"))
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("jvm-warmup")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("WARN")
        spark.dataSource.register(WarmupSource)
        run_query(spark, base, 3)
        run_query(spark, base, 5)  # a restart: restores from the checkpoint
        jvm = spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(str(base / "checkpoint" / "commits"))
        fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
        [s.getPath().getName() for s in fs.listStatus(path)]
        rows = spark.read.parquet(str(base / "out")).count()
        listed = load_listed_classes(spark, Path(__file__).with_name("jvm-classes.txt"))
        print(f"jvm warmup: {rows} rows, {listed} listed classes loaded", file=sys.stderr)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
