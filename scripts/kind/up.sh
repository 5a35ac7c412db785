#!/usr/bin/env bash
# Brings up the kind cluster of the end-to-end tests, offline: one control plane (which also
# runs the test services: Kafka, the object store, the operator) and STREAMJOB_KIND_WORKERS
# workers for the jobs (default 2, so drivers and executors move between nodes), with an image
# registry beside it (scripts/kind/registry.sh): the test services' images are loaded into the
# control plane, the job image is pushed to the registry and pulled by the workers. Prints the
# kubeconfig path on stdout; logs and timings on stderr.
#
#   scripts/kind/up.sh            docker (+ capability shim where needed), node image (built or
#                                 loaded from $STREAMJOB_CACHE/kind), cluster, registry, images
# Environment:
#   STREAMJOB_KIND_CLUSTER       cluster name (default streamingjob-e2e)
#   STREAMJOB_KIND_NODE_IMAGE    a node image to use instead of building one, e.g.
#                                kindest/node:v1.34.0 on a machine that can pull it; the value
#                                `official` means kind's own default image. Such images bring
#                                kind's default CNI, so the baked CNI is not needed.
#   STREAMJOB_KIND_SKIP_IMAGES=1 do not build/load/push the project's images
#   STREAMJOB_KIND_WORKERS       worker nodes (default 2; 0: a single node runs everything)
# Idempotent: a healthy cluster of the same node image and configuration is reused, images are
# loaded only when the node does not have that image ID yet, pushes send only new layers.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
exec 3>&1 1>&2
HERE="$REPO_ROOT/scripts/kind"
total=$SECONDS

CLUSTER=${STREAMJOB_KIND_CLUSTER:-streamingjob-e2e}
WORKERS=${STREAMJOB_KIND_WORKERS:-2}
STATE="$STREAMJOB_CACHE/kind"
KUBECONFIG_OUT="$STATE/$CLUSTER.kubeconfig"
TIMINGS="$STATE/timings.log"
mkdir -p "$STATE"
timing() { log "timing: $1 $2s"; printf '%s %s %s %ss\n' "$(date -u +%FT%TZ)" "$CLUSTER" "$1" "$2" >>"$TIMINGS"; }

bash "$HERE/docker-setup.sh"
K8S_BIN=$(bash "$REPO_ROOT/scripts/k8s-toolchain.sh" all)
KIND="$K8S_BIN/kind"
KUBECTL=("$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT")

# cold: the node image had to be built; warm: it came from docker or the cache tarball.
t=$SECONDS
temperature=warm
case "${STREAMJOB_KIND_NODE_IMAGE:-}" in
  "")
    before=$(ls "$STATE"/node-*.tar.zst 2>/dev/null || true)
    NODE_IMAGE=$(bash "$HERE/node-image.sh")
    tag=${NODE_IMAGE##*:}
    grep -qF "node-$tag.tar.zst" <<<"$before" || temperature=cold
    OWN_NODE=1
    ;;
  official) NODE_IMAGE='' OWN_NODE=0 ;;
  *) NODE_IMAGE=$STREAMJOB_KIND_NODE_IMAGE OWN_NODE=0 ;;
esac
timing "node-image-$temperature" $((SECONDS - t))

config="$STATE/$CLUSTER.yaml"
{
  echo "kind: Cluster"
  echo "apiVersion: kind.x-k8s.io/v1alpha4"
  echo "networking:"
  echo "  podSubnet: 10.244.0.0/16"
  # Our node image has its own CNI configuration baked in (scripts/kind/node/files/etc/cni).
  [ "$OWN_NODE" = 0 ] || echo "  disableDefaultCNI: true"
  # Registry hosts from /etc/containerd/certs.d (scripts/kind/registry.sh writes the bed's);
  # kind's own node images have this already.
  if [ "$OWN_NODE" = 1 ]; then
    echo "containerdConfigPatches:"
    echo "- |-"
    echo "  [plugins.\"io.containerd.grpc.v1.cri\".registry]"
    echo "    config_path = \"/etc/containerd/certs.d\""
  fi
  echo "nodes:"
  echo "- role: control-plane"
  [ -z "$NODE_IMAGE" ] || echo "  image: $NODE_IMAGE"
  # One node, one replica of each: leader election only adds a way to fail. On a saturated
  # 2-core machine a missed lease renewal restarts the controller manager or the scheduler,
  # and their successor waits out the lease (15 s) before it deletes or schedules anything.
  echo "  kubeadmConfigPatches:"
  echo "  - |"
  echo "    kind: ClusterConfiguration"
  echo "    controllerManager: {extraArgs: {leader-elect: \"false\"}}"
  echo "    scheduler: {extraArgs: {leader-elect: \"false\"}}"
  for _ in $(seq 1 "$WORKERS"); do
    echo "- role: worker"
    [ -z "$NODE_IMAGE" ] || echo "  image: $NODE_IMAGE"
  done
} >"$config"

node="$CLUSTER-control-plane"
workers=()
for i in $(seq 1 "$WORKERS"); do workers+=("$CLUSTER-worker$([ "$i" = 1 ] || echo "$i")"); done
# Healthy: every node container runs unpaused on the right image and the API answers (a test
# that stopped or paused a worker and did not bring it back leaves an unhealthy cluster).
healthy() {
  local n
  for n in "$node" "${workers[@]}"; do
    [ "$(docker inspect --format '{{.State.Status}}' "$n" 2>/dev/null)" = running ] || return 1
    [ -z "$NODE_IMAGE" ] || [ "$(docker inspect --format '{{.Config.Image}}' "$n")" = "$NODE_IMAGE" ] || return 1
  done
  [ "$(docker ps -q --filter "label=io.x-k8s.kind.cluster=$CLUSTER" | wc -l)" = $((1 + WORKERS)) ] &&
    cmp -s "$config" "$config.created" && "${KUBECTL[@]}" get --raw /readyz >/dev/null 2>&1
}
if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  [ -s "$KUBECONFIG_OUT" ] || "$KIND" export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG_OUT" >&2 || true
  if healthy; then
    log "reusing cluster $CLUSTER"
  else
    log "cluster $CLUSTER is stale or unhealthy: recreating it"
    "$KIND" delete cluster --name "$CLUSTER" >&2
  fi
fi
# The images are built and pushed to the registry while kind creates the cluster (mostly
# waiting on kubeadm): the nodes pull them once they are up.
pushing=
if [ "${STREAMJOB_KIND_SKIP_IMAGES:-0}" != 1 ]; then
  pushed_list=$(mktemp)
  t_push=$SECONDS
  {
    registry=$(bash "$HERE/registry.sh" up)
    # A cold build (no Spark image yet: a fresh machine) gets priority until it is pushed:
    # its containers weigh as eight processes of the host's, the daemon runs at nice -10.
    # Warm rebuilds take seconds and keep the defaults.
    if [ -z "$(docker images -q "$registry/streamingjob/spark")" ]; then
      trap 'bash "$HERE/cpu-weight.sh" 1024 0' EXIT
      bash "$HERE/cpu-weight.sh" 8192 -10
    fi
    STREAMJOB_IMAGE_PREFIX="$registry/streamingjob" bash "$REPO_ROOT/images/push.sh" \
      spark operator kafka minio schema-registry iceberg-rest orders >"$pushed_list"
    timing images-push $((SECONDS - t_push))
  } &
  pushing=$!
fi
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  t=$SECONDS
  "$KIND" create cluster --name "$CLUSTER" --config "$config" --kubeconfig "$KUBECONFIG_OUT" --wait 240s >&2
  cp "$config" "$config.created" # a cluster of another configuration is not reused
  timing "cluster-create-$temperature" $((SECONDS - t))
fi
"${KUBECTL[@]}" wait --for=condition=Ready node --all --timeout=180s >&2
"${KUBECTL[@]}" -n kube-system rollout status deployment/coredns --timeout=180s >&2

registry=$(bash "$HERE/registry.sh" up "$node" "${workers[@]}")
if [ "${STREAMJOB_KIND_SKIP_IMAGES:-0}" != 1 ]; then
  # Every image reaches the nodes through the registry, as users ship theirs (make push's
  # script): pushes send only new layers, and the nodes pull in parallel, compressed. (Loading
  # docker-saved tarballs into a node took 87 s of a warm bed's 186 s.) The test services run
  # on the control plane (with the tests' Kafka client, of the operator's image) under the
  # names the chart and examples/kind give them (streamingjob/<image>): the pulls are tagged
  # so. Job pods run on the workers, from the orders job's own image (examples/user-image:
  # FROM the Spark image, which no node pulls on its own: 1.6 GB unpacked for nothing). Pulled
  # again after each push (a tag may move) so no test waits for it; the example job's pods
  # find it (IfNotPresent), a smoke test pulls it anew.
  wait "$pushing" || die "the images could not be built or pushed to $registry"
  mapfile -t pushed <"$pushed_list"
  rm -f "$pushed_list"
  t=$SECONDS
  pull() { # node image [local name]
    docker exec "$1" ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d "$2" >/dev/null &&
      { [ -z "${3:-}" ] || docker exec "$1" ctr -n k8s.io images tag --force "$2" "$3" >/dev/null; }
  }
  pids=()
  pullers=("${workers[@]}")
  [ ${#pullers[@]} -gt 0 ] || pullers=("$node")
  for image in "${pushed[@]}"; do
    if [[ $image == */spark:* ]]; then
      continue
    elif [[ $image == */orders:* ]]; then
      for n in "${pullers[@]}"; do pull "$n" "$image" & pids+=($!); done
    else
      pull "$node" "$image" "docker.io/streamingjob/${image##*/streamingjob/}" & pids+=($!)
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid" || die "a node could not pull an image from $registry"; done
  timing images-pull $((SECONDS - t))
fi
timing "up-total-$temperature" $((SECONDS - total))
echo "$KUBECONFIG_OUT" >&3
