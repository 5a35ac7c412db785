"""`kafka_checkpointed_probe`: our source with a stopwatch, for the latency profile only.

The same reader (spark_app/source/source.py), each call it serves timed and appended as one
JSON line to $LATENCY_PROBE_LOG: in the driver's runner process latestOffset, partitions and
commit; in an executor's Python worker read(), from its call to its first Arrow batch and to
its last (the worker's pid says whether workers are reused between batches). Epoch seconds, so
the lines line up with Spark's StreamingQueryProgress of the same batch.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from spark_app.source.source import KafkaCheckpointedDataSource, KafkaStreamReader

LOG_ENV = "LATENCY_PROBE_LOG"


def _note(**fields: object) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as log:  # one short append per line: whole lines, in any order
            log.write(json.dumps({**fields, "pid": os.getpid()}) + "\n")


class TimedReader(KafkaStreamReader):
    def _topic(self) -> str:
        return ",".join(self.options.topics) if self.options.topics else "?"

    def _timed(self, call: str, fn, *args):
        began = time.time()
        try:
            return fn(*args)
        finally:
            _note(call=call, topic=self._topic(), began=began, ended=time.time())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self._timed("latestOffset", super().latestOffset, start, limit)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self._timed("partitions", super().partitions, start, end)

    def commit(self, end: dict) -> None:
        self._timed("commit", super().commit, end)

    def read(self, partition: InputPartition) -> Iterator:
        began = time.time()
        first = None
        rows = 0
        for batch in super().read(partition):
            if first is None:
                first = time.time()
            rows += batch.num_rows
            yield batch
        _note(
            call="read",
            topic=self._topic(),
            began=began,
            first=first,
            ended=time.time(),
            rows=rows,
        )


class ProbeDataSource(KafkaCheckpointedDataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka_checkpointed_probe"

    def streamReader(self, schema: StructType) -> TimedReader:
        reader = super().streamReader(schema)
        return TimedReader(reader.options, reader.schema, reader.values, reader.keys)
