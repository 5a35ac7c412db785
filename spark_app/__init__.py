"""The Spark side of StreamingJob: the `kafka_checkpointed` source and the job runner."""
