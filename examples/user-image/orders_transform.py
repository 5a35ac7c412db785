"""The orders job's own code, named by `spec.job.transform: orders_transform:typed`.

A transform takes the source's DataFrame (key, value, topic, partition, offset, timestamp, ...)
and returns the DataFrame the sink writes. It runs once per epoch on the driver, when the
query is planned: Spark then applies it to every batch.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ORDER_SCHEMA = "id LONG"  # what the producers write: {"id": n}
PACE_SECONDS = 0.02  # per record in `paced`: at most 50 records/s per executor core


def typed(frame: DataFrame) -> DataFrame:
    """The Kafka columns as they came, plus the order's fields parsed from its JSON value."""
    order = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
    return frame.withColumn("order_id", order["id"])


def paced(frame: DataFrame) -> DataFrame:
    """`typed`, then PACE_SECONDS of waiting per record in the executors' JVMs (a `lookup`
    column): a stand-in for per-record I/O (a call to another service), the work whose
    capacity grows with the executor count even on a machine of few cores. The autoscaler's
    kind scenario runs it."""
    millis = int(PACE_SECONDS * 1000)
    lookup = F.expr(f"reflect('java.lang.Thread', 'sleep', cast({millis} as bigint))")
    return typed(frame).withColumn("lookup", lookup)
