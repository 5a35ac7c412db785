"""The test bed's reaper: a process that left its parent's group (as PySpark's worker daemon
moves its workers) is still found by the mark it inherited, and only marked ones are."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from devbed.process_group import reap_marked

pytestmark = pytest.mark.unit

# a child that moves to a group of its own, then sleeps on (what a killpg of its parent misses)
ESCAPING = "import os, time; os.setpgid(0, 0); print(os.getpid(), flush=True); time.sleep(60)"


def started(mark: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", ESCAPING],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TEST_MARK": mark},
    )
    assert child.stdout is not None and int(child.stdout.readline()) == child.pid  # it moved
    assert os.getpgid(child.pid) == child.pid
    return child


def test_every_marked_process_is_killed_whatever_its_group_and_no_other():
    mark = uuid.uuid4().hex
    marked, other = started(mark), started(uuid.uuid4().hex)
    try:
        assert reap_marked("TEST_MARK", mark) == 1
        assert marked.wait(10) == -9
        assert other.poll() is None  # another mark: left alone
        assert reap_marked("TEST_MARK", mark) == 0  # gone (reaped by wait: no zombie)
    finally:
        other.kill()
        other.wait()
