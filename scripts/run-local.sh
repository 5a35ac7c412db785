#!/usr/bin/env bash
# `make run`: the embedded default. Starts the project's Kafka broker on 127.0.0.1:9092,
# produces sample orders in the background and runs examples/local-job.yaml on local Spark.
# Each batch prints a line; the consumer group's offsets follow each completed batch.
set -euo pipefail
source "$(dirname "$0")/common.sh"
PY=${1:?usage: run-local.sh <python>}
cd "$REPO_ROOT"
"$PY" -m tests.support.kafka_broker start --dir "$STREAMJOB_CACHE/local-broker" --port 9092
"$PY" examples/sample_producer.py --bootstrap 127.0.0.1:9092 --topic orders --rate 200 \
  >/tmp/streamingjob-producer.log 2>&1 &
producer=$!
trap 'kill $producer 2>/dev/null || true; "$PY" examples/show_offsets.py --group orders-to-parquet --topic orders' EXIT
log "running examples/local-job.yaml: a line per batch (rows, offsets, lag);" \
  "Ctrl-C stops it between batches, run it again to see it restore"
"$PY" -m spark_app --manifest examples/local-job.yaml --report-file /tmp/streamingjob-report.json
