"""A real Apache Iceberg REST catalog on loopback for the Iceberg sink's tests and local runs.

Apache Iceberg publishes the REST catalog server of its own compatibility tests as a runnable
jar on Maven Central (`iceberg-open-api`, main class `org.apache.iceberg.rest.RESTCatalogServer`:
its REST endpoints in front of a JdbcCatalog). Maven fetches that one artifact once per version
into $STREAMJOB_CACHE/iceberg (`dependency:get`, as devbed/schema_registry.py fetches its
server). The server is configured by CATALOG_* environment variables (CATALOG_URI ->
`uri`, CATALOG_JDBC_SCHEMA__VERSION -> `jdbc.schema-version`): here its JDBC store is a
SQLite file and its warehouse a local directory, both in `workdir`, so a restart (or a crash)
keeps every table, as a real catalog does.

Clients reach it with PyIceberg's REST catalog: `client_env()` is what the job's environment
gets (the sink reads its catalog only from there).

CLI: python -m devbed.iceberg_catalog {start,stop,fetch} --dir D [--port P]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devbed.cache import CACHE, built_once
from devbed.ports import free_port
from devbed.process_group import stop_group

# 1.10.0: the newest release of the runnable jar found on Maven Central (1.12.0's is not there).
ICEBERG_VERSION = "1.10.0"
_ARTIFACT = "org.apache.iceberg:iceberg-open-api:{version}"
# The dependency plugin whose `get` copies one artifact without resolving its dependencies
# (the jar carries them all).
_GET = "org.apache.maven.plugins:maven-dependency-plugin:2.8:get"
CATALOG_NAME = "default"  # the PyIceberg catalog name the sink loads (spark_app/sinks)


def server_jar(version: str = ICEBERG_VERSION) -> Path:
    """The REST catalog server's jar of a version, fetched through Maven once."""
    target = CACHE / "iceberg" / version

    def fetch(into: Path) -> None:
        into.mkdir(parents=True)
        subprocess.run(
            ["mvn", "-q", "-B", _GET, f"-Dartifact={_ARTIFACT.format(version=version)}",
             "-Dtransitive=false", f"-Ddest={into / 'rest-catalog.jar'}"],
            check=True,
        )  # fmt: skip

    return built_once(target, fetch) / "rest-catalog.jar"


def client_env(uri: str, warehouse: str, name: str = CATALOG_NAME) -> dict[str, str]:
    """PyIceberg's environment configuration of a REST catalog named `name`."""
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    return {f"{prefix}TYPE": "rest", f"{prefix}URI": uri, f"{prefix}WAREHOUSE": warehouse}


class IcebergCatalog:
    """One REST catalog server on `port`; `stop(kill=True)` is a crash. Its tables (the SQLite
    store and the warehouse's files) live in `workdir` and survive a restart."""

    def __init__(self, workdir: Path, port: int | None = None, *, heap: str = "256m"):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return f"file://{self.workdir / 'warehouse'}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "catalog.log"

    def client_env(self) -> dict[str, str]:
        return client_env(self.uri, self.warehouse)

    def start(self, timeout: float = 120.0) -> IcebergCatalog:
        jar = server_jar()
        (self.workdir / "warehouse").mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "CATALOG_URI": f"jdbc:sqlite:{self.workdir / 'catalog.db'}",
            "CATALOG_JDBC_SCHEMA__VERSION": "V1",
            "CATALOG_WAREHOUSE": self.warehouse,
            "CATALOG_REST_PORT": str(self.port),
        }
        # A test server: a small heap, C1 only and the serial collector (starts faster).
        command = ["java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(
                [*command, "-jar", str(jar)], cwd=self.workdir, env=env, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        (self.workdir / "catalog.pid").write_text(str(self.process.pid))
        self.wait_ready(timeout)
        self.warm_up()
        return self

    def warm_up(self) -> None:
        """One table created and dropped: the server's first creation loads its file IO and
        JDBC classes (seconds, more on a busy machine), which a job's first batch would
        otherwise wait for, as it never does on a catalog that has been serving."""
        schema = {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "n", "required": False, "type": "long"}]}  # fmt: skip
        self._call("POST", "/v1/namespaces", {"namespace": ["devbed_warm_up"]})
        self._call("POST", "/v1/namespaces/devbed_warm_up/tables", {"name": "t", "schema": schema})
        self._call("DELETE", "/v1/namespaces/devbed_warm_up/tables/t?purgeRequested=true")
        self._call("DELETE", "/v1/namespaces/devbed_warm_up")

    def _call(self, method: str, path: str, body: dict | None = None) -> None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.uri + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120):
            pass

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the Iceberg REST catalog exited; see {self.log_file}")
            try:
                with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as answer:
                    if answer.status == 200 and "endpoints" in json.loads(answer.read()):
                        return
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        raise TimeoutError(
            f"the Iceberg REST catalog on port {self.port} not ready after {timeout}s"
        )

    def stop(self, kill: bool = False) -> None:
        """SIGTERM waits for a clean shutdown; kill=True is a crash (SIGKILL)."""
        stop_group(self.process, self.workdir / "catalog.pid", kill, timeout=30)
        self.process = None

    def __enter__(self) -> IcebergCatalog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devbed.iceberg_catalog")
    parser.add_argument("command", choices=["start", "stop", "fetch"])
    parser.add_argument("--dir", type=Path, default=CACHE / "local-iceberg")
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(server_jar())
        return 0
    catalog = IcebergCatalog(args.dir, args.port)
    if args.command == "stop":
        catalog.stop()
        return 0
    catalog.start()
    for key, value in catalog.client_env().items():
        print(f"export {key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
