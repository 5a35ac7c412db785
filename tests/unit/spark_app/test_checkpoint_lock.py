"""The checkpoint lock: concurrent threads never produce a torn snapshot (rule 2)."""

import sys
import threading

import pytest

from spark_app.committer import OffsetCommitter
from spark_app.partition_state import PartitionStateTable

pytestmark = pytest.mark.unit

PARTITIONS = [("t", p) for p in range(64)]


@pytest.fixture(autouse=True)
def _switch_threads_often():
    # Make the interpreter switch threads mid-update as often as it can, so a missing
    # lock shows up as a torn snapshot within the test's run.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def test_snapshots_are_never_torn_while_three_threads_write():
    table = PartitionStateTable()
    stop = threading.Event()
    torn: list[str] = []

    def micro_batch_thread():
        batch = 0
        while not stop.is_set():
            batch += 1
            with table.lock:  # one step of the micro-batch thread: plan N, N-1 is durable
                table.plan(dict.fromkeys(PARTITIONS, batch * 10))
                table.mark_checkpointed(dict.fromkeys(PARTITIONS, (batch - 1) * 10))

    def committer_thread():
        while not stop.is_set():
            done = table.snapshot().column("checkpointed")
            if done:
                table.mark_committed(done)

    def discovery_thread():
        n = 0
        while not stop.is_set():
            n += 1
            table.discover(dict.fromkeys(PARTITIONS, n))

    threads = [
        threading.Thread(target=f) for f in (micro_batch_thread, committer_thread, discovery_thread)
    ]
    for thread in threads:
        thread.start()
    snapshots = 0
    try:
        while snapshots < 3000:
            snap = table.snapshot()
            snapshots += 1
            for column in ("planned", "checkpointed", "committed", "latest"):
                values = set(snap.column(column).values())
                if len(values) > 1:
                    torn.append(f"{column}: {sorted(values)[:4]}")
            planned, done = snap.column("planned"), snap.column("checkpointed")
            if planned and done and next(iter(planned.values())) - next(iter(done.values())) != 10:
                torn.append("planned and checkpointed from different batches")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not torn, torn[:5]
    assert table.snapshot().commits_succeeded > 0


def test_committer_newest_wins_and_an_older_unsent_commit_is_skipped():
    table = PartitionStateTable()
    release, first_started = threading.Event(), threading.Event()
    sent: list[dict] = []

    def slow_commit(offsets):
        first_started.set()
        release.wait(5)
        sent.append(offsets)

    committer = OffsetCommitter(table, slow_commit)
    committer.submit({("t", 0): 1})
    assert first_started.wait(5)  # batch 1 is in flight
    committer.submit({("t", 0): 2})  # waits in the slot ...
    committer.submit({("t", 0): 3})  # ... and is replaced by the newer checkpoint
    committer.submit({("t", 0): 3})  # the same checkpoint signalled twice: ignored
    release.set()
    assert committer.flush(5)
    committer.close()
    assert sent == [{("t", 0): 1}, {("t", 0): 3}]
    snap = table.snapshot()
    assert (snap.commits_succeeded, snap.commits_skipped, snap.commits_failed) == (2, 1, 0)
    assert snap.column("committed") == {("t", 0): 3}


def test_a_failed_commit_is_counted_and_never_raised():
    table = PartitionStateTable()

    def broken(offsets):
        raise RuntimeError("coordinator not available")

    committer = OffsetCommitter(table, broken)
    committer.submit({("t", 0): 5})
    assert committer.flush(5)
    committer.close()
    snap = table.snapshot()
    assert (snap.commits_failed, snap.commits_succeeded) == (1, 0)
    assert snap.column("committed") == {}
