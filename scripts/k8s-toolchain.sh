#!/usr/bin/env bash
# Builds the Kubernetes toolchain from Go modules (no release downloads, no registry) and prints
# the directory holding the binaries on stdout; everything else goes to stderr.
#
#   scripts/k8s-toolchain.sh apiserver   kube-apiserver, etcd, kubectl (operator integration tests)
#   scripts/k8s-toolchain.sh helm        helm only (chart lint and rendering tests)
#   scripts/k8s-toolchain.sh all         + controller-manager, scheduler, proxy, kubelet, kubeadm,
#                                          kind, helm (the kind bed)
#   scripts/k8s-toolchain.sh minio       minio only: the S3-compatible server of the object-storage
#                                          tests (a test service, AGPLv3: never shipped by the chart)
#   scripts/k8s-toolchain.sh promtool    promtool only: evaluates the chart's alert rules against
#                                          the operator's real metrics (tests/integration)
#   scripts/k8s-toolchain.sh registry    the CNCF Distribution registry only (our main: filesystem
#                                          storage): the kind bed's image registry
#                                          (scripts/kind/registry.sh; make push's target)
#
# Idempotent: each binary has a stamp recording what it was built from; a binary whose stamp
# matches is not rebuilt. The wrapper modules are generated under the cache, not kept in the repo.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# 1.34: the newest minor whose kubelet still runs on a cgroup v1 host without extra config.
K8S_VERSION=v1.34.4
# kubeadm 1.34's DefaultEtcdVersion (cmd/kubeadm/app/constants) is 3.6.5-0.
ETCD_VERSION=v3.6.5
KIND_VERSION=v0.30.0
HELM_VERSION=v3.22.0
# MinIO publishes no Go module tags; this pseudo-version is the module proxy's @latest of 2026-02.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
# Prometheus 3.x publishes its Go module as v0.3XX.Y (v0.316.0 = Prometheus 3.16.0).
PROMETHEUS_VERSION=v0.316.0
REGISTRY_VERSION=v3.1.2
# The registry is built from our own main (scripts/kind/registry): its stamp records the main too.
registry_version() { echo "$REGISTRY_VERSION $(main_hash "$REPO_ROOT/scripts/kind/registry")"; }

APISERVER_BINS=(kube-apiserver kubectl)
ALL_BINS=(kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm)

# Keep stdout for the final answer only: go and our logs both write to stderr.
exec 3>&1 1>&2

stage=${1:-}
case "$stage" in
  apiserver|helm|all|minio|promtool|registry) ;;
  *) die "usage: $0 apiserver|helm|all|minio|promtool|registry" ;;
esac

command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || die "go not found (expected in PATH or /usr/local/go/bin)"

# Only the module proxy is reachable: 'direct' would try source hosts and hang or fail.
GOPROXY=$(go env GOPROXY | tr ',|' '\n\n' | grep -vx -e direct -e off | paste -sd, -)
[ -n "$GOPROXY" ] || die "no module proxy configured (GOPROXY=$(go env GOPROXY))"
export GOPROXY GOTOOLCHAIN=local
export GOMODCACHE="$STREAMJOB_CACHE/go/mod" GOCACHE="$STREAMJOB_CACHE/go/build"
# -modcacherw: a read-only module cache cannot be removed by `rm -rf` as a normal user.
# -dwarf=false: no debug information, which -ldflags -w drops from the binaries anyway (9 % less
# CPU per build: helm, 155 -> 140 CPU s from an empty build cache).
export GOFLAGS="-modcacherw -buildvcs=false -trimpath -gcflags=all=-dwarf=false"
export CGO_ENABLED=0

root="$STREAMJOB_CACHE/k8s/$K8S_VERSION"
bin="$root/bin"
mkdir -p "$bin" "$GOMODCACHE" "$GOCACHE"

GO_VERSION=$(go env GOVERSION)
stamp_of() { printf '%s %s %s\n' "$1" "$2" "$GO_VERSION"; }
# up_to_date NAME VERSION: the binary exists and was built from exactly this version + toolchain.
up_to_date() {
  [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.stamp" 2>/dev/null)" = "$(stamp_of "$1" "$2")" ]
}
mark_built() { stamp_of "$1" "$2" >"$bin/.$1.stamp"; }

# wanted STAGE: "name version" of each binary the stage gives.
wanted() {
  case $1 in
    apiserver) printf '%s\n' "kube-apiserver $K8S_VERSION" "kubectl $K8S_VERSION" "etcd $ETCD_VERSION" ;;
    all)
      wanted apiserver
      printf "%s $K8S_VERSION\n" "${ALL_BINS[@]}"
      printf '%s\n' "kind $KIND_VERSION" "helm $HELM_VERSION"
      ;;
    helm) echo "helm $HELM_VERSION" ;;
    minio) echo "minio $MINIO_VERSION" ;;
    promtool) echo "promtool $PROMETHEUS_VERSION" ;;
    registry) echo "registry $(registry_version)" ;;
  esac
}
stage_built() {
  local name version
  while read -r name version; do up_to_date "$name" "$version" || return 1; done < <(wanted "$stage")
}
# Built already (a stamp is written only after its binary): answer at once, without waiting
# for another stage's build (on a fresh machine the API-server tests once waited out their 120 s).
if stage_built; then
  echo "$bin" >&3
  exit 0
fi
# Tests may call this concurrently; one builder at a time, the others wait and then find stamps.
exec 9>"$root/.lock"
flock 9

timed() {
  local start=$SECONDS
  "$@"
  log "$1: done in $((SECONDS - start))s"
}

# Kubernetes itself cannot be `go install`ed: its go.mod replaces the k8s.io/* staging modules
# with local directories. A wrapper module replaces them with their published v0.X.Y tags.
k8s_wrapper() {
  local dir="$root/k8s-wrapper" kmod staging
  [ -f "$dir/go.sum" ] && [ -f "$dir/.complete" ] && return 0
  log "generating Kubernetes wrapper module in $dir"
  rm -rf "$dir" && mkdir -p "$dir"
  kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | jq -r .GoMod)
  staging="v0.${K8S_VERSION#v1.}"
  # The go and godebug lines of the main module decide runtime defaults: match upstream's.
  {
    echo "module streamingjob.local/k8sbuild"
    echo
    grep -E '^(go|godebug) ' "$kmod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
  } >"$dir/go.mod"
  # The staging list changes between minors, so read it from this version's go.mod.
  awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$kmod" | while read -r m; do
    (cd "$dir" && go mod edit -replace="$m=$m@$staging")
  done
  {
    echo "//go:build tools"
    echo
    echo "// Package tools pins the Kubernetes commands this module builds."
    echo "package tools"
    echo
    echo "import ("
    for b in "${APISERVER_BINS[@]}" "${ALL_BINS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
    echo ")"
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy)
  touch "$dir/.complete"
}

# build_k8s NAME...: builds the stale ones in a single go build so shared packages compile once.
build_k8s() {
  local stale=() pkgs=() b info date ldflags="-s -w"
  for b in "$@"; do up_to_date "$b" "$K8S_VERSION" || stale+=("$b"); done
  [ ${#stale[@]} -gt 0 ] || { log "up to date: $*"; return 0; }
  k8s_wrapper
  # Without these the binaries report v0.0.0-master and kubeadm refuses the requested version.
  # The module proxy does not carry the commit hash; the tag's date stands in for the build date
  # so that rebuilding gives identical binaries.
  info=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION")
  date=$(jq -r '.Time // empty' <<<"$info" | sed 's/\.[0-9]*Z$/Z/')
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=${date:-1970-01-01T00:00:00Z}"
  done
  for b in "${stale[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "building ${stale[*]} $K8S_VERSION"
  # selinux,notest: the tags upstream's hack/lib/golang.sh builds release binaries with.
  (cd "$root/k8s-wrapper" && go build -tags selinux,notest -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}")
  for b in "${stale[@]}"; do mark_built "$b" "$K8S_VERSION"; done
}

# etcd's server module also carries replace directives, so it gets a wrapper with its own main.
build_etcd() {
  up_to_date etcd "$ETCD_VERSION" && { log "up to date: etcd"; return 0; }
  local dir="$root/etcd-wrapper"
  rm -rf "$dir" && mkdir -p "$dir"
  printf 'module streamingjob.local/etcdbuild\n\ngo 1.24\n' >"$dir/go.mod"
  cat >"$dir/main.go" <<'EOF'
// Command etcd runs the etcd server; it exists because etcd cannot be `go install`ed.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  log "building etcd $ETCD_VERSION"
  (cd "$dir" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy &&
    go build -ldflags "-s -w" -o "$bin/etcd" .)
  mark_built etcd "$ETCD_VERSION"
}

build_kind() {
  up_to_date kind "$KIND_VERSION" && { log "up to date: kind"; return 0; }
  log "building kind $KIND_VERSION"
  GOBIN="$bin" go install -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION"
  mark_built kind "$KIND_VERSION"
}

build_helm() {
  up_to_date helm "$HELM_VERSION" && { log "up to date: helm"; return 0; }
  log "building helm $HELM_VERSION"
  # The variables helm's Makefile sets: without them `helm version` misses the patch version and
  # `helm template`/`helm lint` assume Kubernetes 1.20 instead of the minor of the client-go
  # helm is built with (client-go v0.X.Y -> 1.X).
  local hmod client_go ldflags="-s -w"
  hmod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | jq -r .GoMod)
  client_go=$(awk '$1 == "k8s.io/client-go" {print $2}' "$hmod" | cut -d. -f2)
  ldflags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.metadata="
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$client_go"
  done
  GOBIN="$bin" go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mark_built helm "$HELM_VERSION"
}

build_minio() {
  up_to_date minio "$MINIO_VERSION" && { log "up to date: minio"; return 0; }
  log "building minio $MINIO_VERSION"
  GOBIN="$bin" go install -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION"
  mark_built minio "$MINIO_VERSION"
}

# promtool only (not the server): `promtool test rules` runs the chart's alert rules on series.
# remove_all_sd: no service discovery plugins (promtool's rule tests need none, and one of
# them pins a module version the proxy does not serve).
build_promtool() {
  up_to_date promtool "$PROMETHEUS_VERSION" && { log "up to date: promtool"; return 0; }
  log "building promtool $PROMETHEUS_VERSION"
  GOBIN="$bin" go install -tags remove_all_sd -ldflags "-s -w" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  mark_built promtool "$PROMETHEUS_VERSION"
}

# Our own main (scripts/kind/registry/main.go): the filesystem storage driver only.
build_registry() {
  local version
  version=$(registry_version)
  up_to_date registry "$version" && { log "up to date: registry"; return 0; }
  log "building registry $REGISTRY_VERSION (filesystem storage only)"
  go_build_main "$REPO_ROOT/scripts/kind/registry" github.com/distribution/distribution/v3 \
    "$REGISTRY_VERSION" "$bin/registry"
  mark_built registry "$version"
}

# Everything runs from main: bash reads scripts lazily, so editing this file while a long build
# runs must not change what the running instance executes next.
main() {
  local start=$SECONDS
  log "stage $stage into $bin (go $GO_VERSION, GOPROXY=$GOPROXY)"
  if [ "$stage" = helm ]; then
    timed build_helm
  elif [ "$stage" = minio ]; then
    timed build_minio
  elif [ "$stage" = promtool ]; then
    timed build_promtool
  elif [ "$stage" = registry ]; then
    timed build_registry
  else
    timed build_k8s "${APISERVER_BINS[@]}"
    timed build_etcd
  fi
  if [ "$stage" = all ]; then
    timed build_k8s "${ALL_BINS[@]}"
    timed build_kind
    timed build_helm
  fi
  log "stage $stage done in $((SECONDS - start))s"
  echo "$bin" >&3
}

main; exit
