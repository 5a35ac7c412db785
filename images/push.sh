#!/usr/bin/env bash
# Builds the images (images/build.sh) and pushes them to the registry STREAMJOB_IMAGE_PREFIX
# names; prints each pushed tag on stdout. `make push` runs it; so does the kind bed, which
# pushes the orders job's image to its own registry (scripts/kind/registry.sh).
#   STREAMJOB_IMAGE_PREFIX=<registry host>/<path> images/push.sh [spark] [operator] ...
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
case "${STREAMJOB_IMAGE_PREFIX:-streamingjob}" in
  */*) ;;
  *) die "STREAMJOB_IMAGE_PREFIX='${STREAMJOB_IMAGE_PREFIX:-}' names no registry: set it (make push IMAGE_PREFIX=<registry host>/<path>)" ;;
esac
mapfile -t tags < <(bash "$REPO_ROOT/images/build.sh" "$@")
[ ${#tags[@]} -gt 0 ] || die "images/build.sh built nothing"
for tag in "${tags[@]}"; do
  start=$SECONDS
  docker push -q "$tag" >&2 || die "docker push $tag failed (is the registry up, and are you logged in: docker login ${tag%%/*}?)"
  log "pushed $tag in $((SECONDS - start))s"
  echo "$tag"
done
