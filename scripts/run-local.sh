#!/usr/bin/env bash
# `make run`: the embedded default. Starts the project's Kafka broker on 127.0.0.1:9092,
# produces sample orders in the background and runs examples/local-job.yaml on local Spark.
# Each batch prints a line; the consumer group's offsets follow each completed batch.
# `make run-avro` (run-local.sh <python> avro): the same with typed records, a local schema
# registry on 127.0.0.1:8081 and a dead-letter topic (examples/local-avro-job.yaml).
# `make run-sql` (run-local.sh <python> sql): the orders with a SQL transform (spec.job.sql) that
# keeps the large orders as columns (examples/local-sql-job.yaml).
set -euo pipefail
source "$(dirname "$0")/common.sh"
PY=${1:?usage: run-local.sh <python> [avro|sql]}
cd "$REPO_ROOT"
"$PY" -m devbed.kafka_broker start --dir "$STREAMJOB_CACHE/local-broker" --port 9092
if [ "${2:-}" = avro ]; then
  "$PY" -m devbed.schema_registry start --port 8081
  manifest=examples/local-avro-job.yaml group=orders-avro topic=orders-avro
  produce=(--avro http://127.0.0.1:8081/apis/ccompat/v7 --poison-every 1000
    --dead-letter-topic orders-avro-dead)
elif [ "${2:-}" = sql ]; then
  manifest=examples/local-sql-job.yaml group=orders-sql topic=orders produce=()
else
  manifest=examples/local-job.yaml group=orders-to-parquet topic=orders produce=()
fi
"$PY" examples/sample_producer.py --bootstrap 127.0.0.1:9092 --topic "$topic" --rate 200 \
  "${produce[@]}" >/tmp/streamingjob-producer.log 2>&1 &
producer=$!
trap 'kill $producer 2>/dev/null || true; "$PY" examples/show_offsets.py --group $group --topic $topic' EXIT
log "running $manifest: a line per batch (rows, offsets, lag);" \
  "Ctrl-C stops it between batches, run it again to see it restore"
"$PY" -m spark_app --manifest "$manifest" --report-file /tmp/streamingjob-report.json
