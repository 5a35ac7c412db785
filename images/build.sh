#!/usr/bin/env bash
# Builds the project's images with the legacy builder and no registry, and prints their tags on
# stdout (one per line; logs and timings go to stderr):
#   streamingjob/spark:<version>      JRE 17 + pyspark + the project's spark_app (drivers, executors)
#                                     and its native read path (scripts/native.sh),
#                                     with a class-data-sharing archive of Spark's classes made by a
#                                     training run at build time (~1-2 min, cached with the layer)
#   streamingjob/operator:<version>   kopf + the project's operator
#   streamingjob/kafka:<kafka>-<version>  KRaft broker+controller node for in-cluster tests
#   streamingjob/minio:<minio>-<version>  S3-compatible object store for in-cluster tests
#   streamingjob/schema-registry:<apicurio>-<version>  Apicurio Registry (Confluent-compatible
#                                     API) for in-cluster tests: FROM the Kafka image, with the
#                                     server the integration tier runs
#                                     (devbed/schema_registry.py fetch)
#   streamingjob/iceberg-rest:<iceberg>-<version>  Apache Iceberg's REST catalog server with its S3
#                                     FileIO, for in-cluster tests: FROM the Kafka image, with
#                                     the server the integration tier runs
#                                     (devbed/iceberg_catalog.py fetch, fetch-s3)
#   streamingjob/orders:<version>     the orders example job's own image: FROM the Spark image with
#                                     its transform module (examples/user-image)
# <version> is the project version in pyproject.toml. STREAMJOB_IMAGE_PREFIX replaces
# `streamingjob` (e.g. registry.example.com:5000/team/streamingjob; `make push` pushes there). Everything builds FROM the debootstrapped
# base (images/base/build.sh). Python packages: the image's hash lock (requirements/spark.txt,
# requirements/operator.txt) is fetched and hash-checked on the host into a wheelhouse
# ($STREAMJOB_CACHE/wheelhouse, keyed by the locks; sdist-only packages such as pyspark are
# built into wheels there); the image installs those wheels and the project's own wheel
# (`pip wheel` of this tree) with `pip install --require-hashes --no-index`, against the
# hashes of the exact files the host checked and built. Kafka's jars come from Maven
# (scripts/kafka/pom.xml).
#
#   images/build.sh [spark] [operator] [kafka] [minio] [orders] [schema-registry] [iceberg-rest]
#     default: all but schema-registry and iceberg-rest; orders builds the Spark image first,
#     schema-registry and iceberg-rest the Kafka image
# Idempotent: docker's layer cache makes an unchanged rebuild take seconds.
set -euo pipefail
source "$(dirname "$0")/../scripts/common.sh"
exec 3>&1 1>&2
export DOCKER_BUILDKIT=0

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(spark operator kafka minio orders)
for t in "${targets[@]}"; do
  case "$t" in
    spark | operator | kafka | minio | orders | schema-registry | iceberg-rest) ;;
    *) die "unknown image '$t' (spark, operator, kafka, minio, orders, schema-registry, iceberg-rest)" ;;
  esac
done
# orders is FROM the Spark image: that one first
if [[ " ${targets[*]} " == *" orders "* && " ${targets[*]} " != *" spark "* ]]; then
  targets=(spark "${targets[@]}")
fi
# schema-registry and iceberg-rest are FROM the Kafka image: that one first
if [[ " ${targets[*]} " =~ " "(schema-registry|iceberg-rest)" " && " ${targets[*]} " != *" kafka "* ]]; then
  targets=(kafka "${targets[@]}")
fi
PREFIX=${STREAMJOB_IMAGE_PREFIX:-streamingjob}
# a docker repository: lower case, an optional registry host[:port], path components
[[ "$PREFIX" =~ ^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$ ]] ||
  die "STREAMJOB_IMAGE_PREFIX='$PREFIX' is no image repository prefix (e.g. registry.example.com:5000/team/streamingjob)"

docker info >/dev/null 2>&1 || bash "$REPO_ROOT/scripts/kind/docker-setup.sh"
timings=()
timed() { # timed LABEL CMD...: runs CMD, records its wall time
  local label=$1 start=$SECONDS
  shift
  "$@"
  timings+=("$label $((SECONDS - start))s")
}

pyproject_get() { # pyproject_get EXPR: evaluates EXPR with `p` = the [project] table
  python3 - "$REPO_ROOT/pyproject.toml" "$1" <<'PY'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(eval(sys.argv[2]))
PY
}
VERSION=$(pyproject_get 'p["version"]')
BASE_IMAGE=$(bash "$REPO_ROOT/images/base/build.sh")
log "base image $BASE_IMAGE, project version $VERSION"

# The wheelhouse must match the image's Python (Debian bookworm: CPython 3.11, glibc 2.36).
# `pip wheel` on a host with the same minor version gives exactly the wheels the image needs
# (and builds the sdist-only packages such as pyspark once). One directory per image lock.
wheelhouse() {
  local venv py key t
  venv=$(bash "$REPO_ROOT/scripts/venv.sh")
  py=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  [ "$py" = 3.11 ] || die "the wheelhouse needs a Python 3.11 host (bookworm's python3); found $py"
  key=$(cat "$REPO_ROOT/requirements/spark.txt" "$REPO_ROOT/requirements/operator.txt" \
    <(echo "$py") | sha256sum | cut -c1-12)
  WHEELS="$STREAMJOB_CACHE/wheelhouse/$key"
  [ -f "$WHEELS/.complete" ] && return 0
  log "building the wheelhouse $WHEELS (PyPI through the host's pip configuration)"
  rm -rf "$WHEELS.tmp" && mkdir -p "$WHEELS.tmp"
  for t in spark operator; do
    "$venv/bin/pip" wheel -q --require-hashes --no-deps --wheel-dir "$WHEELS.tmp/$t" \
      -r "$REPO_ROOT/requirements/$t.txt"
  done
  rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS" && touch "$WHEELS/.complete"
}

# project_wheel DIR: the project's own wheel (spark_app + streamingjob_operator), built from a
# copy of this tree (setuptools writes build/ and *.egg-info next to the sources).
project_wheel() {
  local src
  src=$(mktemp -d)
  cp "$REPO_ROOT/pyproject.toml" "$REPO_ROOT/README.md" "$src/"
  tar -C "$REPO_ROOT" --exclude=__pycache__ --exclude='*.pyc' -c spark_app operator/streamingjob_operator | tar -C "$src" -x
  # fixed timestamps in the zip: the same sources give the same wheel (and docker's cache hits)
  SOURCE_DATE_EPOCH=315532800 "$(bash "$REPO_ROOT/scripts/venv.sh")/bin/pip" wheel -q --no-deps \
    --no-build-isolation --wheel-dir "$1" "$src" >/dev/null
  rm -rf "$src"
}

# hashed_requirements DIR: `name==version --hash=sha256:...` for every wheel in DIR: the
# image installs exactly the files the host checked (locks) or built (sdists, the project).
hashed_requirements() {
  local whl name version
  for whl in "$1"/*.whl; do
    name=$(basename "$whl" | cut -d- -f1)
    version=$(basename "$whl" | cut -d- -f2)
    printf '%s==%s --hash=sha256:%s\n' "$name" "$version" "$(sha256sum "$whl" | cut -d' ' -f1)"
  done
}

# context NAME [DIR]: a fresh build context under the cache with the image's own files (from
# images/NAME, or DIR).
context() {
  CTX="$STREAMJOB_CACHE/images/context/$1"
  rm -rf "$CTX" && mkdir -p "$CTX"
  cp -a "${2:-$REPO_ROOT/images/$1}/." "$CTX/"
}

BUILT_BY=dev.sparkkafka.built-by=streamingjob-images
build() { # build TAG [docker build args...]: docker build of $CTX
  local tag=$1
  shift
  docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" "$@" --label "$BUILT_BY" \
    --label "org.opencontainers.image.version=$VERSION" -t "$tag" "$CTX" >/dev/null
  BUILT+=("$tag")
}

kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$REPO_ROOT/scripts/kafka/pom.xml")
BUILT=()
for t in "${targets[@]}"; do
  case "$t" in
    spark | operator)
      timed wheelhouse wheelhouse
      context "$t"
      # Hard links: the wheelhouse and the context live in the same cache directory.
      cp -al "$WHEELS/$t" "$CTX/wheels" 2>/dev/null || cp -a "$WHEELS/$t" "$CTX/wheels"
      # The project's wheels apart: the Spark image installs them after its class-data-sharing
      # archive, so a change of the project's code does not retrain the archive.
      project_wheel "$CTX/project"
      if [ "$t" = spark ]; then
        # The source's native read path (scripts/native.sh: a cached, host-built cp311 wheel)
        # with the project's: a change of the crate (a comment counts) rebuilt the whole
        # Python environment and retrained the archive, 557 s beside the Spark tier
        cp "$(bash "$REPO_ROOT/scripts/native.sh")" "$CTX/project/"
        # Spark's S3A connector (s3a:// checkpoints and sinks), minus what Spark ships itself
        bash "$REPO_ROOT/scripts/s3a-jars.sh" --into "$CTX/s3a-jars" --beside \
          "$("$(bash "$REPO_ROOT/scripts/venv.sh")/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" >/dev/null
      fi
      hashed_requirements "$CTX/project" >"$CTX/project.txt"
      hashed_requirements "$CTX/wheels" >"$CTX/requirements.txt"
      log "building $PREFIX/$t:$VERSION"
      timed "$t" build "$PREFIX/$t:$VERSION"
      ;;
    kafka)
      libs=$(cd "$REPO_ROOT" && PYTHONPATH="$REPO_ROOT" python3 -m devbed.kafka_broker fetch)
      context kafka
      cp -al "$libs" "$CTX/libs" 2>/dev/null || cp -a "$libs" "$CTX/libs"
      rm -f "$CTX/libs/.complete"
      log "building $PREFIX/kafka:$kafka_version-$VERSION"
      timed kafka build "$PREFIX/kafka:$kafka_version-$VERSION"
      ;;
    minio)
      minio_dir=$(bash "$REPO_ROOT/scripts/k8s-toolchain.sh" minio)
      # its pseudo-version's timestamp (v0.0.0-<yyyymmddhhmmss>-<commit>) names the image
      minio_version=$(awk '{print $2}' "$minio_dir/.minio.stamp" | cut -d- -f2)
      context minio
      cp -al "$minio_dir/minio" "$CTX/minio" 2>/dev/null || cp -a "$minio_dir/minio" "$CTX/minio"
      log "building $PREFIX/minio:$minio_version-$VERSION"
      timed minio build "$PREFIX/minio:$minio_version-$VERSION"
      ;;
    schema-registry)
      # the one fetch of the server (Maven, cached), shared with the integration tier
      dist=$(cd "$REPO_ROOT" && PYTHONPATH="$REPO_ROOT" python3 -m devbed.schema_registry fetch)
      apicurio_version=$(basename "$(dirname "$dist")")
      context schema-registry
      cp -al "$dist" "$CTX/dist" 2>/dev/null || cp -a "$dist" "$CTX/dist"
      rm -f "$CTX/dist/.complete"
      log "building $PREFIX/schema-registry:$apicurio_version-$VERSION FROM $PREFIX/kafka:$kafka_version-$VERSION"
      timed schema-registry build "$PREFIX/schema-registry:$apicurio_version-$VERSION" \
        --build-arg "KAFKA_IMAGE=$PREFIX/kafka:$kafka_version-$VERSION"
      ;;
    iceberg-rest)
      # the integration tier's server (Maven, cached) and the S3 FileIO beside it
      server=$(cd "$REPO_ROOT" && PYTHONPATH="$REPO_ROOT" python3 -m devbed.iceberg_catalog fetch)
      s3=$(cd "$REPO_ROOT" && PYTHONPATH="$REPO_ROOT" python3 -m devbed.iceberg_catalog fetch-s3)
      iceberg_version=$(basename "$(dirname "$server")")
      context iceberg-rest
      cp -al "$server" "$CTX/server" 2>/dev/null || cp -a "$server" "$CTX/server"
      cp -al "$s3" "$CTX/s3" 2>/dev/null || cp -a "$s3" "$CTX/s3"
      rm -f "$CTX/server/.complete" "$CTX/s3/.complete"
      log "building $PREFIX/iceberg-rest:$iceberg_version-$VERSION FROM $PREFIX/kafka:$kafka_version-$VERSION"
      timed iceberg-rest build "$PREFIX/iceberg-rest:$iceberg_version-$VERSION" \
        --build-arg "KAFKA_IMAGE=$PREFIX/kafka:$kafka_version-$VERSION"
      ;;
    orders)
      context user-image "$REPO_ROOT/examples/user-image"
      log "building $PREFIX/orders:$VERSION FROM $PREFIX/spark:$VERSION"
      timed orders build "$PREFIX/orders:$VERSION" --build-arg "SPARK_IMAGE=$PREFIX/spark:$VERSION"
      ;;
  esac
done

# Earlier builds of our images, left untagged by this one.
docker image prune -f --filter "label=$BUILT_BY" >/dev/null
for tag in "${BUILT[@]}"; do
  log "$(docker image inspect --format '{{.Size}}' "$tag" | awk -v t="$tag" '{printf "%-40s %5.0f MB", t, $1/1e6}')"
done
log "timings: ${timings[*]}"
printf '%s\n' "${BUILT[@]}" >&3
