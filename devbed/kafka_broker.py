"""A real Apache Kafka broker (KRaft) on loopback, for tests and `make run`: one node alone,
or one node of a replicated cluster (devbed/kafka_cluster.py).

The broker's jars are any Apache Kafka release by `version`, cached per version
(devbed/kafka_jars.py); its configuration is devbed/broker_config.py's. Tests kill, stop and
restart brokers through this class to prove the source survives it.
Each broker is one JVM, started from a class-data-sharing archive of its version
(devbed/broker_jvm.py).

CLI (used by the Makefile): python -m devbed.kafka_broker {start,stop} --dir D --port P
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from devbed import broker_jvm
from devbed.broker_config import LOG4J_FILES, SERVER_PROPERTIES, Quorum, make_tls, new_cluster_id
from devbed.cache import CACHE
from devbed.kafka_jars import broker_jars, kafka_version, tool_jars
from devbed.ports import free_port
from devbed.process_group import read_pid, stop_group


class KafkaBroker:
    """One broker process; `stop(kill=True)` is a crash, `start()` after it is a recovery,
    `freeze()` a node that stops answering without closing its connections."""

    # The SCRAM user of the SASL_SSL listener (the password is the workdir's own).
    SASL_USER = "streamingjob"

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        log_level: str = "WARN",
        *,
        version: str | None = None,
        node_id: int = 1,
        controller_port: int | None = None,
        quorum: Quorum | None = None,
        jvm_options: tuple[str, ...] | None = None,
    ):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.sasl_port = free_port()
        self.ssl_port = free_port()
        self.controller_port = controller_port or free_port()
        self.log_level = log_level
        self.node_id = node_id
        self.quorum = quorum or Quorum(
            voters=f"{node_id}@127.0.0.1:{self.controller_port}",
            cluster_id=new_cluster_id(),
            secrets=self.workdir / "tls",
            version=version or kafka_version(),
        )
        # None: the version's class-data-sharing archive (devbed/broker_jvm.py)
        self.jvm_options = jvm_options
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def version(self) -> str:
        return self.quorum.version

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def secured_bootstrap(self) -> str:
        """The SASL_SSL listener (SCRAM-SHA-512, certificate of `ca_pem`'s CA)."""
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def tls_dir(self) -> Path:
        return self.quorum.secrets

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
    def tls_bootstrap(self) -> str:
        """The SSL listener: mutual TLS, the client's certificate signed by `ca_pem`'s CA."""
        return f"127.0.0.1:{self.ssl_port}"

    def tls_client(self, **extra: str) -> dict[str, str]:
        """librdkafka settings of a client of the SSL listener (its certificate and key)."""
        return {
            "bootstrap.servers": self.tls_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.pem": self.ca_pem,
            "ssl.certificate.pem": (self.tls_dir / "client.crt").read_text(),
            "ssl.key.pem": (self.tls_dir / "client.key").read_text(),
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
            for name, attribute in (
                ("PLAINTEXT", "port"),
                ("SASL_SSL", "sasl_port"),
                ("SSL", "ssl_port"),
            ):
                found = re.search(rf"[=,]{name}://127.0.0.1:(\d+)", text)
                if found:
                    setattr(self, attribute, int(found.group(1)))
            return props
        self.workdir.mkdir(parents=True, exist_ok=True)
        q = self.quorum
        props.write_text(
            SERVER_PROPERTIES.format(
                node_id=self.node_id,
                voters=q.voters,
                port=self.port,
                sasl_port=self.sasl_port,
                ssl_port=self.ssl_port,
                controller_port=self.controller_port,
                data_dir=data_dir,
                keystore=make_tls(q.secrets),
                truststore=q.secrets / "ca.crt",
                replicas=q.replicas,
                min_isr=q.min_isr,
            )
        )
        for name, template in LOG4J_FILES:
            (self.workdir / name).write_text(
                template.format(log_file=self.log_file, level=self.log_level)
            )
        return props

    def _command(self, props: Path) -> list[str]:
        """One JVM (devbed/broker_jvm.py): the storage formatted first when it has none yet
        (with the SCRAM user), then the broker. The main class and its arguments are a Java
        argument file (`java @FILE`, readable by this user only): the SCRAM password on the
        command line would show in `ps` for the broker's whole life."""
        jars = broker_jars(self.version)
        if self.jvm_options is None:
            self.jvm_options = broker_jvm.archive_options(self.version, jars, train_archive)
        scram = f"SCRAM-SHA-512=[name={self.SASL_USER},password={self.sasl_password}]"
        main = [
            broker_jvm.LAUNCHER, str(props), str(self.workdir / "data"),
            "format", "-t", self.quorum.cluster_id, "-c", str(props), "--add-scram", scram,
        ]  # fmt: skip
        argfile = self.workdir / "broker.args"
        argfile.touch(mode=0o600)
        argfile.write_text(java_argfile(main))
        return [
            "java", "-Xmx512m", *self.jvm_options,
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            "-cp", broker_jvm.classpath(jars), f"@{argfile}",
        ]  # fmt: skip

    def start(self, timeout: float = 60.0) -> KafkaBroker:
        self.launch()
        self.wait_ready(timeout)
        return self

    def run_tool(self, main: str, *args: str) -> str:
        """One of Kafka's command-line tools (a Java main class) from this node's jars, as
        Kafka's scripts run them; returns its output, raises on a non-zero exit."""
        jars = f"{broker_jars(self.version)}/*:{tool_jars(self.version)}/*"
        command = ["java", "-Xmx256m", "-cp", jars, main, *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{main} {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def launch(self) -> None:
        """Starts the process without waiting: the nodes of a quorum start side by side."""
        command = self._command(self._configure())
        with open(self.workdir / "java.out", "ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=broker_jvm.environment(),
            )  # fmt: skip
        (self.workdir / "broker.pid").write_text(str(self.process.pid))

    def wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"broker exited; see {self.log_file} and {self.workdir / 'java.out'}"
                )
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"broker on {self.bootstrap} not ready after {timeout}s")

    def freeze(self) -> None:
        """SIGSTOP: the node stops answering but keeps its sockets (a hung or partitioned
        broker, as its peers and clients see it); `thaw()` resumes it."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, kill: bool = False) -> None:
        """SIGTERM waits for a clean shutdown; kill=True is a crash (SIGKILL)."""
        stop_group(self.process, self.workdir / "broker.pid", kill, timeout=60)
        self.process = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)


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
    if read_pid(args.dir / "broker.pid") is not None:
        broker.stop()  # a stale broker of an earlier run; one at a time
    broker.start()
    print(f"Kafka {kafka_version()} running on {broker.bootstrap} (logs: {broker.log_file})")
    return 0


def train_archive(version: str, into: Path) -> None:
    """A broker started from nothing, asked once over SASL_SSL and stopped cleanly: the JVM
    writes the classes it loaded to `into`/kafka.jsa as it exits (devbed/broker_jvm.py)."""
    from confluent_kafka.admin import AdminClient  # `fetch` runs on a bare python3

    into.mkdir(parents=True)
    archive = into / "kafka.jsa"
    broker = KafkaBroker(
        into / "broker", version=version, jvm_options=(f"-XX:ArchiveClassesAtExit={archive}",)
    )
    with broker:
        # a copy typed as AdminClient takes it (its values may be more than strings)
        settings: dict[str, str | int | float | bool] = {**broker.secured_client(log_level="0")}
        AdminClient(settings).list_topics(timeout=30)
        broker.stop()
    if not archive.is_file():
        raise RuntimeError(f"the broker's JVM wrote no archive; see {broker.workdir}/java.out")
    shutil.rmtree(into / "broker")


def java_argfile(args: list[str]) -> str:
    """`args` as a Java launcher argument file: one quoted argument a line."""
    quoted = ('"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"' for a in args)
    return "\n".join(quoted) + "\n"


if __name__ == "__main__":
    sys.exit(main())
