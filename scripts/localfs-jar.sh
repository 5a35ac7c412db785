#!/usr/bin/env bash
# Builds (once per source, JDK and Hadoop; cached) jvm/localfs, Hadoop's local file system
# without child processes, against the Hadoop in Spark's jars, and prints the jar's path.
#   scripts/localfs-jar.sh SPARK_JARS [--into DIR]
#     also link the jar into DIR (a pyspark/jars): spark_app then uses it for file: paths
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec 3>&1 1>&2
spark_jars=${1:?usage: localfs-jar.sh SPARK_JARS [--into DIR]}
into=''
[ "${2:-}" != --into ] || into=${3:?--into needs a directory}
src="$REPO_ROOT/jvm/localfs"
mapfile -t sources < <(find "$src" -name '*.java' | sort)
key=$({
  javac -version 2>&1
  ls "$spark_jars" | grep '^hadoop-client-api'
  cat "${sources[@]}"
} | sha256sum | cut -c1-12)
jar="$STREAMJOB_CACHE/localfs/$key/streamingjob-localfs.jar"
if [ ! -s "$jar" ]; then
  command -v javac >/dev/null || die "a JDK (javac) is required to build jvm/localfs"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "building $jar"
  javac --release 17 -nowarn -cp "$spark_jars/*" -d "$work/classes" "${sources[@]}"
  jar cf "$work/localfs.jar" -C "$work/classes" .
  mkdir -p "$(dirname "$jar")"
  mv "$work/localfs.jar" "$jar"
fi
[ -z "$into" ] || ln -f "$jar" "$into/" 2>/dev/null || cp "$jar" "$into/"
echo "$jar" >&3
