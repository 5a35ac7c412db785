#!/usr/bin/env bash
# Creates (once) the Python environment the project runs in and prints its path.
# The venv holds exactly requirements/dev.txt (hash-locked, transitive dependencies included:
# scripts/lock.sh), installed with `pip install --require-hashes`, plus Spark's S3A connector
# jars and jvm/localfs beside pyspark's own. It is keyed by that lock and cached, so clones
# and worktrees share it; it does not hold the project itself (tests import the checked-out
# tree: pytest's `pythonpath`; `pip install .` installs the package, as the images do).
set -euo pipefail
source "$(dirname "$0")/common.sh"
lock="$REPO_ROOT/requirements/dev.txt"
[ -f "$lock" ] || die "missing $lock (bash scripts/lock.sh)"
# Keyed by the lock only: editing tool settings must not rebuild it.
key=$( { cat "$lock"; python3 --version; } | sha256sum | cut -c1-12)
venv="$STREAMJOB_CACHE/venv/$key"
mkdir -p "$STREAMJOB_CACHE/venv"
exec 9>"$STREAMJOB_CACHE/venv/.lock"
flock 9  # concurrent callers wait for one build instead of racing
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  log "creating $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # the venv's own pip (ensurepip, pinned by the Python release); every package hash-checked
  "$venv/bin/pip" install -q --require-hashes --no-deps -r "$lock" >&2
  touch "$venv/.complete"
fi
# Spark puts its pyspark.zip and py4j-*-src.zip first on the path of every Python process it
# starts; imports from them cost ~0.25 s per query start (docs/source.md). Without the zips
# those processes import the installed, compiled pyspark. Only YARN ships the zips.
# (A glob, not a Python start: this script runs on every make call.)
rm -f "$venv"/lib/python3*/site-packages/pyspark/python/lib/*.zip
# Spark's S3A connector beside Spark's own jars, as in the image: s3a:// locations work locally.
s3a_mark="$venv/.s3a-$(sha256sum "$REPO_ROOT/scripts/s3a/pom.xml" | cut -c1-12)"
if [ ! -f "$s3a_mark" ]; then
  spark_jars=$("$venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  bash "$REPO_ROOT/scripts/s3a-jars.sh" --into "$spark_jars" >/dev/null
  touch "$s3a_mark"
fi
# Hadoop's local file system without child processes (jvm/localfs) beside them: spark_app uses
# it for file: checkpoints and sinks where Spark's jars have it.
localfs_mark="$venv/.localfs-$(cat "$REPO_ROOT"/jvm/localfs/*/*/*/*.java | sha256sum | cut -c1-12)"
if [ ! -f "$localfs_mark" ]; then
  spark_jars=$("$venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
  bash "$REPO_ROOT/scripts/localfs-jar.sh" "$spark_jars" --into "$spark_jars" >/dev/null
  rm -f "$venv"/.localfs-*
  touch "$localfs_mark"
fi
echo "$venv"
