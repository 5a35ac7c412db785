"""A real single-node Apache Kafka broker (KRaft) on loopback, for tests and `make run`.

The broker's jars come from Maven Central through Maven (scripts/kafka/pom.xml) and are
cached under $STREAMJOB_CACHE; nothing is downloaded twice. Tests kill and restart the broker
through this class to prove the source survives it.

CLI (used by the Makefile): python -m tests.support.kafka_broker {start,stop} --dir D --port P
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
POM = REPO_ROOT / "scripts" / "kafka" / "pom.xml"
CACHE = Path(os.environ.get("STREAMJOB_CACHE", Path.home() / ".cache" / "streamingjob"))

_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},\
CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
# SASL_SSL beside PLAINTEXT (test tools, producers): SCRAM users are created at format time,
# the certificate is signed by a CA of the test's own (tests/support/tls.py).
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
inter.broker.listener.name=PLAINTEXT
log.dirs={data_dir}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# Unknown topics must be errors, not silently created topics.
auto.create.topics.enable=false
log.segment.bytes=16777216
"""

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


def kafka_version() -> str:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if not match:
        raise RuntimeError(f"no <kafka.version> in {POM}")
    return match.group(1)


def broker_jars() -> Path:
    """The directory of the broker's jars, resolved through Maven once and cached."""
    libs = CACHE / "kafka" / kafka_version() / "libs"
    if (libs / ".complete").exists():
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is required to fetch the Kafka broker jars")
    tmp = libs.with_name("libs.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={tmp}",
        ],
        check=True,
    )
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    (libs / ".complete").touch()
    return libs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class KafkaBroker:
    """One broker process; `stop(kill=True)` is a crash, `start()` after it is a recovery."""

    # The SCRAM user of the SASL_SSL listener (the password is the workdir's own).
    SASL_USER = "streamingjob"

    def __init__(self, workdir: Path, port: int | None = None, log_level: str = "WARN"):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.sasl_port = free_port()
        self.controller_port = free_port()
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secured_bootstrap(self) -> str:
        """The SASL_SSL listener (SCRAM-SHA-512, certificate of `ca_pem`'s CA)."""
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def tls_dir(self) -> Path:
        return self.workdir / "tls"

    @property
    def ca_pem(self) -> str:
        return (self.tls_dir / "ca.crt").read_text()

    @property
    def sasl_password(self) -> str:
        return (self.tls_dir / "scram-password").read_text()

    def secured_client(self, **extra: str) -> dict[str, str]:
        """librdkafka settings of a client of the SASL_SSL listener."""
        return {
            "bootstrap.servers": self.secured_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": self.SASL_USER,
            "sasl.password": self.sasl_password,
            "ssl.ca.pem": self.ca_pem,
            **extra,
        }

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    def _configure(self) -> Path:
        props = self.workdir / "server.properties"
        data_dir = self.workdir / "data"
        if (data_dir / "meta.properties").exists():
            # A restart keeps its data, cluster id and ports.
            text = props.read_text()
            listeners = re.search(r"PLAINTEXT://127.0.0.1:(\d+)", text)
            self.port = int(listeners.group(1)) if listeners else self.port
            secured = re.search(r"SASL_SSL://127.0.0.1:(\d+)", text)
            self.sasl_port = int(secured.group(1)) if secured else self.sasl_port
            return props
        self.workdir.mkdir(parents=True, exist_ok=True)
        keystore = self._make_tls()
        props.write_text(
            _SERVER_PROPERTIES.format(
                port=self.port,
                sasl_port=self.sasl_port,
                controller_port=self.controller_port,
                data_dir=data_dir,
                keystore=keystore,
            )
        )
        (self.workdir / "log4j2.properties").write_text(
            _LOG4J2.format(log_file=self.log_file, level=self.log_level)
        )
        cluster_id = "-"
        while cluster_id.startswith("-"):  # the tool would read "-..." as an option (1 in 64)
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        scram = f"SCRAM-SHA-512=[name={self.SASL_USER},password={self.sasl_password}]"
        self._java(
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props),
            "--add-scram", scram, wait=True,
        )  # fmt: skip
        return props

    def _make_tls(self) -> Path:
        """A CA, the listener's certificate (SAN 127.0.0.1, localhost) and the SCRAM password."""
        from tests.support.tls import Authority

        server = Authority.create(self.tls_dir).issue(["127.0.0.1", "localhost"])
        keystore = self.tls_dir / "keystore.pem"
        keystore.write_text(server.keystore_pem())
        (self.tls_dir / "scram-password").write_text(uuid.uuid4().hex)
        return keystore

    def _java(self, main: str, *args: str, wait: bool = False) -> subprocess.Popen[bytes]:
        command = [
            "java",
            "-Xmx512m",
            "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            f"{broker_jars()}/*",
            main,
            *args,
        ]
        with open(self.workdir / "java.out", "ab") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        if wait and process.wait() != 0:
            raise RuntimeError(f"{main} failed; see {self.workdir / 'java.out'}")
        return process

    def start(self, timeout: float = 60.0) -> KafkaBroker:
        props = self._configure()
        self.process = self._java("kafka.Kafka", str(props))
        (self.workdir / "broker.pid").write_text(str(self.process.pid))
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"broker exited; see {self.log_file}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"broker on {self.bootstrap} not ready after {timeout}s")

    def stop(self, kill: bool = False) -> None:
        """SIGTERM waits for a clean shutdown; kill=True is a crash (SIGKILL)."""
        pid = self.process.pid if self.process else _read_pid(self.workdir)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
        if self.process is not None:
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                self.process.wait()
        else:
            _wait_gone(pid, 60)
        self.process = None
        (self.workdir / "broker.pid").unlink(missing_ok=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)


def _read_pid(workdir: Path) -> int | None:
    pid_file = workdir / "broker.pid"
    return int(pid_file.read_text()) if pid_file.exists() else None


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "fetch"])
    parser.add_argument("--dir", type=Path, default=CACHE / "local-broker")
    parser.add_argument("--port", type=int, default=9092)
    args = parser.parse_args(argv)
    if args.action == "fetch":
        print(broker_jars())
        return 0
    broker = KafkaBroker(args.dir, args.port, log_level="INFO")
    if args.action == "stop":
        broker.stop()
        print(f"stopped the broker in {args.dir}")
        return 0
    if _read_pid(args.dir) is not None:
        broker.stop()  # a stale broker of an earlier run; one at a time
    broker.start()
    print(f"Kafka {kafka_version()} running on {broker.bootstrap} (logs: {broker.log_file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
