#!/usr/bin/env bash
# Every test tier, as `make test` (and so CI) runs them:
#   scripts/test-all.sh <python> [pytest args...]
# The `alone` tests run first, by themselves. Then three chains side by side:
#   - the Spark tier (the service tests below, then tests/integration/spark_app: local Spark
#     JVMs, CPU-bound: the longest chain);
#   - the rest (unit tests; the operator on a real API server: mostly waiting), then the
#     typed-records queries (short Spark queries taken out of the Spark tier);
#   - the kind bed (docker, image pulls), then the e2e tier as soon as it is up: the e2e
#     scenarios mostly wait on the cluster, so they need not wait for the rest.
# `make test-soak` runs the `soak` tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=$1
shift
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
SPARK_TIER=tests/integration/spark_app
# Local Spark queries too, but short ones (Avro, JSON Schema, Protobuf records): they run
# after the rest, beside the kind bed's start, so that the Spark tier ends soon after the bed is up.
TYPED_GLOB="$SPARK_TIER/test_*_records.py"
# Tests of real brokers and the real registry without Spark (decoding, dead letters, clusters):
# they open the Spark tier's session, which ends before the e2e tier does, instead of
# lengthening the rest, after which the kind bed comes up.
SERVICES_GLOB="tests/integration/test_*.py"
NOT_HERE="not e2e and not soak and not alone"

# First, alone: a replicated Kafka cluster's start and failover within the clients' 60 s
# deadline (beside the Spark tier its three nodes once did not all register within 120 s).
"$PY" -m pytest -m "alone and not soak" --basetemp="$logs/alone-tmp" "$@"
alone_rc=$?
# its own --basetemp: two pytest sessions must not clean up each other's tmp_path dirs
# shellcheck disable=SC2086  # the glob is meant to expand
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/spark-tmp" --durations=10 "$@" \
  --ignore-glob="$TYPED_GLOB" $SERVICES_GLOB "$SPARK_TIER" >"$logs/spark.log" 2>&1 &
spark=$!
(
  bash scripts/kind/up.sh >"$logs/kubeconfig" 2>"$logs/up.log" || { echo "kind bed failed (exit $?)"; exit 1; }
  STREAMJOB_E2E_KUBECONFIG=$(cat "$logs/kubeconfig") "$PY" -m pytest -m e2e --durations=10 "$@"
) >"$logs/e2e.log" 2>&1 &
e2e=$!
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/rest-tmp" --ignore="$SPARK_TIER" \
  --ignore-glob="$SERVICES_GLOB" "$@"
rc=$?
[ $rc = 0 ] && rc=$alone_rc
# shellcheck disable=SC2086  # the glob is meant to expand
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/typed-tmp" "$@" $TYPED_GLOB
typed_rc=$?
[ $rc = 0 ] && rc=$typed_rc
wait $e2e
e2e_rc=$?
echo "=== kind bed, then e2e (ran beside the tests above) ==="
cat "$logs/up.log" "$logs/e2e.log"
[ $rc = 0 ] && rc=$e2e_rc
wait $spark
spark_rc=$?
echo "=== $SERVICES_GLOB and $SPARK_TIER (ran beside the tests above) ==="
cat "$logs/spark.log"
[ $rc = 0 ] && rc=$spark_rc
bash scripts/kind/down.sh
exit $rc
