"""A second reader of the Iceberg tables the sink writes, beside PyIceberg: Apache Iceberg's own
Java library (its generic reader, with its own planning of snapshots, manifests and deletes),
through the REST catalog (scripts/iceberg/reader/IcebergRows.java). Its jars are resolved
through Maven and the reader compiled once into the cache (`python -m devbed prepare`)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from devbed.cache import CACHE, built_once
from devbed.iceberg_catalog import iceberg_version

READER = Path(__file__).resolve().parents[1] / "scripts" / "iceberg" / "reader"
MAIN = "IcebergRows"


def reader_build() -> Path:
    """The reader's jars (jars/) and class (classes/), built once per version and source."""
    version = iceberg_version()
    sources = (READER / "pom.xml", READER / f"{MAIN}.java")
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]

    def build(into: Path) -> None:
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(sources[0]), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-Diceberg.version={version}",
             f"-DoutputDirectory={into / 'jars'}"],
            check=True,
        )  # fmt: skip
        subprocess.run(
            ["javac", "-cp", f"{into / 'jars'}/*", "-d", str(into / "classes"), str(sources[1])],
            check=True,
        )

    return built_once(CACHE / "iceberg" / version / f"java-reader-{key}", build)


def java_rows(catalog_uri: str, table: str, columns: Sequence[str]) -> list[dict]:
    """The current snapshot's rows of `table` (namespace.table), as the Java library reads
    them through the REST catalog at `catalog_uri`: the `columns` of each."""
    built = reader_build()
    command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-cp", f"{built / 'jars'}/*:{built / 'classes'}", MAIN, catalog_uri, table,
               *columns]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the Java Iceberg reader failed ({done.returncode}): {done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
