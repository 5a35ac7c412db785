"""The checkpoint lock: concurrent threads never produce a torn snapshot (rule 2)."""

import json
import sys
import threading

import pytest

from spark_app.source.committer import OffsetCommitter
from spark_app.source.partition_state import PartitionStateTable

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


class FakeKafka:
    """The source's Kafka look-ups without a broker: 64 partitions whose log end grows by
    one on every watermark request (the same end for all partitions of one request)."""

    def __init__(self, options, *args, **kwargs) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._end = 0
        self.requests_by_thread: dict[str, int] = {}

    def topic_partitions(self):
        return list(PARTITIONS)

    def watermarks(self, tps):
        with self._lock:
            self._end += 1
            name = threading.current_thread().name
            self.requests_by_thread[name] = self.requests_by_thread.get(name, 0) + 1
            return {tp: (0, self._end) for tp in tps}

    def log_ends(self, tps):
        return self.watermarks(tps), {}

    def committed(self, tps, epochs=None):
        return dict.fromkeys(tps)

    def close(self) -> None:
        pass


def test_snapshots_are_never_torn_while_the_source_threads_run(monkeypatch):
    """The production call path, concurrently: the micro-batch thread calls `latest_offset`
    as Spark does (each call marks the previous batch durable and plans the next), the
    committer thread commits what it is handed, the partition-discovery thread refreshes
    log ends every millisecond. None of them is told about the lock; every snapshot taken
    meanwhile must be consistent: each column written whole, and committed <= checkpointed
    <= planned per partition (fails without the table's lock)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_app.api.options import SourceOptions
    from spark_app.source import driver_side as source_module

    commits: list[dict] = []
    monkeypatch.setattr(source_module, "KafkaMetadata", FakeKafka)
    monkeypatch.setattr(
        source_module, "group_committer", lambda options: lambda o, _: commits.append(o)
    )
    options = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": "fake:1",
            "subscribe": "t",
            "kafka.group.id": "g",
            "startingOffsets": "earliest",
            "partitionDiscoveryIntervalMs": "1",
            "minFetchIntervalMs": "0",
        }
    )
    driver = source_module.DriverSide(options)
    stop = threading.Event()
    batches = [0]
    failures: list[BaseException] = []

    def micro_batch_thread():
        try:
            start = source_module.off.FRESH_START
            while not stop.is_set():
                end = driver.latest_offset(dict(start), ReadAllAvailable())
                if end is not start:
                    batches[0] += 1
                    start = json.loads(json.dumps(end))  # as Spark hands it back
        except BaseException as exc:
            failures.append(exc)

    spark = threading.Thread(target=micro_batch_thread, name="micro-batch")
    spark.start()
    torn: list[str] = []
    snapshots = 0
    try:
        while snapshots < 3000:
            snap = driver.table.snapshot()
            snapshots += 1
            columns = {}
            for column in ("planned", "checkpointed", "committed", "latest"):
                values = set(snap.column(column).values())
                if len(values) > 1:
                    torn.append(f"{column}: {sorted(values)[:4]}")
                columns[column] = snap.column(column)
            for tp, done in columns["committed"].items():
                if done > columns["checkpointed"].get(tp, -1):
                    torn.append(f"{tp} committed {done} ahead of its checkpoint")
            for tp, done in columns["checkpointed"].items():
                if done > columns["planned"].get(tp, -1):
                    torn.append(f"{tp} checkpointed {done} ahead of the plan")
    finally:
        stop.set()
        spark.join(10)
        driver.close()
    assert not failures, failures
    assert not torn, torn[:5]
    # all three threads really ran: batches planned, commits sent, discovery refreshed
    snap = driver.table.snapshot()
    assert batches[0] > 10 and snap.commits_succeeded > 0 and commits
    assert driver.metadata.requests_by_thread.get("partition-discovery", 0) > 0


def test_an_older_discovery_reading_never_overwrites_a_newer_log_end(monkeypatch):
    """The discovery thread reads log ends (5) and is slow to store them; meanwhile the
    micro-batch thread reads newer ones (10) and plans a batch up to them. The late, older
    reading must not move the log end back: the next batch would see the log end before its
    start and fail with a spurious data-loss error."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_app.api.options import SourceOptions
    from spark_app.source import driver_side as source_module

    read, release, next_reading, finish = (threading.Event() for _ in range(4))

    class SlowDiscovery(FakeKafka):
        discovery_calls = 0

        def watermarks(self, tps):
            if threading.current_thread().name != "partition-discovery":
                return {tp: (0, 10) for tp in tps}
            SlowDiscovery.discovery_calls += 1
            if SlowDiscovery.discovery_calls == 1:
                answer = {tp: (0, 5) for tp in tps}
                read.set()
                release.wait(10)  # stored only after the newer reading
                return answer
            next_reading.set()  # the first reading is stored (or dropped) by now
            finish.wait(10)
            return {tp: (0, 10) for tp in tps}

    monkeypatch.setattr(source_module, "KafkaMetadata", SlowDiscovery)
    monkeypatch.setattr(source_module, "group_committer", lambda options: lambda o, e: None)
    options = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": "fake:1",
            "subscribe": "t",
            "kafka.group.id": "g",
            "startingOffsets": "earliest",
            "partitionDiscoveryIntervalMs": "1",
            "minFetchIntervalMs": "0",
        }
    )
    driver = source_module.DriverSide(options)
    try:
        assert read.wait(10)  # discovery holds its older reading
        start = source_module.off.FRESH_START
        end = json.loads(json.dumps(driver.latest_offset(dict(start), ReadAllAvailable())))
        assert set(driver.table.snapshot().column("planned").values()) == {10}
        release.set()
        assert next_reading.wait(10)
        assert set(driver.table.snapshot().column("latest").values()) == {10}
        driver.latest_offset(end, ReadAllAvailable())  # no DataLossError
    finally:
        release.set()
        finish.set()
        driver.close()


def test_committer_newest_wins_and_an_older_unsent_commit_is_skipped():
    table = PartitionStateTable()
    release, first_started = threading.Event(), threading.Event()
    sent: list[dict] = []

    def slow_commit(offsets, epochs):
        first_started.set()
        release.wait(5)
        sent.append((offsets, epochs))

    committer = OffsetCommitter(table, slow_commit)
    committer.submit({("t", 0): 1}, epochs={("t", 0): 4})
    assert first_started.wait(5)  # batch 1 is in flight
    committer.submit({("t", 0): 2}, epochs={("t", 0): 4})  # waits in the slot ...
    committer.submit({("t", 0): 3}, epochs={("t", 0): 5})  # ... replaced by the newer one
    committer.submit({("t", 0): 3}, epochs={("t", 0): 5})  # signalled twice: ignored
    release.set()
    assert committer.flush(5)
    committer.close()
    # each position goes with the leader epoch kept with it (rule 16)
    assert sent == [({("t", 0): 1}, {("t", 0): 4}), ({("t", 0): 3}, {("t", 0): 5})]
    snap = table.snapshot()
    assert (snap.commits_succeeded, snap.commits_skipped, snap.commits_failed) == (2, 1, 0)
    assert snap.column("committed") == {("t", 0): 3}


def test_a_failed_commit_is_counted_and_never_raised():
    table = PartitionStateTable()

    def broken(offsets, epochs):
        raise RuntimeError("coordinator not available")

    committer = OffsetCommitter(table, broken)
    committer.submit({("t", 0): 5})
    assert committer.flush(5)
    committer.close()
    snap = table.snapshot()
    assert (snap.commits_failed, snap.commits_succeeded) == (1, 0)
    assert snap.column("committed") == {}


def test_a_failed_commit_is_sent_again_so_an_idle_streams_group_catches_up():
    """No newer batch comes (the stream is idle): the failed commit is sent again after a
    backoff until it goes through (issue 41: found by the simulation, seed in the docs)."""
    table = PartitionStateTable()
    sent: list[dict] = []
    done = threading.Event()

    def flaky(offsets, epochs):
        sent.append((offsets, epochs))
        if len(sent) < 3:
            raise RuntimeError("coordinator not available")
        done.set()

    committer = OffsetCommitter(table, flaky, retry_seconds=(0.05, 0.2))
    committer.submit({("t", 0): 5}, epochs={("t", 0): 2})
    assert done.wait(5), sent
    committer.close()
    assert sent == [({("t", 0): 5}, {("t", 0): 2})] * 3  # sent again with its epoch
    snap = table.snapshot()
    assert (snap.commits_failed, snap.commits_succeeded) == (2, 1)
    assert snap.column("committed") == {("t", 0): 5}


def test_newer_offsets_replace_a_commit_waiting_to_be_sent_again():
    table = PartitionStateTable()
    sent: list[dict] = []
    newer_sent = threading.Event()

    def first_fails(offsets, epochs):
        sent.append(offsets)
        if len(sent) == 1:
            raise RuntimeError("coordinator not available")
        newer_sent.set()

    committer = OffsetCommitter(table, first_fails, retry_seconds=(60.0, 60.0))
    committer.submit({("t", 0): 5})
    assert committer.flush(5)  # failed; its retry waits a minute
    committer.submit({("t", 0): 9})
    assert newer_sent.wait(5)
    committer.close()
    assert sent == [{("t", 0): 5}, {("t", 0): 9}]
