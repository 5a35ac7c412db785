"""The orders job's own code, named by `spec.job.transform: orders_transform:typed`.

A transform takes the source's DataFrame (key, value, topic, partition, offset, timestamp, ...)
and returns the DataFrame the sink writes. It runs once per epoch on the driver, when the
query is planned: Spark then applies it to every batch.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ORDER_SCHEMA = "id LONG"  # what the producers write: {"id": n}


def typed(frame: DataFrame) -> DataFrame:
    """The Kafka columns as they came, plus the order's fields parsed from its JSON value."""
    order = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
    return frame.withColumn("order_id", order["id"])
