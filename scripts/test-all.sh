#!/usr/bin/env bash
# Every test tier, as `make test` (and so CI) runs them:
#   scripts/test-all.sh <python> [pytest args...]
# Two chains side by side on the two cores:
#   - the Spark tier (the service tests below, then tests/integration/spark_app: local Spark
#     JVMs, CPU-bound);
#   - the kind bed and its services coming up (docker, image pulls, Kafka) beside the rest
#     (unit tests and the operator on real API servers: mostly waiting, so in three sessions
#     side by side); then the e2e tier, beside the typed-records queries and the replicated
#     clusters' own tests, then the operator kill tests, then the source's reads on the broker.
# `make test-soak` runs the `soak` tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=$1
shift
# every test's wait bounds progress, never a speed; beside each other on two cores the tiers
# stretch them (devbed/polling.py, docs/ci.md: runs 87 to 90)
export DEVBED_WAIT_PATIENCE=${DEVBED_WAIT_PATIENCE:-2}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
SPARK_TIER=tests/integration/spark_app
OPERATOR=tests/integration/operator
# Local Spark queries too, but short ones (Avro, JSON Schema, Protobuf records): beside the
# e2e tier, so that the Spark tier ends no later than the e2e tier.
TYPED_GLOB="$SPARK_TIER/test_*_records.py"
# Tests of real brokers and the real registry without Spark (decoding, dead letters, clusters):
# they open the Spark tier's session instead of lengthening the rest.
SERVICES_GLOB="tests/integration/test_*.py"
# ...but the replicated clusters' own tests (three nodes' start, a kill, a stop; every Kafka
# call outside the reads through leader and coordinator loss): with the typed queries, which
# end long before the e2e tier. (The churn test ran alone before everything else: 54 s of
# both chains, for a cluster start that once took over 120 s beside the Spark tier; it now
# gets 240 s.)
CLUSTER_TESTS="tests/integration/test_kafka_cluster.py tests/integration/test_kafka_calls_under_churn.py"
# The source's reads on the broker, across versions and leader moves, and the SQL jobs
# (3.6 min alone on a quiet machine): after the kills, beside the e2e tier's second half. In
# the Spark tier's session they ended it, minutes after the e2e tier (run 85: 39.8 min against
# 33.7), while the line of the typed queries and the kills ended 10 min before the e2e tier.
SPARK_LATE="$SPARK_TIER/test_source_on_broker.py $SPARK_TIER/test_reads_across_versions_and_leaders.py $SPARK_TIER/test_sql_jobs.py"
# Operator tests that kill, freeze or crash operators (minutes, mostly waiting on restarts and
# Leases, sensitive to load): after the typed queries, beside the e2e tier. In the Spark tier's
# session they lengthened it by their whole time; beside the rest at the start (five sessions
# and the bed's start) a replica launched nothing within 30 s.
OPERATOR_KILLS="$OPERATOR/test_op_crash.py $OPERATOR/test_op_leader.py"
# The rest's other two sessions, each about a third of its waiting (each module starts its
# own API server), so that the rest ends about when the kind bed is up.
REST_BESIDE="$OPERATOR/test_op_kafka.py $OPERATOR/test_op_autoscaler.py"
REST_THIRD="$OPERATOR/test_op_validation.py $OPERATOR/test_op_handover.py $OPERATOR/test_op_standby.py $OPERATOR/test_op_sql.py $OPERATOR/test_op_chart_rbac.py"
NOT_HERE="not e2e and not soak"
# The simulation's 200,000 steps (issue 41: at most 3 min in CI): alone on both cores before
# the chains, about 30 s; inside the rest, beside the bed's start and the Spark tier, its
# workers got a sliver of the cores and took 316 s. The same CPU seconds either way.
SIMULATION=tests/simulation/test_simulation.py::test_every_history_keeps_every_invariant

# session NAME [pytest args...]: a pytest session with its own --basetemp (two sessions must
# not clean up each other's tmp_path dirs), its output in $logs/NAME.log, its exit code
# in $logs/NAME.rc
session() {
  local name=$1
  shift
  "$PY" -m pytest -m "$NOT_HERE" --basetemp="$logs/$name-tmp" "$@" >"$logs/$name.log" 2>&1
  echo $? >"$logs/$name.rc"
}
# report NAME TITLE: prints a session's output; a failed session (or one that left no exit
# code) fails the run
report() {
  echo "=== $2 ==="
  cat "$logs/$1.log"
  [ "$(cat "$logs/$1.rc" 2>/dev/null)" = 0 ] || [ $rc != 0 ] || rc=1
}

# the host's speed belongs beside the run's minutes (docs/ci.md: the same code took 1.8x the
# CPU seconds one week later); a failure to measure fails nothing
"$PY" bench/machine_speed.py || true
rc=0
session simulation -s --durations=1 "$@" "$SIMULATION"
services=()
for f in $SERVICES_GLOB; do [[ " $CLUSTER_TESTS " == *" $f "* ]] || services+=("$f"); done
late_ignored=()
for f in $SPARK_LATE; do late_ignored+=(--ignore="$f"); done
session spark --durations=25 "$@" --ignore-glob="$TYPED_GLOB" "${late_ignored[@]}" \
  "${services[@]}" "$SPARK_TIER" &
spark=$!
# the bed's services (Kafka, the registry, MinIO) start as soon as the cluster is up: the e2e
# fixtures then find them running
{
  bash scripts/kind/up.sh >"$logs/kubeconfig" &&
    STREAMJOB_E2E_KUBECONFIG=$(cat "$logs/kubeconfig") "$PY" -m devbed.kind_bed start-services >&2
} 2>"$logs/up.log" &
up=$!
ignored=()
# shellcheck disable=SC2086  # the lists and globs are meant to split and expand
for f in $SPARK_TIER $SERVICES_GLOB $OPERATOR_KILLS $REST_BESIDE $REST_THIRD; do
  ignored+=(--ignore="$f")
done
# the rest in three sessions beside the bed's start; the e2e tier waits for them
# shellcheck disable=SC2086  # the lists are meant to split
session beside --durations=5 "$@" $REST_BESIDE &
beside=$!
# shellcheck disable=SC2086
session third --durations=5 "$@" $REST_THIRD &
third=$!
session rest --durations=10 "$@" "${ignored[@]}" --deselect "$SIMULATION" &
rest=$!
wait $up
up_rc=$?
cat "$logs/up.log" >&2
wait $beside $third $rest
# then the typed queries and the clusters' tests, then the kills, then the source's reads,
# beside the e2e tier
# shellcheck disable=SC2086
{
  session typed --durations=5 "$@" $TYPED_GLOB $CLUSTER_TESTS
  session kills --durations=5 "$@" $OPERATOR_KILLS
  session late --durations=5 "$@" $SPARK_LATE
} &
others=$!
if [ $up_rc != 0 ]; then
  echo "kind bed failed (exit $up_rc)" >&2
  rc=1
else
  # The e2e tier waits for the rest and the bed's containers weigh as two local processes
  # while it runs. On cgroup v1 all of docker's containers weigh as one process of the
  # host's, and every local broker, registry, operator and Spark runner starts a session
  # (an autogroup) that weighs as much. On this week's slower hosts, started beside the rest
  # at that default, the bed's API server went minutes without a TLS handshake and its
  # operator lost its Lease (run 63); as four, beside the rest, the rest's local API servers
  # did not start within 180 s (run 64), and after it a Spark test's restore took 53 s to
  # start its query and missed its 120 s (run 65). After the rest, the default held every
  # tier but the e2e tier took 65 min (run 63), as four 54 min (run 64).
  bash scripts/kind/cpu-weight.sh 2048 0
  STREAMJOB_E2E_KUBECONFIG=$(cat "$logs/kubeconfig") "$PY" -m pytest -m e2e --durations=25 "$@"
  rc=$?
  bash scripts/kind/cpu-weight.sh 1024 0
fi
wait $others
report simulation "the simulation's CI steps (ran alone, first)"
report rest "unit and operator tests"
report beside "$REST_BESIDE (ran beside them)"
report third "$REST_THIRD (ran beside them)"
report typed "$TYPED_GLOB $CLUSTER_TESTS (ran beside the e2e tier, after the tests above)"
report kills "$OPERATOR_KILLS (ran beside the e2e tier, after the typed queries)"
report late "$SPARK_LATE (ran beside the e2e tier, after the kills)"
wait $spark
report spark "$SERVICES_GLOB and $SPARK_TIER (ran beside the tests above)"
bash scripts/kind/down.sh
"$PY" bench/machine_speed.py || true
exit $rc
