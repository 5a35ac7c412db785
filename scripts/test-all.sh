#!/usr/bin/env bash
# Every test tier, as `make test` (and so CI) runs them:
#   scripts/test-all.sh <python> [pytest args...]
# The `alone` tests run first, by themselves. Then two chains side by side:
#   - the Spark tier (the service tests below, then tests/integration/spark_app: local Spark
#     JVMs, CPU-bound), beside the operator tests that kill or freeze operators at its start;
#   - the rest (unit tests, the operator on a real API server: mostly waiting, in two sessions
#     side by side) while the kind bed and its services come up (docker, image pulls, Kafka),
#     then the e2e tier, beside the typed-records queries (short Spark queries taken out of
#     the Spark tier). The e2e tier never runs beside the rest: the three together overloaded
#     two cores (an operator lost its Lease).
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
# Operator tests that kill, freeze or crash operators (minutes, mostly waiting on their
# operators' restarts and Leases): a session of their own beside the Spark tier's start, so that
# neither chain waits on them (in the rest they delayed the e2e tier; in the Spark tier's
# session they lengthened it by their whole time).
OPERATOR_KILLS="tests/integration/operator/test_op_crash.py tests/integration/operator/test_op_leader.py"
# The rest's second session, beside the first (each waits on its own API server and broker).
REST_BESIDE="tests/integration/operator/test_op_kafka.py tests/integration/operator/test_op_autoscaler.py tests/integration/operator/test_op_chart_rbac.py"
NOT_HERE="not e2e and not soak and not alone"

# First, alone: a replicated Kafka cluster's start and failover within the clients' 60 s
# deadline (beside the Spark tier its three nodes once did not all register within 120 s).
"$PY" -m pytest -m "alone and not soak" --basetemp="$logs/alone-tmp" "$@"
alone_rc=$?
# its own --basetemp: two pytest sessions must not clean up each other's tmp_path dirs
# shellcheck disable=SC2086  # the glob is meant to expand
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/spark-tmp" --durations=25 "$@" \
  --ignore-glob="$TYPED_GLOB" $SERVICES_GLOB "$SPARK_TIER" >"$logs/spark.log" 2>&1 &
spark=$!
# shellcheck disable=SC2086  # the list is meant to split
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/kills-tmp" --durations=5 "$@" $OPERATOR_KILLS \
  >"$logs/kills.log" 2>&1 &
kills=$!
# the bed's services (Kafka, the registry, MinIO) start as soon as the cluster is up: the e2e
# fixtures then find them running
{
  bash scripts/kind/up.sh >"$logs/kubeconfig" &&
    STREAMJOB_E2E_KUBECONFIG=$(cat "$logs/kubeconfig") "$PY" -m tests.e2e.bed start-services >&2
} 2>"$logs/up.log" &
up=$!
# shellcheck disable=SC2086  # the list is meant to split
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/beside-tmp" "$@" $REST_BESIDE \
  >"$logs/beside.log" 2>&1 &
beside=$!
ignored=()
for f in $OPERATOR_KILLS $REST_BESIDE; do ignored+=(--ignore="$f"); done
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/rest-tmp" --ignore="$SPARK_TIER" \
  --ignore-glob="$SERVICES_GLOB" "${ignored[@]}" "$@"
rc=$?
wait $beside
beside_rc=$?
echo "=== $REST_BESIDE (ran beside the tests above) ==="
cat "$logs/beside.log"
[ $rc = 0 ] && rc=$beside_rc
[ $rc = 0 ] && rc=$alone_rc
# shellcheck disable=SC2086  # the glob is meant to expand
"$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/typed-tmp" "$@" $TYPED_GLOB >"$logs/typed.log" 2>&1 &
typed=$!
wait $up
up_rc=$?
cat "$logs/up.log" >&2
if [ $up_rc != 0 ]; then
  echo "kind bed failed (exit $up_rc)" >&2
  rc=1
elif [ $rc = 0 ]; then
  STREAMJOB_E2E_KUBECONFIG=$(cat "$logs/kubeconfig") "$PY" -m pytest -m e2e --durations=25 "$@"
  rc=$?
fi
wait $typed
typed_rc=$?
echo "=== $TYPED_GLOB (ran beside the e2e tier) ==="
cat "$logs/typed.log"
[ $rc = 0 ] && rc=$typed_rc
wait $kills
kills_rc=$?
echo "=== $OPERATOR_KILLS (ran beside the Spark tier) ==="
cat "$logs/kills.log"
[ $rc = 0 ] && rc=$kills_rc
wait $spark
spark_rc=$?
echo "=== $SERVICES_GLOB and $SPARK_TIER (ran beside the tests above) ==="
cat "$logs/spark.log"
[ $rc = 0 ] && rc=$spark_rc
bash scripts/kind/down.sh
exit $rc
