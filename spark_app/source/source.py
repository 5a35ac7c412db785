"""`kafka_checkpointed`: a Spark streaming source for Kafka with Flink's checkpoint semantics.

PySpark 4.3 runs three copies of a reader in three processes (see
docs/source.md): the long-lived driver-side runner process calls the planning methods, a
planner process builds a copy that is pickled to executors for `read()`. So `__init__` is
cheap and picklable, and all driver-side machinery (clients, the partition state table, the
committer and discovery threads) lives in `DriverSide` (spark_app/source/driver_side.py), created on
the first planning call. With valueFormat (or keyFormat) avro, json or protobuf, `schema()`
resolves the reader schema of each decoded column once and keeps it on the data source,
which PySpark pickles to those processes (spark_app/formats/typed_values.py); executors decode after
the read (spark_app/source/value_decoder.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_app.api import offsets as off
from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.formats import typed_values
from spark_app.formats.typed_values import TypedValues
from spark_app.source.driver_side import DriverSide
from spark_app.source.partition_range import spark_schema

FORMAT = "kafka_checkpointed"


def _raw(options: Mapping[str, str], name: str) -> bool:
    return str(options.get(name, "raw")).strip().lower() == "raw"


class KafkaCheckpointedDataSource(DataSource):
    def __init__(self, options: dict[str, str]):
        super().__init__(options)
        # a decoded valueFormat / keyFormat: the reader schema, resolved by schema() at query
        # start; this object is pickled to the planning processes, so it is resolved only once.
        self._values: TypedValues | None = None
        self._keys: TypedValues | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).lower() == "true"
        if all(_raw(self.options, column) for column in ("valueFormat", "keyFormat")):
            return spark_schema(include)  # no parsing: a sink's options name no topics
        options = SourceOptions.parse(self.options)
        if options.value_decoding is not None:
            self._values = typed_values.at_query_start(options.value_decoding)
        if options.key_decoding is not None:
            self._keys = typed_values.at_query_start(options.key_decoding)
        typed = [t for t in (self._values, self._keys) if t is not None]
        return typed_values.source_schema(spark_schema(include), *typed)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        options = SourceOptions.parse(self.options)
        for decoding, typed in (
            (options.value_decoding, self._values),
            (options.key_decoding, self._keys),
        ):
            if decoding is not None and typed is None:
                raise OptionError(
                    f"{decoding.option('Format')}={decoding.format}: the columns come from the "
                    "reader schema; start the query "
                    "without a schema of its own (no .schema(...) on readStream)"
                )
        return KafkaStreamReader(options, schema, self._values, self._keys)

    def streamWriter(self, schema: StructType, overwrite: bool):
        if str(self.options.get("deliveryGuarantee", "")).lower() == "exactly-once":
            from spark_app.sinks.kafka_eos_sink import ExactlyOnceKafkaWriter

            return ExactlyOnceKafkaWriter(dict(self.options))
        from spark_app.sinks.kafka_sink import KafkaStreamWriter

        return KafkaStreamWriter(dict(self.options))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(
        self,
        options: SourceOptions,
        schema: StructType,
        values: TypedValues | None = None,
        keys: TypedValues | None = None,
    ):
        self.options = options
        self.schema = schema
        self.values = values
        self.keys = keys
        self._driver: DriverSide | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_driver": None}

    @property
    def driver(self) -> DriverSide:
        if self._driver is None:
            self._driver = DriverSide(self.options, self.values, self.keys)
        return self._driver

    # -- planning: the driver-side runner process -----------------------------------------
    def initialOffset(self) -> dict:
        self.driver.note_fresh_start()
        return dict(off.FRESH_START)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self.driver.latest_offset(start, limit)

    def reportLatestOffset(self) -> dict | None:
        return self.driver.report_latest()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.driver.plan_partitions(start, end)

    def commit(self, end: dict) -> None:
        self.driver.checkpoint_complete(end)

    def prepareForTriggerAvailableNow(self) -> None:
        self.driver.freeze_target()

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()

    # -- reading: executors ----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator:
        from spark_app.source.partition_range import KafkaInputPartition
        from spark_app.source.partition_reader import read_range

        assert isinstance(partition, KafkaInputPartition)
        if partition.announce_range:  # the exactly-once Kafka sink writes this range's output
            from spark_app.sinks import task_ranges

            p = partition
            task_ranges.announce(task_ranges.TaskRange(p.topic, p.partition, p.start, p.end))
        batches = read_range(partition)
        if partition.values is None and partition.keys is None:
            return batches
        from spark_app.source.value_decoder import decoded  # one decode step for every path

        return decoded(batches, partition)
