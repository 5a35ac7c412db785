#!/usr/bin/env bash
# Builds the Go programs the kind node needs besides the Kubernetes toolchain and prints their
# directory on stdout (logs on stderr):
#   coredns   github.com/coredns/coredns at the version kubeadm asks for, with the bed's plugins
#             only (scripts/kind/coredns/main.go)
#   pause     the project's own sandbox program (scripts/kind/pause)
#   scripts/kind/components.sh <coredns-version>      e.g. v1.12.1
# Idempotent: a stamp next to each binary records what it was built from.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
exec 3>&1 1>&2

COREDNS_VERSION=${1:?usage: $0 <coredns-version>}

command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH"
command -v go >/dev/null || die "go not found (expected in PATH or /usr/local/go/bin)"
# Same Go settings as scripts/k8s-toolchain.sh: proxy only, shared module and build caches.
GOPROXY=$(go env GOPROXY | tr ',|' '\n\n' | grep -vx -e direct -e off | paste -sd, -)
[ -n "$GOPROXY" ] || die "no module proxy configured (GOPROXY=$(go env GOPROXY))"
export GOPROXY GOTOOLCHAIN=local CGO_ENABLED=0
export GOMODCACHE="$STREAMJOB_CACHE/go/mod" GOCACHE="$STREAMJOB_CACHE/go/build"
# -dwarf=false: no debug information, which -ldflags -w drops from the binaries anyway (9 % less
# CPU per build: helm, 155 -> 140 CPU s from an empty build cache).
export GOFLAGS="-modcacherw -buildvcs=false -trimpath -gcflags=all=-dwarf=false"

bin="$STREAMJOB_CACHE/kind/bin"
mkdir -p "$bin"
exec 9>"$bin/.lock"
flock 9
GO_VERSION=$(go env GOVERSION)

fresh() { [ -x "$bin/$1" ] && [ "$(cat "$bin/.$1.stamp" 2>/dev/null)" = "$2" ]; }

# Our own main (scripts/kind/coredns): only the plugins the bed's Corefile uses.
src="$REPO_ROOT/scripts/kind/coredns"
stamp="coredns $COREDNS_VERSION $(main_hash "$src") $GO_VERSION"
if ! fresh coredns "$stamp"; then
  log "building coredns $COREDNS_VERSION (the bed's plugins only)"
  start=$SECONDS
  go_build_main "$src" github.com/coredns/coredns "$COREDNS_VERSION" "$bin/coredns"
  echo "$stamp" >"$bin/.coredns.stamp"
  log "coredns: built in $((SECONDS - start))s"
fi

src="$REPO_ROOT/scripts/kind/pause"
stamp="pause $(cat "$src/go.mod" "$src/main.go" | sha256sum | cut -c1-16) $GO_VERSION"
if ! fresh pause "$stamp"; then
  log "building pause"
  (cd "$src" && go build -ldflags "-s -w" -o "$bin/pause" .)
  echo "$stamp" >"$bin/.pause.stamp"
fi
echo "$bin" >&3
