"""`python -m devbed prepare` (part of `make prepare`): every one-time build of the bed, before
any test, so that none runs inside a fixture under a test's timeout: each supported broker
version's jars and tools, the one-JVM launcher and its class-data-sharing archive, the Schema
Registry's server, Iceberg's REST catalog server and its Java reader, and the local Spark's
archive (scripts/jvm-cds.sh). Each is cached under $STREAMJOB_CACHE: a no-op once built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from devbed import broker_jvm
from devbed.iceberg_catalog import server_jars
from devbed.iceberg_java_reader import reader_build
from devbed.kafka_broker import train_archive
from devbed.kafka_jars import broker_jars, tool_jars
from devbed.kafka_versions import BROKER_VERSIONS
from devbed.schema_registry import registry_dist

REPO_ROOT = Path(__file__).resolve().parents[1]


def prepare() -> None:
    for version in sorted(set(BROKER_VERSIONS)):
        jars = broker_jars(version)
        tool_jars(version)
        broker_jvm.archive_options(version, jars, train_archive)
    registry_dist()
    server_jars()
    reader_build()
    venv = Path(sys.executable).parent.parent
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "jvm-cds.sh"), str(venv)], check=True)


def main(argv: list[str]) -> int:
    if argv != ["prepare"]:
        print("usage: python -m devbed prepare", file=sys.stderr)
        return 2
    prepare()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
