# Shared settings for the project's scripts. Source it; it defines no side effects.
# Everything heavy (venv, Kafka jars, Go binaries, images) lives under one cache directory
# that survives clones, so a second run reuses it and a fresh machine rebuilds it.
STREAMJOB_CACHE="${STREAMJOB_CACHE:-$HOME/.cache/streamingjob}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STREAMJOB_CACHE REPO_ROOT
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# go_build_main SRC MODULE VERSION OUT: builds our own main package SRC/main.go, which links
# only the parts of MODULE@VERSION the project uses (upstream's main links every plugin and
# cloud SDK: minutes of a fresh machine's CPU), in a wrapper module under the cache whose go
# line is MODULE's own (it decides the runtime's defaults). Go settings: the caller's.
go_build_main() {
  local src=$1 module=$2 version=$3 out=$4 dir upstream
  dir="$STREAMJOB_CACHE/go/main/$(basename "$src")"
  rm -rf "$dir" && mkdir -p "$dir" && cp "$src/main.go" "$dir/"
  upstream=$(go mod download -json "$module@$version" | jq -r .GoMod)
  {
    printf 'module streamingjob.local/%s\n\n' "$(basename "$src")"
    grep -E '^(go|godebug) ' "$upstream"
    printf '\nrequire %s %s\n' "$module" "$version"
  } >"$dir/go.mod"
  (cd "$dir" && go mod tidy && go build -ldflags "-s -w" -o "$out" .)
}
# main_hash SRC: the hash of SRC/main.go, for the stamp of what go_build_main built from it.
main_hash() { sha256sum <"$1/main.go" | cut -c1-16; }
