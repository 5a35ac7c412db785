#!/usr/bin/env bash
# Deletes the end-to-end kind cluster and stops its registry (the node image, the images, the
# registry's blobs and all caches stay).
#   scripts/kind/down.sh          STREAMJOB_KIND_CLUSTER as for up.sh
set -euo pipefail
source "$(dirname "$0")/../common.sh"
CLUSTER=${STREAMJOB_KIND_CLUSTER:-streamingjob-e2e}
K8S_BIN=$(bash "$REPO_ROOT/scripts/k8s-toolchain.sh" all)
if docker info >/dev/null 2>&1 && "$K8S_BIN/kind" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  start=$SECONDS
  "$K8S_BIN/kind" delete cluster --name "$CLUSTER" --kubeconfig "$STREAMJOB_CACHE/kind/$CLUSTER.kubeconfig"
  log "cluster $CLUSTER deleted in $((SECONDS - start))s"
else
  log "no cluster $CLUSTER"
fi
rm -f "$STREAMJOB_CACHE/kind/$CLUSTER.kubeconfig"
bash "$REPO_ROOT/scripts/kind/registry.sh" down
