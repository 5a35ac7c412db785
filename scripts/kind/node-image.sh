#!/usr/bin/env bash
# Assembles the kind node image offline and prints its tag on stdout (logs on stderr):
#   streamingjob/kind-node:<k8s-version>-<recipe-hash>
#
# `kind build node-image` cannot work without a registry (it pulls etcd, CoreDNS, pause, kindnetd
# with `ctr content fetch`), so this does the same steps by hand:
#   1. node base: the project's Debian base + systemd/containerd/runc/CNI plugins from Debian +
#      the project's own entrypoint, units, containerd and CNI config (scripts/kind/node/);
#   2. component images FROM the project's base with the binaries built from Go modules
#      (scripts/k8s-toolchain.sh all, scripts/kind/components.sh), tagged exactly as kubeadm
#      asks for them (registry.k8s.io/...), and the pause image FROM scratch;
#   3. a container of the node base gets kubeadm/kubelet/kubectl and /kind/version, its containerd
#      imports the component images (--no-unpack), and the container is committed.
# The result is cached as $STREAMJOB_CACHE/kind/node-<k8s>-<hash>.tar.zst; the hash covers every
# input (recipe files, base image, binary stamps), so a changed recipe builds a new image and an
# unchanged one is only `docker load`ed on a machine whose docker storage is empty.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
exec 3>&1 1>&2
export DOCKER_BUILDKIT=0
HERE="$REPO_ROOT/scripts/kind"
start=$SECONDS

K8S_BIN=$(bash "$REPO_ROOT/scripts/k8s-toolchain.sh" all)
K8S_VERSION=$("$K8S_BIN/kubeadm" version -o short)
mapfile -t KUBEADM_IMAGES < <("$K8S_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
image_of() { printf '%s\n' "${KUBEADM_IMAGES[@]}" | grep -E "/$1:" | head -n1; }
COREDNS_IMAGE=$(image_of 'coredns/coredns|coredns')
ETCD_IMAGE=$(image_of etcd)
PAUSE_IMAGE=$(image_of pause)
SANDBOX_IMAGE=$(sed -n 's/^ *sandbox_image *= *"\(.*\)"/\1/p' "$HERE/node/files/etc/containerd/config.toml")
COMP_BIN=$(bash "$HERE/components.sh" "${COREDNS_IMAGE##*:}")
BASE_IMAGE=$(bash "$REPO_ROOT/images/base/build.sh")

recipe_hash() {
  {
    echo "$K8S_VERSION $BASE_IMAGE ${KUBEADM_IMAGES[*]} $SANDBOX_IMAGE"
    # the stamps of what the image holds: the toolchain's directory has other binaries too
    # (the bed's registry, built after the node image on a fresh machine, changed the hash)
    for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm kubectl etcd; do
      cat "$K8S_BIN/.$b.stamp"
    done
    cat "$COMP_BIN"/.*.stamp
    (cd "$HERE" && find node pause node-image.sh -type f -print0 | sort -z | xargs -0 sha256sum)
    (cd "$HERE" && find node -type f -print0 | sort -z | xargs -0 stat -c '%n %a')
  } | sha256sum | cut -c1-12
}
HASH=$(recipe_hash)
NODE_IMAGE="streamingjob/kind-node:$K8S_VERSION-$HASH"
CACHE_DIR="$STREAMJOB_CACHE/kind"
CACHE_TAR="$CACHE_DIR/node-$K8S_VERSION-$HASH.tar.zst"
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.node-image.lock"
flock 9

if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
  log "node image $NODE_IMAGE present"
  echo "$NODE_IMAGE" >&3
  exit 0
fi
if [ -f "$CACHE_TAR" ]; then
  log "loading cached node image $CACHE_TAR"
  t=$SECONDS
  zstd -dc "$CACHE_TAR" | docker load >/dev/null
  log "node image loaded in $((SECONDS - t))s"
  echo "$NODE_IMAGE" >&3
  exit 0
fi

log "building node image $NODE_IMAGE (kubeadm wants: ${KUBEADM_IMAGES[*]})"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/streamingjob-node.XXXXXX")
builder="streamingjob-node-build-$$"
cleanup() { docker rm -f "$builder" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

# 1. node base
t=$SECONDS
docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "streamingjob/kind-node-base:$HASH" "$HERE/node" >/dev/null
log "node base built in $((SECONDS - t))s"

# 2. component images. mkimg TAG BINARY DEST [APT PACKAGES...]
mkimg() {
  local tag=$1 bin=$2 dest=$3 ctx
  shift 3
  ctx="$work/img-$(basename "$bin")"
  mkdir -p "$ctx"
  cp "$bin" "$ctx/"
  {
    echo "ARG BASE_IMAGE"
    echo "FROM \${BASE_IMAGE}"
    [ $# -eq 0 ] || echo "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $* >/dev/null && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log"
    echo "COPY $(basename "$bin") $dest"
    echo "ENTRYPOINT [\"$dest\"]"
  } >"$ctx/Dockerfile"
  docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$tag" "$ctx" >/dev/null
}
t=$SECONDS
R=registry.k8s.io
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  mkimg "$R/$c:$K8S_VERSION" "$K8S_BIN/$c" "/usr/local/bin/$c"
done
mkimg "$R/kube-proxy:$K8S_VERSION" "$K8S_BIN/kube-proxy" /usr/local/bin/kube-proxy iptables nftables conntrack
mkimg "$ETCD_IMAGE" "$K8S_BIN/etcd" /usr/local/bin/etcd
mkimg "$COREDNS_IMAGE" "$COMP_BIN/coredns" /coredns
mkdir -p "$work/pause" && cp "$COMP_BIN/pause" "$work/pause/"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$work/pause/Dockerfile"
docker build -q -t "$PAUSE_IMAGE" "$work/pause" >/dev/null
[ "$SANDBOX_IMAGE" = "$PAUSE_IMAGE" ] || docker tag "$PAUSE_IMAGE" "$SANDBOX_IMAGE"
COMPONENTS=("${KUBEADM_IMAGES[@]}")
[ "$SANDBOX_IMAGE" = "$PAUSE_IMAGE" ] || COMPONENTS+=("$SANDBOX_IMAGE")
log "component images built in $((SECONDS - t))s"

# 3. assemble: binaries, version, preloaded images; then commit
t=$SECONDS
docker run -d --name "$builder" --entrypoint sleep --security-opt seccomp=unconfined \
  "streamingjob/kind-node-base:$HASH" infinity >/dev/null
for b in kubeadm kubelet kubectl; do docker cp "$K8S_BIN/$b" "$builder:/usr/bin/$b"; done
docker exec "$builder" sh -ec "
  chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
  chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
  echo '$K8S_VERSION' > /kind/version
  nohup containerd >/tmp/containerd.log 2>&1 &
  for i in \$(seq 100); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.1; done
  ctr version >/dev/null"
docker save "${COMPONENTS[@]}" |
  docker exec -i "$builder" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests - >/dev/null
listed=$(docker exec "$builder" ctr --namespace=k8s.io images ls -q)
for i in "${COMPONENTS[@]}"; do
  grep -qx "$i" <<<"$listed" || die "image $i missing in the node's containerd after import"
done
docker exec "$builder" sh -c 'kill $(pidof containerd); for i in $(seq 50); do pidof containerd >/dev/null || break; sleep 0.1; done
  rm -rf /tmp/* /run/containerd /var/lib/containerd/tmpmounts/*'
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$builder" "$NODE_IMAGE" >/dev/null
log "node image assembled in $((SECONDS - t))s"

t=$SECONDS
docker save "$NODE_IMAGE" | zstd -q -T0 -3 -o "$CACHE_TAR.tmp"
mv "$CACHE_TAR.tmp" "$CACHE_TAR"
# Older recipes' tarballs and images are dead weight (an image a cluster still uses stays).
find "$CACHE_DIR" -maxdepth 1 -name 'node-*.tar.zst' ! -name "${CACHE_TAR##*/}" -delete
docker images --format '{{.Repository}}:{{.Tag}}' |
  grep -E '^streamingjob/kind-node(-base)?:' | grep -vx -e "$NODE_IMAGE" -e "streamingjob/kind-node-base:$HASH" |
  xargs -r docker rmi >/dev/null 2>&1 || true
log "cached $CACHE_TAR ($(du -h "$CACHE_TAR" | cut -f1)) in $((SECONDS - t))s"
log "node image $NODE_IMAGE ($(docker image inspect --format '{{.Size}}' "$NODE_IMAGE" | awk '{printf "%.0f MB", $1/1e6}')) built in $((SECONDS - start))s"
echo "$NODE_IMAGE" >&3
