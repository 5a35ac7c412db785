"""Apache Kafka's jars of any release, resolved from Maven Central through Maven
(scripts/kafka/pom.xml, scripts/kafka/tools-pom.xml) once and cached under $STREAMJOB_CACHE per
version: nothing is downloaded twice."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from devbed.cache import CACHE, built_once

REPO_ROOT = Path(__file__).resolve().parents[1]
POM = REPO_ROOT / "scripts" / "kafka" / "pom.xml"


def kafka_version() -> str:
    """The project's default broker version (the pom's; the images use it too)."""
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if not match:
        raise RuntimeError(f"no <kafka.version> in {POM}")
    return match.group(1)


def broker_jars(version: str | None = None) -> Path:
    """The directory of a broker version's jars, resolved through Maven once and cached."""
    return _jars(POM, "libs", version or kafka_version())


def tool_jars(version: str) -> Path:
    """Kafka's command-line tools of a version (beside `broker_jars`), resolved once."""
    return _jars(POM.with_name("tools-pom.xml"), "tools", version)


def _jars(pom: Path, name: str, version: str) -> Path:
    def resolve(into: Path) -> None:
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-Dkafka.version={version}", f"-DoutputDirectory={into}"],
            check=True,
        )  # fmt: skip

    return built_once(CACHE / "kafka" / version / name, resolve)
