"""Executors' reads on Kafka as its users run it: brokers of several versions (the fetch
engine negotiates its request versions), a replicated cluster whose partition leader is
killed or stopped mid-range, and a log truncated under the reader by an unclean leader
election (KIP-320). Every test runs on each read path: the fetch engine, librdkafka's
consumer, pure Python."""

from __future__ import annotations

import dataclasses
import json
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql.streaming.datasource import ReadAllAvailable

from devbed.kafka_broker import KafkaBroker
from devbed.kafka_cluster import KafkaCluster
from devbed.polling import wait_for
from spark_app.api import offsets as off
from spark_app.source.partition_range import DataLossError, KafkaInputPartition
from spark_app.source.partition_reader import read_range
from spark_app.source.source import KafkaStreamReader
from tests.integration.spark_app.test_source_on_broker import on_path
from tests.integration.spark_app.test_source_on_broker import reader as stream_reader
from tests.support.kafka_tools import DURABLE, new_topic, produce

pytestmark = pytest.mark.integration

VERSIONS = ["3.5.2", "4.0.1", "4.1.2"]


@pytest.fixture(params=["fetch", "librdkafka", "python"])
def read_path(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module", params=VERSIONS)
def versioned_broker(request, tmp_path_factory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp(f"kafka-{request.param}"), version=request.param) as b:
        yield b


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    """A cluster of its own: an unclean election leaves a node's log truncated."""
    with KafkaCluster(tmp_path / "cluster") as c:
        yield c


def _range(bootstrap: str, topic: str, end: int, **extra: object) -> KafkaInputPartition:
    return KafkaInputPartition(
        topic=topic,
        partition=0,
        start=0,
        end=end,
        # small fetches: most of the range is still on the broker when it changes
        client_config={"bootstrap.servers": bootstrap, "max.partition.fetch.bytes": 16384},
        max_records_per_batch=100,
        poll_timeout_ms=60_000,
        **extra,  # type: ignore[arg-type]
    )


def _ids(batches) -> list[tuple[int, int]]:
    """(offset, id) of every record read."""
    return [
        (offset, json.loads(value)["id"])
        for b in batches
        for offset, value in zip(
            b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True
        )
    ]


def test_the_fetch_engine_negotiates_versions_with_each_broker(versioned_broker):
    native = pytest.importorskip("streamingjob_native")
    config = [("bootstrap.servers", versioned_broker.bootstrap)]
    got = dict(native.negotiated_versions(config, versioned_broker.bootstrap))
    # every version here speaks more than the engine implements: its ceilings, all with
    # leader epochs; Kafka 4.0 dropped old versions (KIP-896), none the engine uses
    assert got == {"Metadata": 8, "Fetch": 11, "ListOffsets": 5, "OffsetsForLeaderEpoch": 3}


def test_every_read_path_reads_each_broker_version(versioned_broker, read_path):
    topic = new_topic(versioned_broker.bootstrap, partitions=1)
    produce(versioned_broker.bootstrap, topic, range(3000))
    p = _range(versioned_broker.bootstrap, topic, 3000)
    assert _ids(read_range(on_path(p, read_path))) == [(n, n) for n in range(3000)]


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "controlled-stop"])
def test_a_leader_lost_mid_range_costs_a_pause_not_a_record(cluster, read_path, kill):
    """The partition's leader goes down between two batches (a fetch in flight) and comes
    back after a while: the read waits out the leader change, and every offset arrives
    once, in order."""
    topic = new_topic(cluster.bootstrap, partitions=1, replicas=3)
    cluster.wait_in_sync(topic)
    # idempotent: offset n holds id n (a plain acks=all producer's retried first batch can
    # land after later ones on a topic still settling, and the log is then out of id order)
    produce(cluster.bootstrap, topic, range(20_000), **DURABLE)
    batches = read_range(on_path(_range(cluster.bootstrap, topic, 20_000), read_path))
    got = _ids(next(batches) for _ in range(3))
    leader = cluster.leaders(topic)[0]
    with cluster.outage(leader, kill=kill):
        wait_for(lambda: cluster.leaders(topic)[0] not in (-1, leader), timeout=60)
        got += _ids(
            b for _, b in zip(range(20), batches, strict=False)
        )  # read on from the new leader
    got += _ids(batches)
    assert got == [(n, n) for n in range(20_000)]
    cluster.wait_in_sync(topic)


def _two_replica_topic(cluster: KafkaCluster, leader: int, stale: int) -> str:
    """A topic on two of the three nodes (the third keeps the controller quorum while the
    two go down in turn), `leader` preferred; one in-sync replica suffices for writes."""
    from confluent_kafka.admin import NewTopic

    name = f"trunc-{time.monotonic_ns() % 10**9}"
    topic = NewTopic(
        name,
        num_partitions=1,
        replica_assignment=[[leader, stale]],
        config={"min.insync.replicas": "1"},
    )
    admin = cluster._admin()  # kept until the answer: a collected client cancels its requests
    admin.create_topics([topic])[name].result(30)
    return name


def _isr(cluster: KafkaCluster, topic: str) -> list[int]:
    return list(cluster._admin().list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)


def _truncate_under_reader(
    cluster: KafkaCluster, topic: str, readers: list[_Reader], leader: int, stale: int
) -> None:
    """An unclean leader election under readers: offsets 1000..1549 exist only on the
    leader (its follower stopped), the readers read them, the leader hangs, the stale
    follower comes back and is elected, the old leader dies, and the new leader gets new
    records 1000..1599 (ids 5000..5599)."""
    cluster.nodes[stale].stop()  # controlled: out of the ISR at once
    wait_for(lambda: _isr(cluster, topic) == [leader], timeout=60, what="ISR = the leader")
    produce(cluster.nodes[leader].bootstrap, topic, range(1000, 1550), acks=1)
    try:
        wait_for(
            lambda: all(r.offsets[-1:] == [1499] for r in readers),
            timeout=60,
            what="every reader at 1500",
        )
    except AssertionError as exc:
        at = [(r.p.read_path, r.p.native_engine, r.offsets[-1:], r.error) for r in readers]
        raise AssertionError(f"{exc}: read up to {at}") from None
    _elect_the_stale_replica(cluster, topic, leader, stale)


def _elect_the_stale_replica(cluster: KafkaCluster, topic: str, leader: int, stale: int) -> None:
    """The unclean election itself: the leader (the only in-sync replica) hangs, the stale
    follower comes back and is elected, the old leader dies, and the new leader gets new
    records 1000..1599 (ids 5000..5599) where the old one had 1000..1549."""
    cluster.nodes[leader].freeze()  # no longer answers; the quorum needs the stale node
    cluster.restart(stale, timeout=180)  # a loaded machine starts a JVM slowly
    admin = AdminClient({"bootstrap.servers": cluster.nodes[stale].bootstrap})
    tp = TopicPartition(topic, 0)
    # the quorum re-forms and fences the old leader first: slow on a loaded machine
    answers: list[str] = []
    try:
        wait_for(
            lambda: _elected(admin, tp, stale, answers), timeout=240, what="an unclean election"
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the controller's last answers: {answers[-3:]}") from None
    cluster.nodes[leader].stop(kill=True)
    produce(cluster.nodes[stale].bootstrap, topic, range(5000, 5600), acks=1)


def _elected(admin: AdminClient, tp: TopicPartition, stale: int, answers: list[str]) -> bool:
    """Whether `stale` leads `tp` after an unclean election: ours, or the controller's own
    (Kafka 4's KRaft controller, with eligible leader replicas, recovers a partition whose
    last in-sync replica was fenced by itself, and then answers ELECTION_NOT_NEEDED). Keeps
    why an election was refused in `answers`."""
    try:
        error = admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(10)[tp]
        leader = admin.list_topics(tp.topic, timeout=10).topics[tp.topic].partitions[0].leader
    except Exception as exc:
        answers.append(repr(exc))
        return False
    if error is not None:
        answers.append(f"{error} (leader {leader})")
    return leader == stale and (error is None or error.code() == KafkaError.ELECTION_NOT_NEEDED)


def _read(reader: KafkaStreamReader, start: dict, end: dict) -> tuple[list, BaseException | None]:
    """Reads a batch `[start, end)` as Spark's executors do (the partitions the driver plans,
    pickled): (offset, id) of each record read, and the error that ended the read, if any."""
    got: list[tuple[int, int]] = []
    try:
        for partition in reader.partitions(start, end):
            for batch in read_range(pickle.loads(pickle.dumps(partition))):
                got += _ids([batch])
    except Exception as exc:
        return got, exc
    return got, None


# Not in CI (`make test-soak`), as the test above: an unclean election on a loaded machine.
@pytest.mark.soak
def test_a_log_truncated_between_two_reads_is_never_read_past_silently(own_cluster):
    """Rule 16 across reads: a batch reads 0..1549 and its end (1550) goes to the checkpoint as
    Spark stores it, and to the group with its leader epoch; then, with no reader running, an
    unclean election truncates the log to 1000 and the new leader writes 1000..1599; then the
    job restores from that checkpoint (a new driver), or is redeployed (a fresh start from the
    group's committed offsets), and reads on from 1550. Where the old leader's log diverged,
    the position no longer means what was read: every read path fails naming the partition
    and the offsets (failOnDataLoss=true) or reads on from the divergence point (false),
    instead of reading the new leader's 1550..1599 as if nothing happened."""
    cluster = own_cluster
    leader, stale = 1, 2
    topic = _two_replica_topic(cluster, leader, stale)
    cluster.wait_in_sync(topic)
    produce(cluster.bootstrap, topic, range(1000), **DURABLE)
    cluster.nodes[stale].stop()  # controlled: out of the ISR at once
    wait_for(lambda: _isr(cluster, topic) == [leader], timeout=60, what="ISR = the leader")
    produce(cluster.nodes[leader].bootstrap, topic, range(1000, 1550), acks=1)

    def driver(read_path: str, fail_on_data_loss: bool, start: str) -> KafkaStreamReader:
        return stream_reader(
            cluster.bootstrap,
            topic,
            read_path,
            startingOffsets=start,
            **{"kafka.group.id": f"{topic}-{read_path}-{fail_on_data_loss}"},
            failOnDataLoss=str(fail_on_data_loss).lower(),
            pollTimeoutMs="300000",  # outlasts a leader change on a loaded machine
        )

    ways = [(path, fail) for path in ("fetch", "librdkafka", "python") for fail in (True, False)]
    checkpoint = {}
    for way in ways:
        first = driver(*way, "earliest")
        end = first.latestOffset(dict(off.FRESH_START), ReadAllAvailable())
        checkpoint[way] = json.loads(json.dumps(end))  # offsets/0 as Spark writes and reads it
        assert _read(first, off.FRESH_START, checkpoint[way]) == (
            [(n, n) for n in range(1550)],
            None,
        )
        first.commit(checkpoint[way])  # commits/0 written: the group gets 1550 and its epoch
        assert first.driver.committer is not None and first.driver.committer.flush(60)
        assert first.driver.table.snapshot().commits_succeeded == 1, way
        first.stop()

    _elect_the_stale_replica(cluster, topic, leader, stale)

    for way in ways:
        restored = driver(*way, "earliest")  # a restart: a new driver, the checkpoint's offsets
        redeployed = driver(*way, "committed")  # a redeploy: no checkpoint, the group's
        starts = {
            "restored": (restored, checkpoint[way]),
            "redeployed": (redeployed, dict(off.FRESH_START)),
        }
        for how, (reader, start) in starts.items():
            end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))
            assert off.end_positions(end) == {(topic, 0): 1600}, (way, how)
            assert off.start_positions(start, end) == {(topic, 0): 1550}, (way, how)
            got, error = _read(reader, start, end)
            reader.stop()
            if way[1]:
                assert isinstance(error, DataLossError), (way, how, error, got[-1:])
                assert f"{topic}-0" in str(error), (way, how)
                assert "offsets 1000..1549" in str(error), (way, how)
                assert got == [], (way, how)
            else:
                assert error is None, (way, how, error)
                assert got == [(n, 5000 + n - 1000) for n in range(1000, 1600)], (way, how)


class _Reader(threading.Thread):
    """Reads a range in the background, keeping what it read and how it ended."""

    def __init__(self, p: KafkaInputPartition):
        super().__init__(daemon=True)
        self.p = p
        self.offsets: list[int] = []
        self.ids: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for b in read_range(self.p):
                got = _ids([b])
                self.ids += [i for _, i in got]
                self.offsets += [o for o, _ in got]
        except BaseException as exc:
            self.error = exc


# Not in CI (`make test-soak`): forcing the unclean election on CI's loaded machine times out
# (the controller's answers, 10 s each, did not come for 240 s in session 11's CI run; 48 s on a
# quiet machine). One election serves all six readers (3 read paths x both failOnDataLoss).
@pytest.mark.soak
def test_a_log_truncated_under_the_reader_is_never_read_past_silently(own_cluster):
    """KIP-320 on every read path: after the unclean election each reader's position (1550:
    its last 50 records wait in a batch of 100) is past where the new leader's log diverges
    (1000). failOnDataLoss=true fails naming the partition and the truncated offsets; false
    reads on from the divergence point: the new leader's records 1000..1599."""
    cluster = own_cluster
    leader, stale = 1, 2
    topic = _two_replica_topic(cluster, leader, stale)
    cluster.wait_in_sync(topic)
    produce(cluster.bootstrap, topic, range(1000), **DURABLE)
    readers = {}
    for read_path in ("fetch", "librdkafka", "python"):
        for fail_on_data_loss in (True, False):
            p = _range(cluster.bootstrap, topic, 1600, fail_on_data_loss=fail_on_data_loss)
            p = dataclasses.replace(p, poll_timeout_ms=300_000)  # outlasts the election
            readers[read_path, fail_on_data_loss] = _Reader(on_path(p, read_path))
    for reader in readers.values():
        reader.start()
    _truncate_under_reader(cluster, topic, list(readers.values()), leader, stale)
    for (read_path, fail_on_data_loss), reader in readers.items():
        reader.join(300)
        assert not reader.is_alive(), read_path
        if fail_on_data_loss:
            assert isinstance(reader.error, DataLossError), (read_path, reader.error)
            assert f"{topic}-0" in str(reader.error)
            assert "offsets 1000..1549" in str(reader.error), read_path
            assert reader.ids == list(range(1500)), read_path
        else:
            assert reader.error is None, (read_path, reader.error)
            assert reader.offsets == list(range(1550)) + list(range(1000, 1600)), read_path
            assert reader.ids == list(range(1550)) + list(range(5000, 5600)), read_path
