#!/bin/bash
# Entrypoint of the StreamingJob Spark image (written for this project).
#
# Spark on Kubernetes starts pods from this image in three ways:
#   executor   Spark's driver creates executor pods with the single argument `executor` and the
#              SPARK_* environment of BasicExecutorFeatureStep (SPARK_DRIVER_URL,
#              SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_EXECUTOR_MEMORY,
#              SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP, SPARK_EXECUTOR_POD_NAME,
#              SPARK_RESOURCE_PROFILE_ID, SPARK_CLASSPATH, SPARK_CONF_DIR and the JVM options as
#              SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...); this starts KubernetesExecutorBackend.
#   driver     `spark-submit` in cluster mode creates a driver pod with `driver <submit args>`;
#              the driver then runs spark-submit in client mode inside the pod.
#   submit     the operator's driver pods: `submit <spark-submit> <args>` runs spark-submit in
#              client mode and hands the pod's SIGTERM to the job's Python runner (below).
#   anything   else is executed as given.
set -eo pipefail

SPARK_HOME=${SPARK_HOME:-/opt/spark}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java

# A uid without a passwd entry (e.g. a random uid forced by the cluster) leaves the JVM and
# Hadoop without a user name; give them one.
if ! id -un >/dev/null 2>&1; then
  export HADOOP_USER_NAME=${HADOOP_USER_NAME:-${SPARK_USER:-spark}}
  export HOME=${HOME:-/tmp}
fi

# The class path starts like spark-submit's (slf4j-api, then every Spark jar): the image's
# class-data-sharing archive (Dockerfile) is only used by a JVM whose class path starts exactly
# like the one it was trained with. The conf directory (log4j2 and Hadoop files mounted by the
# driver) follows; no Spark jar has such a file at its root, so nothing shadows it. User jars
# (spark.executor.extraClassPath) stay in front and win, at the price of running without the
# archive.
classpath() {
  local cp="$SPARK_HOME/jars/*" slf4j
  for slf4j in "$SPARK_HOME"/jars/slf4j-api-*.jar; do
    [ -f "$slf4j" ] && cp="$slf4j:$cp"
    break
  done
  [ -n "${SPARK_CONF_DIR:-}" ] && [ -d "$SPARK_CONF_DIR" ] && cp="$cp:$SPARK_CONF_DIR"
  [ -n "${SPARK_CLASSPATH:-}" ] && cp="$SPARK_CLASSPATH:$cp"
  [ -n "${SPARK_DIST_CLASSPATH:-}" ] && cp="$cp:$SPARK_DIST_CLASSPATH"
  printf '%s' "$cp"
}

# SPARK_JAVA_OPT_<n> in numeric order of <n>, each one JVM argument, taken verbatim.
java_opts() {
  local name
  JAVA_OPTS=()
  while read -r name; do
    JAVA_OPTS+=("${!name}")
  done < <(compgen -e | grep -E '^SPARK_JAVA_OPT_[0-9]+$' | sort -t_ -k4,4n)
}

require() {
  local name
  for name in "$@"; do
    [ -n "${!name:-}" ] || { echo "entrypoint: $name must be set for '$mode'" >&2; exit 64; }
  done
}

mode=${1:-}
case "$mode" in
  executor)
    shift
    require SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_EXECUTOR_MEMORY \
      SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP
    java_opts
    args=(
      --driver-url "$SPARK_DRIVER_URL"
      --executor-id "$SPARK_EXECUTOR_ID"
      --cores "$SPARK_EXECUTOR_CORES"
      --app-id "$SPARK_APPLICATION_ID"
      --hostname "$SPARK_EXECUTOR_POD_IP"
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}"
    )
    [ -n "${SPARK_EXECUTOR_POD_NAME:-}" ] && args+=(--podName "$SPARK_EXECUTOR_POD_NAME")
    exec "$JAVA" "${JAVA_OPTS[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$(classpath)" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend "${args[@]}" "$@"
    ;;
  driver)
    shift
    submit=("$SPARK_HOME/bin/spark-submit")
    [ -n "${SPARK_DRIVER_BIND_ADDRESS:-}" ] &&
      submit+=(--conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS")
    exec "${submit[@]}" --deploy-mode client "$@"
    ;;
  submit)
    # spark-submit's JVM runs the Python runner as its first child and exits with the runner's
    # code. The kubelet's SIGTERM (pod deletion, node drain) goes to the runner only, which
    # stops the query between batches and exits 0; delivered to the JVM, its shutdown hook
    # would stop the SparkContext under a running batch, and to the JVM's later children (the
    # Python source runner, workers) it would fail that batch. tini (pid 1) forwards it here.
    # The runner is the JVM's oldest *live* child: spark-class's launcher subshell can outlive
    # its `exec` of the JVM and stay on as the JVM's unreaped (zombie) first child, and a
    # signal to it would be lost.
    shift
    set +e
    "$@" &
    jvm=$!
    runner() {
      ps -o pid=,stat= --ppid "$jvm" --sort=start_time | awk '$2 !~ /^Z/ { print $1; exit }'
    }
    trap 'pid=$(runner); kill -TERM "${pid:-$jvm}"' TERM INT
    wait "$jvm"
    rc=$?
    while kill -0 "$jvm" 2>/dev/null; do  # a trapped signal ends `wait` early
      wait "$jvm"
      rc=$?
    done
    exit "$rc"
    ;;
  "")
    echo "usage: executor | driver <spark-submit args> | submit <spark-submit> <args> | <command> [args...]" >&2
    exit 64
    ;;
  *)
    exec "$@"
    ;;
esac
