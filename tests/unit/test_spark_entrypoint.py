"""The Spark image's entrypoint (images/spark/entrypoint.sh), run here with bash: `submit`
hands the pod's SIGTERM to the job's runner, the JVM's first live child, and exits with the
JVM's code. Real processes and signals; a small Python program stands in for the JVM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ENTRYPOINT = Path(__file__).resolve().parents[2] / "images" / "spark" / "entrypoint.sh"

# Like spark-submit's JVM: a first child it never reaps (spark-class's launcher subshell can
# outlive its `exec` of the JVM), then the runner, whose exit code becomes its own. The JVM
# itself must not get the SIGTERM: it would end with 143.
FAKE_JVM = """
import os, subprocess, sys, time
os.posix_spawn("/bin/true", ["true"], os.environ)  # never waited for: a zombie once it ends
time.sleep(0.2)
runner = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
sys.exit(runner.wait())
"""
RUNNER = """
import pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: (marker.write_text("SIGTERM"), sys.exit(0)))
marker.with_suffix(".ready").touch()
while True:
    time.sleep(0.05)
"""


def _children(pid: int) -> list[tuple[int, str]]:
    out = subprocess.run(
        ["ps", "-o", "pid=,stat=", "--ppid", str(pid)], capture_output=True, text=True
    ).stdout
    return [(int(p), stat) for p, stat in (line.split() for line in out.splitlines())]


def test_submit_hands_sigterm_to_the_runner_past_a_zombie_first_child(tmp_path):
    marker = tmp_path / "runner"
    entrypoint = subprocess.Popen(
        ["bash", str(ENTRYPOINT), "submit", sys.executable, "-c", FAKE_JVM, RUNNER, str(marker)],
        start_new_session=True,  # its own process group: nothing outlives the test
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.with_suffix(".ready").exists():
            assert time.monotonic() < deadline, "the runner did not start"
            assert entrypoint.poll() is None, "the entrypoint ended early"
            time.sleep(0.05)
        (jvm, _), *_ = _children(entrypoint.pid)
        states = [stat for _, stat in _children(jvm)]
        assert len(states) == 2 and states[0].startswith("Z"), states  # zombie, then runner
        entrypoint.send_signal(signal.SIGTERM)  # what tini forwards on pod deletion
        assert entrypoint.wait(30) == 0  # the runner's code: the JVM was not signalled
        assert marker.read_text() == "SIGTERM"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(entrypoint.pid, signal.SIGKILL)
        entrypoint.wait()
