#!/usr/bin/env bash
# Resolves Spark's S3A connector (scripts/s3a/pom.xml: hadoop-aws + the AWS SDK v2 modules it
# loads) from Maven Central once and prints the cached directory of its jars on stdout.
#   scripts/s3a-jars.sh [--into DIR [--beside SPARK_JARS]]
#     also link the jars into DIR (a pyspark/jars, or an image's build context) except those
#     Spark already ships in SPARK_JARS (default DIR) under another version (netty, httpclient,
#     commons-codec, slf4j): Spark's own win, as they do on a cluster.
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec 3>&1 1>&2
pom="$REPO_ROOT/scripts/s3a/pom.xml"
into='' spark_jars=''
while [ $# -gt 0 ]; do
  case "$1" in
    --into) into=$2 ;;
    --beside) spark_jars=$2 ;;
    *) die "usage: $0 [--into DIR [--beside SPARK_JARS]]" ;;
  esac
  shift 2
done
spark_jars=${spark_jars:-$into}

key=$(sha256sum "$pom" | cut -c1-12)
dir="$STREAMJOB_CACHE/s3a/$key"
mkdir -p "$STREAMJOB_CACHE/s3a"
exec 9>"$STREAMJOB_CACHE/s3a/.lock"
flock 9
if [ ! -f "$dir/.complete" ]; then
  command -v mvn >/dev/null || die "Maven (mvn) is required to fetch the S3A connector"
  log "resolving the S3A connector into $dir"
  rm -rf "$dir.tmp" "$dir"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$dir.tmp" >&2
  mv "$dir.tmp" "$dir" && touch "$dir/.complete"
fi
if [ -n "$into" ]; then
  mkdir -p "$into"
  # artifact name = file name without the trailing -<version>.jar
  artifact() { sed -E 's/-[0-9][^-]*(-[A-Za-z0-9_]+)*\.jar$//'; }
  # (jars this script linked there earlier do not count as Spark's)
  shipped=$(comm -23 <(ls "$spark_jars" | sort) <(ls "$dir" | sort) | artifact | sort -u)
  for jar in "$dir"/*.jar; do
    grep -qxF "$(basename "$jar" | artifact)" <<<"$shipped" ||
      ln -f "$jar" "$into/" 2>/dev/null || cp "$jar" "$into/"
  done
fi
echo "$dir" >&3
