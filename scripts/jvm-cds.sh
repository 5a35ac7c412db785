#!/usr/bin/env bash
# Builds (once per Spark, JDK and training run; cached) the class-data-sharing (AppCDS) archive
# of the venv's local Spark and prints its path: the same training run as the Spark image's
# archive (images/spark/jvm_warmup.py). The Spark tests' JVMs map it (JDK_JAVA_OPTIONS, set by
# tests/integration/spark_app/conftest.py) instead of reading and verifying ~17k classes again:
# a local Spark start takes about 40% less (7.7 → 4.7 s). ~1 min to build.
#   scripts/jvm-cds.sh VENV
set -euo pipefail
source "$(dirname "$0")/common.sh"
venv=${1:?usage: jvm-cds.sh VENV}
spark_home=$("$venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
warmup="$REPO_ROOT/images/spark/jvm_warmup.py"
key=$({
  JDK_JAVA_OPTIONS= java -version 2>&1
  # names, sizes and times, not `ls -l`: its link counts change whenever the image build links
  # the S3A jars (also in the venv's jars) into its context, and a changed key rebuilt the
  # archive in two test sessions at once under CI's load
  (cd "$spark_home/jars" && stat -c '%n %s %Y' -- *)
  cat "$warmup"
} | sha256sum | cut -c1-16)
archive="$STREAMJOB_CACHE/jvm-cds/$key/spark.jsa"
if [ ! -s "$archive" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "building the local Spark CDS archive ($archive)"
  mkdir -p "$(dirname "$archive")"
  (cd "$work" && HOME="$work" SPARK_HOME="$spark_home" PYSPARK_PYTHON="$venv/bin/python" \
    JDK_JAVA_OPTIONS= "$spark_home/bin/spark-submit" --master 'local[2]' \
    --conf spark.ui.enabled=false \
    --conf "spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit=$work/spark.jsa" \
    "$warmup" >"$work/log" 2>&1) || { tail -20 "$work/log" >&2; die "CDS training run failed"; }
  mv "$work/spark.jsa" "$archive"
fi
echo "$archive"
