# Shared settings for the project's scripts. Source it; it defines no side effects.
# Everything heavy (venv, Kafka jars, Go binaries, images) lives under one cache directory
# that survives clones, so a second run reuses it and a fresh machine rebuilds it.
STREAMJOB_CACHE="${STREAMJOB_CACHE:-$HOME/.cache/streamingjob}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STREAMJOB_CACHE REPO_ROOT
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
