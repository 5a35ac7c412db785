#!/usr/bin/env bash
# The kind bed's image registry: the CNCF Distribution registry, built from its Go module
# (scripts/k8s-toolchain.sh registry), in a container `streamingjob-registry` on the kind
# network. The host pushes to it at localhost:5001 (`make push IMAGE_PREFIX=localhost:5001/
# streamingjob`); each node's containerd resolves `localhost:5001/...` to it (a hosts.toml in
# the node's /etc/containerd/certs.d; the cluster is created with that config_path), so pods
# name their image the way they would on any cluster with a registry. Blobs persist in
# $STREAMJOB_CACHE/kind/registry: a warm machine pushes only the layers that changed.
#
#   scripts/kind/registry.sh up NODE...   starts it (reused when running), points NODEs at it;
#                                         prints the push prefix's host (localhost:5001)
#   scripts/kind/registry.sh down         stops it (the blobs stay)
set -euo pipefail
source "$(dirname "$0")/../common.sh"
exec 3>&1 1>&2
HERE="$REPO_ROOT/scripts/kind"
NAME=streamingjob-registry # its host name on the kind network (the hosts.toml below)
HOST_ADDRESS=localhost:5001 # the host's name for it (the v2 check below)
STORE="$STREAMJOB_CACHE/kind/registry"

image() { # builds the registry image (FROM scratch: the static binary and our config)
  local bin ctx tag
  bin=$(bash "$REPO_ROOT/scripts/k8s-toolchain.sh" registry)
  ctx=$(mktemp -d)
  cp "$bin/registry" "$HERE/registry/Dockerfile" "$HERE/registry/config.yml" "$ctx/"
  tag="streamingjob/registry:$(cat "$ctx"/* | sha256sum | cut -c1-12)"
  docker image inspect "$tag" >/dev/null 2>&1 || DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "$tag"
}

up() {
  local tag node
  tag=$(image)
  if [ "$(docker inspect --format '{{.Config.Image}} {{.State.Running}}' "$NAME" 2>/dev/null)" != "$tag true" ]; then
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    install -d -o 65534 -g 65534 "$STORE"
    docker run -d --name "$NAME" --restart=always -p "127.0.0.1:${HOST_ADDRESS#*:}:5000" \
      -v "$STORE:/var/lib/registry" "$tag" >/dev/null
    log "registry $NAME started ($tag) at $HOST_ADDRESS"
  fi
  # on the nodes' network once it exists (up.sh pushes to the registry while kind creates it)
  if docker network inspect kind >/dev/null 2>&1; then
    docker network inspect kind --format '{{range .Containers}}{{.Name}} {{end}}' | grep -qw "$NAME" ||
      docker network connect kind "$NAME"
  fi
  for node in "$@"; do
    docker exec -i "$node" sh -c "mkdir -p '/etc/containerd/certs.d/$HOST_ADDRESS' &&
      cat > '/etc/containerd/certs.d/$HOST_ADDRESS/hosts.toml'" <<TOML
# $HOST_ADDRESS/... is the bed's registry, reached by its name on the kind network
[host."http://streamingjob-registry:5000"]
  capabilities = ["pull", "resolve"]
TOML
  done
  # answers before anyone pushes (the v2 API root)
  for _ in $(seq 1 50); do
    curl -fsS "http://localhost:5001/v2/" >/dev/null 2>&1 && { echo "$HOST_ADDRESS" >&3; return 0; }
    sleep 0.2
  done
  docker logs "$NAME" | tail -20
  die "registry $NAME does not answer at http://localhost:5001/v2/"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) docker rm -f "$NAME" >/dev/null 2>&1 || true ;;
  *) die "usage: $0 up NODE... | down" ;;
esac
