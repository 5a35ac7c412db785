"""The table sinks (Delta, Iceberg) behind one face: each records a batch with its app id in
the commit that adds its rows, so a replay writes nothing and a redeploy's catch-up reads the
last durable batch from the table."""

from __future__ import annotations

from typing import Any

from spark_app.api.sink_spec import SinkSpec
from spark_app.sinks import delta_sink, iceberg_sink


def sink_table(spark, sink: SinkSpec) -> Any:
    """The table `sink` (format delta or iceberg) writes, with the session's object store."""
    if sink.format == "iceberg":
        return iceberg_sink.IcebergTable.for_session(spark, sink)
    return delta_sink.DeltaTable.for_session(
        spark, sink.path or "", sink.partition_by, sink.table_properties
    )


def batch_writer(spark, sink: SinkSpec, app_id: str) -> Any:
    """The foreachBatch function writing `app_id`'s batches (a checkpoint's) to the table."""
    table = sink_table(spark, sink)
    if sink.format == "iceberg":
        return iceberg_sink.BatchWriter(table, app_id)
    return delta_sink.BatchWriter(table, app_id)
