"""A real Schema Registry on loopback for the integration tier: Apicurio Registry, which serves
the Confluent-compatible API under /apis/ccompat/v7 (the API the source's decoder speaks).

Apicurio publishes each release's built server (a Quarkus runner jar and its lib/, the "all"
distribution) on Maven Central. Maven fetches that one artifact (`dependency:get`, not a
dependency of a pom: the release's parent pom is not on Maven Central, so Maven cannot read the
artifact's descriptor) and it is unpacked once per version under $STREAMJOB_CACHE/registry.
Storage is the server's default, an in-memory H2 database: every start is an empty registry.
With `tls` (a certificate from devbed/tls.py) it serves https only, through Quarkus' TLS
registry (quarkus.tls.*), so clients must verify it with the test's CA.

CLI: python -m devbed.schema_registry {start,stop,fetch} --dir D --port P
"""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import ssl
import struct
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from devbed.cache import CACHE, built_once
from devbed.ports import free_port
from devbed.process_group import stop_group
from devbed.tls import ServerCertificate

APICURIO_VERSION = "3.0.9"
_ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
# The dependency plugin whose `get` copies one artifact without reading its descriptor.
_GET = "org.apache.maven.plugins:maven-dependency-plugin:2.8:get"
CCOMPAT = "/apis/ccompat/v7"
SCHEMA_JSON = "application/vnd.schemaregistry.v1+json"


def registry_dist(version: str = APICURIO_VERSION) -> Path:
    """The unpacked server of a version, fetched through Maven once."""
    target = CACHE / "registry" / version / "dist"

    def fetch(into: Path) -> None:
        archive = target.parent / "registry.tar.gz"
        subprocess.run(
            ["mvn", "-q", "-B", _GET, f"-Dartifact={_ARTIFACT.format(version=version)}",
             "-Dtransitive=false", f"-Ddest={archive}"],
            check=True,
        )  # fmt: skip
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
        archive.unlink()

    return built_once(target, fetch)


def _runner_jar(dist: Path) -> Path:
    jars = sorted(dist.glob("*-runner.jar"))
    if not jars:
        raise RuntimeError(f"no *-runner.jar in {dist}")
    return jars[0]


class PortTaken(RuntimeError):
    """The registry's port is another process's (taken between free_port() and its bind)."""


class SchemaRegistry:
    """One registry process on 127.0.0.1:`port`; `stop(kill=True)` is a crash. Its storage is
    in memory: a restart forgets every schema."""

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        heap: str = "256m",
        basic_auth: tuple[str, str] | None = None,
        tls: ServerCertificate | None = None,
    ):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self._port_chosen = port is not None  # a restart keeps its port
        self.heap = heap
        self.basic_auth = basic_auth  # (user, password) that every /apis request must carry
        self.tls = tls  # https only, with this certificate (for 127.0.0.1)
        self.process: subprocess.Popen[bytes] | None = None
        self._log_from = 0

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The base URL of the Confluent-compatible API (what a client is configured with)."""
        return f"{self.base}{CCOMPAT}"

    def _context(self) -> ssl.SSLContext | None:
        """What the test's own requests verify the registry with: the test's CA."""
        return ssl.create_default_context(cafile=str(self.tls.ca)) if self.tls else None

    @property
    def log_file(self) -> Path:
        return self.workdir / "registry.log"

    def start(self, timeout: float = 120.0) -> SchemaRegistry:
        """Starts it and waits until ready. A free port another process took before the
        registry bound it (the services tests start brokers beside it) is given up for a new
        one, unless the test chose the port."""
        for tries_left in reversed(range(3)):
            self._launch()
            try:
                self.wait_ready(timeout)
                return self
            except PortTaken:
                self.stop(kill=True)
                if self._port_chosen or not tries_left:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        dist = registry_dist()
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            "java",
            f"-Xmx{self.heap}",
            # A test server: a small heap, no JIT tiers beyond C1 (starts faster, less CPU).
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dquarkus.http.host=127.0.0.1",
            *self._port_properties(),
            *self._auth_properties(),
            "-jar",
            str(_runner_jar(dist)),
        ]
        with open(self.log_file, "ab") as out:
            self._log_from = out.tell()  # this run's lines
            self.process = subprocess.Popen(
                command, cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        (self.workdir / "registry.pid").write_text(str(self.process.pid))

    def _port_properties(self) -> list[str]:
        """Plain http on `port`; or with `tls` https on `port` and no plain http at all (its
        port is set anyway: Quarkus' default, 8080, may be another process's)."""
        if self.tls is None:
            return [f"-Dquarkus.http.port={self.port}"]
        return [
            f"-Dquarkus.http.port={free_port()}",
            f"-Dquarkus.http.ssl-port={self.port}",
            "-Dquarkus.http.insecure-requests=disabled",
            f"-Dquarkus.tls.key-store.pem.0.cert={self.tls.cert}",
            f"-Dquarkus.tls.key-store.pem.0.key={self.tls.key}",
        ]

    def _auth_properties(self) -> list[str]:
        """Quarkus' HTTP basic auth with one user of its embedded realm on the API paths (the
        health endpoint stays open)."""
        if self.basic_auth is None:
            return []
        user, password = self.basic_auth
        return [
            "-Dquarkus.http.auth.basic=true",
            "-Dquarkus.security.users.embedded.enabled=true",
            "-Dquarkus.security.users.embedded.plain-text=true",
            f"-Dquarkus.security.users.embedded.users.{user}={password}",
            "-Dquarkus.http.auth.permission.api.paths=/apis/*",
            "-Dquarkus.http.auth.permission.api.policy=authenticated",
        ]

    def _log_of_this_run(self) -> str:
        with open(self.log_file, "rb") as log:
            log.seek(self._log_from)
            return log.read().decode(errors="replace")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        health = f"{self.base}/health/ready"
        context = self._context()
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                if "already in use" in self._log_of_this_run():
                    raise PortTaken(f"port {self.port} is another process's")
                raise RuntimeError(f"schema registry exited; see {self.log_file}")
            try:
                with urllib.request.urlopen(health, timeout=2, context=context) as answer:
                    if answer.status == 200:
                        return
            except http.client.HTTPException as exc:  # not HTTP: another server's port
                raise PortTaken(f"port {self.port} answers as another server: {exc!r}") from None
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        raise TimeoutError(f"schema registry on port {self.port} not ready after {timeout}s")

    def stop(self, kill: bool = False) -> None:
        """SIGTERM waits for a clean shutdown; kill=True is a crash (SIGKILL)."""
        stop_group(self.process, self.workdir / "registry.pid", kill, timeout=30)
        self.process = None

    def __enter__(self) -> SchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)

    # What a test producer does: register a schema, as a Confluent serializer would.
    def register(
        self,
        subject: str,
        schema: dict | str,
        schema_type: str = "AVRO",
        references: list[dict] | None = None,
    ) -> int:
        """Registers `schema` under `subject` (`references`: [{name, subject, version}], the
        schemas it imports); returns its id (the one in the wire format)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        body: dict = {"schema": text, "schemaType": schema_type}
        if references:
            body["references"] = references
        return int(self.call("POST", f"/subjects/{subject}/versions", body)["id"])

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        """One request to the Confluent-compatible API; raises urllib's HTTPError on an error."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": SCHEMA_JSON}
        if self.basic_auth is not None:
            token = base64.b64encode(":".join(self.basic_auth).encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30, context=self._context()) as response:
            return json.loads(response.read())


def wire_format(schema_id: int, schema: dict, record: object) -> bytes:
    """A record's value as a Confluent Avro serializer writes it: magic byte 0, the schema id
    (4 bytes, big-endian), the Avro binary encoding of `record`."""
    import fastavro

    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, named_schemas={}), record)
    return out.getvalue()


def json_wire_format(schema_id: int, document: object) -> bytes:
    """A document as a Confluent JSON Schema serializer writes it: magic byte 0, the schema id
    (4 bytes, big-endian), the document as UTF-8 JSON."""
    return struct.pack(">bI", 0, schema_id) + json.dumps(document).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["start", "stop", "fetch"])
    parser.add_argument("--dir", type=Path, default=CACHE / "local-registry")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args(argv)
    if args.action == "fetch":
        print(registry_dist())
        return 0
    registry = SchemaRegistry(args.dir, args.port)
    registry.stop()  # the one of an earlier run, if any; one at a time
    if args.action == "start":
        registry.start()
        print(f"Apicurio Registry {APICURIO_VERSION} serving {registry.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
