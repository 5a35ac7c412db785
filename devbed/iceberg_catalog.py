"""A real Iceberg REST catalog on loopback for the integration tier: Apache Iceberg's own REST
server (`org.apache.iceberg.rest.RESTCatalogServer`, published on Maven Central in
iceberg-open-api's test fixtures; the server of Iceberg's own REST compatibility kit) over a
JDBC catalog in a SQLite file, writing table metadata through Hadoop's FileIO.

Maven resolves it and its runtime once per version (scripts/iceberg/pom.xml) under
$STREAMJOB_CACHE/iceberg. Each start is a new catalog (its own database file) whose warehouse
is a local directory: the tests read the tables it holds with PyIceberg, as any reader would.

CLI: python -m devbed.iceberg_catalog {start,stop,fetch,fetch-s3} --dir D --port P
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devbed.cache import CACHE, built_once
from devbed.ports import free_port
from devbed.process_group import stop_group

REPO_ROOT = Path(__file__).resolve().parents[1]
POM = REPO_ROOT / "scripts" / "iceberg" / "pom.xml"
S3_POM = REPO_ROOT / "scripts" / "iceberg" / "s3" / "pom.xml"  # the kind bed's server adds it
SERVER = "org.apache.iceberg.rest.RESTCatalogServer"


def iceberg_version() -> str:
    match = re.search(r"<iceberg.version>([^<]+)</iceberg.version>", POM.read_text())
    if not match:
        raise RuntimeError(f"no <iceberg.version> in {POM}")
    return match.group(1)


def server_jars(version: str | None = None) -> Path:
    """The directory of the server's jars, resolved through Maven once and cached."""
    return _resolved(POM, "rest-server", version or iceberg_version())


def s3_jars(version: str | None = None) -> Path:
    """The directory of Iceberg's S3 FileIO and its AWS SDK (scripts/iceberg/s3/pom.xml),
    which the kind bed's catalog (images/iceberg-rest) adds to the server's."""
    return _resolved(S3_POM, "rest-server-s3", version or iceberg_version())


def _resolved(pom: Path, name: str, version: str) -> Path:
    def resolve(into: Path) -> None:
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-Diceberg.version={version}",
             f"-DoutputDirectory={into}"],
            check=True,
            stdout=sys.stderr,  # `fetch` prints the directory alone
        )  # fmt: skip

    return built_once(CACHE / "iceberg" / version / name, resolve)


class RestCatalog:
    """One REST catalog server: `uri` for clients, `warehouse` where its tables' files go."""

    def __init__(self, workdir: Path, port: int | None = None, heap: str = "256m"):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.heap = heap
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return (self.workdir / "warehouse").as_uri()

    @property
    def log_file(self) -> Path:
        return self.workdir / "catalog.log"

    def start(self, timeout: float = 90.0) -> RestCatalog:
        jars = server_jars()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # RESTCatalogServer takes its catalog's properties from CATALOG_* variables
        # (CATALOG_JDBC_USER: jdbc.user; a double underscore is a dash)
        env = {
            **os.environ,
            "CATALOG_CATALOG__IMPL": "org.apache.iceberg.jdbc.JdbcCatalog",
            "CATALOG_URI": f"jdbc:sqlite:file:{self.workdir / 'catalog.db'}",
            "CATALOG_JDBC_USER": "iceberg",
            "CATALOG_JDBC_PASSWORD": "iceberg",
            "CATALOG_WAREHOUSE": self.warehouse,
            "CATALOG_REST_PORT": str(self.port),
        }
        command = [
            "java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", f"{jars}/*", SERVER,
        ]  # fmt: skip
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(
                command, cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        (self.workdir / "catalog.pid").write_text(str(self.process.pid))
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the Iceberg REST catalog exited; see {self.log_file}")
            try:
                with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as answer:
                    if "endpoints" in json.load(answer):
                        return
            except OSError:
                pass  # not listening yet
            time.sleep(0.2)
        raise TimeoutError(f"the Iceberg REST catalog on {self.uri} not ready after {timeout}s")

    def stop(self, kill: bool = False) -> None:
        stop_group(self.process, self.workdir / "catalog.pid", kill, timeout=30)
        self.process = None

    def __enter__(self) -> RestCatalog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devbed.iceberg_catalog")
    parser.add_argument("command", choices=["start", "stop", "fetch", "fetch-s3"])
    parser.add_argument("--dir", type=Path, default=CACHE / "iceberg" / "local")
    parser.add_argument("--port", type=int, default=8181)
    args = parser.parse_args(argv)
    if args.command in ("fetch", "fetch-s3"):
        print(server_jars() if args.command == "fetch" else s3_jars())
        return 0
    catalog = RestCatalog(args.dir, args.port)
    if args.command == "stop":
        catalog.stop()
        return 0
    catalog.start()
    print(f"Iceberg REST catalog at {catalog.uri}, warehouse {catalog.warehouse}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
