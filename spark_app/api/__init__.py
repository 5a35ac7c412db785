"""The job's contract, shared with the operator: the runner's manifest and the spec types it is
made of, the source's options, the offsets JSON, the offsets admin's requests and results, the
exactly-once Kafka sink's rules and names, and the runner's exit codes. Pure (no Kafka client,
no Spark); imports nothing else of spark_app.
"""
