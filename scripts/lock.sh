#!/usr/bin/env bash
# Writes the hash locks in requirements/ from pyproject.toml's pins, transitive dependencies
# included, every distribution of each pinned version hashed:
#   requirements/dev.txt       the development venv (scripts/venv.sh) and CI: every extra
#   requirements/spark.txt     the Spark image: runtime + spark
#   requirements/operator.txt  the operator image: runtime + operator
#   requirements/maturin.txt   the native read path's build tool (scripts/native.sh's pin)
# Consumers install them with `pip install --require-hashes`; tests/unit/test_locks.py checks
# that they match pyproject.toml. Run after changing a pin: `bash scripts/lock.sh`.
# uv resolves through the machine's own uv configuration (uv.toml, UV_DEFAULT_INDEX; else its
# default index): no index is written here or into the locks.
set -euo pipefail
source "$(dirname "$0")/common.sh"
uv=${UV:-$(bash "$REPO_ROOT/scripts/venv.sh")/bin/uv}  # UV=...: another uv (the first lock)
cd "$REPO_ROOT"
lock() { # lock FILE EXTRA...: one universal lock for CPython 3.11 (the images' Python)
  local out=$1 args=()
  shift
  for extra in "$@"; do args+=(--extra "$extra"); done
  "$uv" pip compile --quiet --universal --python-version 3.11 --generate-hashes \
    --no-emit-package streamingjob --custom-compile-command "bash scripts/lock.sh" \
    "${args[@]}" pyproject.toml -o "$out"
}
lock requirements/dev.txt spark operator dev
lock requirements/spark.txt spark
lock requirements/operator.txt operator
maturin=$(sed -n 's/^MATURIN_VERSION=//p' scripts/native.sh)
echo "maturin==$maturin" | "$uv" pip compile --quiet --universal --python-version 3.11 \
  --generate-hashes --custom-compile-command "bash scripts/lock.sh" - -o requirements/maturin.txt
log "locks written: requirements/{dev,spark,operator,maturin}.txt"
