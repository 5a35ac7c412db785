#!/usr/bin/env bash
# Creates (once) the Python environment the project runs in and prints its path.
# The venv is keyed by the pinned requirements, cached, and holds only those (plus Spark's S3A
# connector jars beside pyspark's own); the project
# itself is put on PYTHONPATH by the Makefile, so any clone can use it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
reqs=$(python3 - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
reqs = list(project["dependencies"])
for name in ("spark", "operator", "dev"):
    reqs += [r for r in extras[name] if not r.startswith(project["name"])]
print("\n".join(reqs))
PY
)
# Keyed by the pinned requirements only: editing tool settings must not rebuild it.
key=$( { echo "$reqs"; python3 --version; } | sha256sum | cut -c1-12)
venv="$STREAMJOB_CACHE/venv/$key"
mkdir -p "$STREAMJOB_CACHE/venv"
exec 9>"$STREAMJOB_CACHE/venv/.lock"
flock 9  # concurrent callers wait for one build instead of racing
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  log "creating $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $reqs >&2
  touch "$venv/.complete"
fi
# Spark's Python processes import pyspark from its zip: compile it once (the script says why).
if [ ! -f "$venv/.pyspark-bytecode" ]; then
  "$venv/bin/python" "$REPO_ROOT/scripts/pyspark_zip_bytecode.py"
  touch "$venv/.pyspark-bytecode"
fi
# Spark's S3A connector beside Spark's own jars, as in the image: s3a:// locations work locally.
s3a_mark="$venv/.s3a-$(sha256sum "$REPO_ROOT/scripts/s3a/pom.xml" | cut -c1-12)"
if [ ! -f "$s3a_mark" ]; then
  spark_jars=$("$venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  bash "$REPO_ROOT/scripts/s3a-jars.sh" --into "$spark_jars" >/dev/null
  touch "$s3a_mark"
fi
echo "$venv"
