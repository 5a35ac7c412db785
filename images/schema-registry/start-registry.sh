#!/bin/bash
# Starts Apicurio Registry (its Confluent-compatible API under /apis/ccompat/v7; readiness at
# /health/ready) on all interfaces.
#   REGISTRY_PORT  HTTP port (default 8080)
#   REGISTRY_HEAP  JVM heap (default 256m)
# A test server: the serial GC and C1 only (starts faster and uses less CPU on a small node);
# its temporary files (Vert.x' cache) under /tmp, so the root file system may be read-only.
set -euo pipefail
jars=(/opt/apicurio/*-runner.jar)
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "-Xmx${REGISTRY_HEAP:-256m}" -XX:+UseSerialGC \
  -XX:TieredStopAtLevel=1 -Djava.io.tmpdir=/tmp \
  "-Dquarkus.http.port=${REGISTRY_PORT:-8080}" -Dquarkus.http.host=0.0.0.0 \
  -jar "${jars[0]}"
