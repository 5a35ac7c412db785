"""How a test broker's JVM starts: one JVM where Kafka's scripts start two, mapping a
class-data-sharing (AppCDS) archive of its version. The tests start dozens of brokers (64 in
a CI run), and a JVM's start is most of a short-lived broker's CPU: Kafka's way (a JVM for
the storage format, then the broker's) costs about 4 CPU s to the first answer, this about
2.5 (bench/broker_start_bench.py measures both side by side).

- jvm/kafkanode's FormatAndRun formats the storage with Kafka's StorageTool when the log
  directory has none, then runs kafka.Kafka, in the same JVM.
- The archive of a version is trained once (a broker started, asked over SASL_SSL, stopped)
  and cached under $STREAMJOB_CACHE; a broker maps it with -Xshare:auto, so a JVM that
  cannot (another JDK, other flags) starts as before, only slower.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from devbed.cache import CACHE, built_once

REPO_ROOT = Path(__file__).resolve().parents[1]
LAUNCHER_SOURCES = REPO_ROOT / "jvm" / "kafkanode"
LAUNCHER = "dev.sparkkafka.kafkanode.FormatAndRun"


@functools.cache
def _java_version() -> str:
    env = {**os.environ, "JDK_JAVA_OPTIONS": ""}
    return subprocess.run(
        ["java", "-version"], capture_output=True, text=True, env=env, check=True
    ).stderr


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@functools.cache
def launcher_jar(kafka_jars: Path) -> Path:
    """jvm/kafkanode compiled (once per source and JDK) against a version's jars: it calls
    only what every version since 3.5 has (the main methods, Kafka's Exit hook)."""
    sources = sorted(LAUNCHER_SOURCES.rglob("*.java"))
    key = _digest(_java_version(), *(s.read_text() for s in sources))

    def build(into: Path) -> None:
        classes = into / "classes"
        subprocess.run(
            ["javac", "--release", "17", "-nowarn", "-cp", f"{kafka_jars}/*",
             "-d", str(classes), *map(str, sources)],
            check=True,
        )  # fmt: skip
        subprocess.run(
            ["jar", "cf", str(into / "kafkanode.jar"), "-C", str(classes), "."], check=True
        )

    return built_once(CACHE / "kafkanode" / key, build, needs="javac") / "kafkanode.jar"


def classpath(kafka_jars: Path) -> str:
    return f"{kafka_jars}/*:{launcher_jar(kafka_jars)}"


@functools.cache
def archive_options(
    version: str, kafka_jars: Path, train: Callable[[str, Path], None]
) -> tuple[str, ...]:
    """The options that map the version's archive, trained first (`train(version, into)`
    writes `into`/kafka.jsa) if the cache has none."""
    jars = sorted(
        f"{p.name} {p.stat().st_size} {int(p.stat().st_mtime)}" for p in kafka_jars.iterdir()
    )
    key = _digest(version, _java_version(), str(launcher_jar(kafka_jars)), *jars)
    archive = built_once(CACHE / "kafka-cds" / key, lambda into: train(version, into), "java")
    return (f"-XX:SharedArchiveFile={archive / 'kafka.jsa'}", "-Xshare:auto", "-Xlog:cds=off",
            "-Xlog:cds+dynamic=off")  # fmt: skip


def environment() -> dict[str, str]:
    """The broker's environment: the tests' JVM options without another archive's (the
    Spark tests map Spark's through JDK_JAVA_OPTIONS)."""
    options = os.environ.get("JDK_JAVA_OPTIONS", "").split()
    kept = [
        o for o in options if not o.startswith(("-XX:SharedArchiveFile", "-Xshare", "-Xlog:cds"))
    ]
    return {**os.environ, "JDK_JAVA_OPTIONS": " ".join(kept)}
