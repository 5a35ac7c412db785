"""The daemon's scheduling (`handlers._reconcile`): plain resyncs run on their own pool; a job
woken while its resync is still queued behind others reacts at once on the main pool, and a
resync that already started is never run a second time next to itself."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from streamingjob_operator.handlers import _reconcile

pytestmark = pytest.mark.unit


class FakeReconciler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (job, thread name prefix)
        self.running: dict[str, int] = {}
        self.overlap = False
        self.lock = threading.Lock()
        self.started = threading.Event()  # "slow" has started
        self.release = threading.Event()  # "slow" runs until the test releases it

    def reconcile(self, namespace: str, name: str) -> float:
        with self.lock:
            self.running[name] = self.running.get(name, 0) + 1
            self.overlap |= self.running[name] > 1
            self.calls.append((name, threading.current_thread().name.split("_")[0]))
        if name == "slow":
            self.started.set()
            self.release.wait(10)
        with self.lock:
            self.running[name] -= 1
        return 30.0


class FakeRuntime:
    def __init__(self) -> None:
        self.reconciler = FakeReconciler()
        self.executor = ThreadPoolExecutor(2, thread_name_prefix="rec")
        self.resync_executor = ThreadPoolExecutor(1, thread_name_prefix="resync")


def test_a_woken_job_does_not_wait_behind_queued_resyncs():
    async def scenario(runtime: FakeRuntime) -> None:
        idle = asyncio.Event()
        busy = asyncio.ensure_future(_reconcile(runtime, idle, "ns", "slow", resync=True))
        await _started(runtime)  # the one resync thread is taken
        wake = asyncio.Event()
        queued = asyncio.ensure_future(_reconcile(runtime, wake, "ns", "job", resync=True))
        await _until(lambda: runtime.resync_executor._work_queue.qsize() == 1)  # queued
        wake.set()  # a driver pod event for "job"
        # done while "slow" still holds the only resync thread
        assert await asyncio.wait_for(queued, timeout=5) == 30.0
        assert not wake.is_set()  # the reconcile that ran started after the wake-up
        runtime.reconciler.release.set()
        await busy

    runtime = FakeRuntime()
    asyncio.run(scenario(runtime))
    assert ("job", "rec") in runtime.reconciler.calls
    assert ("job", "resync") not in runtime.reconciler.calls  # withdrawn, not run twice


def test_a_started_resync_is_awaited_not_doubled():
    async def scenario(runtime: FakeRuntime) -> None:
        wake = asyncio.Event()
        running = asyncio.ensure_future(_reconcile(runtime, wake, "ns", "slow", resync=True))
        await _started(runtime)
        wake.set()
        await asyncio.sleep(0.05)
        assert not running.done()  # not withdrawn, not doubled: awaited
        runtime.reconciler.release.set()
        assert await running == 30.0
        assert wake.is_set()  # still set: the daemon reconciles again afterwards

    runtime = FakeRuntime()
    asyncio.run(scenario(runtime))
    assert runtime.reconciler.calls == [("slow", "resync")]
    assert not runtime.reconciler.overlap


async def _started(runtime: FakeRuntime) -> None:
    await _until(runtime.reconciler.started.is_set, "the slow reconcile started")


async def _until(condition, what: str = "condition", timeout: float = 5.0) -> None:
    """Polls `condition` on the event loop until it holds, failing after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.005)
