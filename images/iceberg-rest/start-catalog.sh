#!/bin/bash
# Starts Iceberg's REST catalog server on all interfaces (CATALOG_REST_PORT, default 8181). It
# takes its catalog's properties from CATALOG_* variables (CATALOG_S3_ENDPOINT: s3.endpoint; a
# double underscore is a dash); the catalog is a JDBC one in /tmp/catalog.db (an emptyDir:
# every start is an empty catalog). A test server: the serial GC and C1 only.
set -euo pipefail
export CATALOG_CATALOG__IMPL=${CATALOG_CATALOG__IMPL:-org.apache.iceberg.jdbc.JdbcCatalog}
export CATALOG_URI=${CATALOG_URI:-jdbc:sqlite:file:/tmp/catalog.db}
export CATALOG_JDBC_USER=${CATALOG_JDBC_USER:-iceberg} CATALOG_JDBC_PASSWORD=${CATALOG_JDBC_PASSWORD:-iceberg}
cd /tmp
exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "-Xmx${SERVER_HEAP:-256m}" -XX:+UseSerialGC \
  -XX:TieredStopAtLevel=1 -Djava.io.tmpdir=/tmp \
  -cp '/opt/iceberg/server/*:/opt/iceberg/s3/*' org.apache.iceberg.rest.RESTCatalogServer
