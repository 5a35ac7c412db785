"""Stopping the servers tests start (broker, registry): each runs in a session of its own
(`start_new_session=True`), so a signal to its group reaches every process it started.
A local Spark driver's tree is not one group (PySpark's worker daemon moves its workers to a
group of their own): `reap_marked` finds them by a mark in their environment instead."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def read_pid(pid_file: Path) -> int | None:
    return int(pid_file.read_text()) if pid_file.exists() else None


def stop_group(
    process: subprocess.Popen[bytes] | None, pid_file: Path, kill: bool, timeout: float
) -> None:
    """SIGTERM waits (up to `timeout`, then SIGKILL) for a clean shutdown; kill=True is a
    crash (SIGKILL). Without `process` (a server an earlier command started) the pid file
    names it. A frozen (SIGSTOPped) group is continued first, so it sees its signal."""
    pid = process.pid if process else read_pid(pid_file)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGCONT)
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    if process is not None:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(pid, signal.SIGKILL)
            process.wait()
    else:
        _wait_gone(pid, timeout)
    pid_file.unlink(missing_ok=True)


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def reap_marked(name: str, value: str) -> int:
    """SIGKILLs every process whose environment holds `name=value` (a mark a test gave the
    process it started, which every descendant inherits, whatever its group or session).
    How many were found."""
    mark = f"{name}={value}".encode()
    found = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if mark in environ:
            found += 1
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
    return found
