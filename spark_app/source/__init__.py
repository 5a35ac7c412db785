"""The `kafka_checkpointed` data source: the driver's side (planning ranges, the partition state,
the committer) and the executors' reads (pure Python and native) with the decode step after
them. Imports `sinks`, `formats`, `kafka`, `api`.
"""
