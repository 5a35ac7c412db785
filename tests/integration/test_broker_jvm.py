"""The test brokers start the cheap way (devbed/broker_jvm.py): one JVM that formats
its storage and runs the broker, mapping its version's class-data-sharing archive. If the
archive stopped mapping (a changed classpath, JDK or flag) every broker would still start,
only slower: this test is what notices. Its password stays off the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from devbed.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration


def java_processes_below(pid: int) -> list[str]:
    """The command lines of `pid` and its descendants that run java."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            command = Path(f"/proc/{current}/cmdline").read_bytes().split(b"\0")
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += map(int, (task / "children").read_text().split())
        except OSError:
            continue
        if command[0].endswith(b"java"):
            found.append(b" ".join(command).decode())
    return found


def test_a_broker_is_one_jvm_mapping_its_versions_archive(kafka: KafkaBroker) -> None:
    assert kafka.process is not None and kafka.jvm_options is not None
    archive = next(o.split("=", 1)[1] for o in kafka.jvm_options if "SharedArchiveFile" in o)
    maps = Path(f"/proc/{kafka.process.pid}/maps").read_text()
    assert archive in maps, f"the broker's JVM does not map {archive}"
    javas = java_processes_below(kafka.process.pid)
    argfile = Path(kafka.workdir) / "broker.args"
    assert len(javas) == 1 and f"@{argfile}" in javas[0], javas
    assert "FormatAndRun" in argfile.read_text() and argfile.stat().st_mode & 0o077 == 0
    # the SCRAM password is in the argument file, never on a command line (`ps`)
    assert kafka.sasl_password in argfile.read_text() and kafka.sasl_password not in javas[0]
    assert (Path(kafka.workdir) / "data" / "meta.properties").is_file()  # formatted in it
