"""A real PostgreSQL server on loopback for the integration tier: the Iceberg SQL catalog's
database (PyIceberg's SqlCatalog over psycopg2), as users run it.

The machine's own PostgreSQL (Debian's postgresql package: `initdb` and `postgres` on PATH or
under /usr/lib/postgresql/<version>/bin). Each start is a new cluster in its own directory,
with one database and one user whose password is known only to the test (scram-sha-256, no
trust): a catalog URI without it is refused, as on any real server. PostgreSQL refuses to run
as root, so under root the cluster belongs to the `postgres` system user the package creates.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from devbed.ports import free_port
from devbed.process_group import stop_group

USER, DATABASE = "iceberg", "iceberg"


def server_binary(name: str) -> str:
    """`initdb`, `postgres`, `psql` from PATH, else from the newest /usr/lib/postgresql."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name)
    for directory in reversed(versions):
        if (directory / name).exists():
            return str(directory / name)
    raise RuntimeError(
        f"PostgreSQL's {name} is not installed: `apt-get install postgresql` (Debian's package)"
    )


class PostgresServer:
    """One PostgreSQL cluster: `uri` (no password) for clients, `password` for USER. Its
    directory is a new one under the system's temporary directory (a test's tmp_path is
    closed to the postgres user), removed at the stop."""

    def __init__(self, port: int | None = None):
        self.workdir = Path(tempfile.mkdtemp(prefix="streamingjob-postgres-"))
        self.port = port or free_port()
        self.password = secrets.token_hex(16)
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    def _as_owner(self, command: list[str]) -> list[str]:
        """`command` as the cluster's owner: the postgres system user when we are root."""
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(path, owner.pw_uid, owner.pw_gid)

    def start(self, timeout: float = 60.0) -> PostgresServer:
        self._own(self.workdir)
        password_file = self.workdir / "password"  # initdb reads it: never on a command line
        password_file.write_text(self.password)
        password_file.chmod(0o600)
        self._own(password_file)
        initdb = [server_binary("initdb"), "-D", str(self.data), "-U", USER,
                  "-A", "scram-sha-256", f"--pwfile={password_file}", "--no-sync",
                  "-E", "UTF8"]  # fmt: skip
        subprocess.run(self._as_owner(initdb), check=True, capture_output=True, timeout=120)
        password_file.unlink()
        server = [server_binary("postgres"), "-D", str(self.data), "-p", str(self.port),
                  "-c", "listen_addresses=127.0.0.1",
                  "-c", f"unix_socket_directories={self.workdir}",
                  "-c", "fsync=off", "-c", "max_connections=50"]  # fmt: skip
        with open(self.workdir / "postgres.log", "ab") as out:
            self.process = subprocess.Popen(
                self._as_owner(server), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        (self.workdir / "postgres.pid").write_text(str(self.process.pid))
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Until the database answers a query with the password (createdb on first answer)."""
        deadline = time.monotonic() + timeout
        env = {**os.environ, "PGPASSWORD": self.password}
        command = [server_binary("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
                   "-d", "postgres", "-tAc", f"CREATE DATABASE {DATABASE}"]  # fmt: skip
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited; see {self.workdir / 'postgres.log'}")
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                return
            time.sleep(0.2)
        raise TimeoutError(f"PostgreSQL on port {self.port} not ready after {timeout}s")

    def stop(self, kill: bool = False) -> None:
        stop_group(self.process, self.workdir / "postgres.pid", kill, timeout=30)
        self.process = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)
