"""The Spark side of StreamingJob: the `kafka_checkpointed` source and the job runner, in layers
(runner > source > sinks > formats | kafka > api; docs/source.md, "Layers")."""
