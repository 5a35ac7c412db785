"""The dead-letter writer on a real broker: every dead record once for read_committed readers,
across re-reads of a range (a restore), overlapping ranges (a redeploy from older offsets) and a
writer killed mid-transaction (an executor lost), whose records are in the log but aborted."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import replace

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from devbed.polling import wait_for
from devbed.ports import free_port
from spark_app.api.dead_letter_options import DeadLetterTarget
from spark_app.formats.poison import DeadRecord
from spark_app.sinks.dead_letter import DeadLetterTally, read_name, write_dead_records
from tests.support.kafka_tools import consume_to_end, group_offsets, new_topic

pytestmark = pytest.mark.integration


@pytest.fixture
def source(kafka) -> str:
    """The source topic (the progress group's offsets are for its partitions)."""
    return new_topic(kafka.bootstrap, partitions=2, prefix="orders")


def _target(bootstrap: str) -> DeadLetterTarget:
    return DeadLetterTarget(
        topic=new_topic(bootstrap, partitions=2, prefix="dead"),
        client={"bootstrap.servers": bootstrap},
        job=f"orders-{uuid.uuid4().hex[:6]}",
        epoch=3,
        group=f"g-{uuid.uuid4().hex[:6]}",
    )


def new_topic_named(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)


def _dead(source: str, offset: int, partition: int = 0) -> DeadRecord:
    return DeadRecord(
        topic=source,
        partition=partition,
        offset=offset,
        timestamp=1_700_000_000_000 + offset,
        key=f"k{offset}".encode(),
        value=b"\x07not avro " + str(offset).encode(),
        reason="bad-magic-byte",
        message=f"magic byte 7, not 0, at offset {offset}",
        headers=[("trace", b"t%d" % offset)],
    )


def _source_offset(message) -> int:
    return int(dict(message.headers())["streamingjob.source.offset"])


def _offsets(messages: list) -> list[int]:
    return sorted(_source_offset(m) for m in messages)


def test_dead_records_carry_their_bytes_and_where_and_why(kafka, source: str) -> None:
    target = _target(kafka.bootstrap)
    assert write_dead_records(target, source, 0, [_dead(source, 4), _dead(source, 7)], end=10) == 2
    [first, second] = sorted(
        consume_to_end(kafka.bootstrap, target.topic, "read_committed"), key=_source_offset
    )
    assert (first.key(), first.value()) == (b"k4", b"\x07not avro 4")
    assert first.headers() == [
        ("trace", b"t4"),
        ("streamingjob.source.topic", source.encode()),
        ("streamingjob.source.partition", b"0"),
        ("streamingjob.source.offset", b"4"),
        ("streamingjob.source.timestamp", b"1700000000004"),
        ("streamingjob.error.reason", b"bad-magic-byte"),
        ("streamingjob.error.message", b"magic byte 7, not 0, at offset 4"),
        ("streamingjob.job", target.job.encode()),
        ("streamingjob.epoch", b"3"),
    ]
    assert second.value() == b"\x07not avro 7"
    # the progress group holds the source offset after the range, committed with the records
    assert group_offsets(kafka.bootstrap, target.progress_group, source)[0] == 10


def test_a_range_read_again_or_overlapping_writes_each_record_once(kafka, source: str) -> None:
    target = _target(kafka.bootstrap)
    assert write_dead_records(target, source, 0, [_dead(source, 4), _dead(source, 7)], end=10) == 2
    # a restore reads the same range again, a retried task too
    assert write_dead_records(target, source, 0, [_dead(source, 4), _dead(source, 7)], end=10) == 0
    # a redeploy from older committed offsets: 7 again, 12 new
    assert write_dead_records(target, source, 0, [_dead(source, 7), _dead(source, 12)], end=15) == 1
    # another source partition has its own progress
    assert write_dead_records(target, source, 1, [_dead(source, 7, partition=1)], end=8) == 1
    assert _offsets(consume_to_end(kafka.bootstrap, target.topic, "read_committed")) == [
        4,
        7,
        7,
        12,
    ]
    assert group_offsets(kafka.bootstrap, target.progress_group, source) == {0: 15, 1: 8}


def test_a_read_below_its_batchs_start_writes_the_new_leaders_records_once(kafka, source):
    """An unclean election truncated the log to 12 under a batch planned from 17: the read
    goes on from 12 (failOnDataLoss=false, rule 16), where the new leader wrote other
    records than those the progress (17) counts. Its poison records 12 and 15 are written
    (simulation seed 49: skipped as below the progress), once across a retried task."""
    target = _target(kafka.bootstrap)
    assert write_dead_records(target, source, 0, [_dead(source, 2), _dead(source, 7)], end=17) == 2
    below = read_name(17, 12)
    new = [_dead(source, 12), _dead(source, 15), _dead(source, 22)]
    assert write_dead_records(target, source, 0, new, end=23, read=below) == 3
    assert write_dead_records(target, source, 0, new, end=23, read=below) == 0  # a retry
    assert _offsets(consume_to_end(kafka.bootstrap, target.topic, "read_committed")) == [
        2,
        7,
        12,
        15,
        22,
    ]
    # the next batch reads where this one ended, as planned: the progress counts again
    assert write_dead_records(target, source, 0, [_dead(source, 22), _dead(source, 24)], 25) == 1


_KILLED_MID_TRANSACTION = """
import os, sys
from confluent_kafka import Producer
bootstrap, transactional_id, topic = sys.argv[1:]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
producer.init_transactions(30)
producer.begin_transaction()
for n in (4, 7):
    producer.produce(topic, value=b"half-written %d" % n)
assert producer.flush(30) == 0  # in the log, the transaction open
os.kill(os.getpid(), 9)
"""


def test_a_writer_killed_mid_transaction_is_fenced_and_its_records_never_seen(
    kafka, source: str
) -> None:
    target = _target(kafka.bootstrap)
    zombie = target.transactional_id(source, 0)
    args = [sys.executable, "-c", _KILLED_MID_TRANSACTION, kafka.bootstrap, zombie, target.topic]
    assert subprocess.run(args, timeout=60).returncode == -9
    # the next attempt of the task: fences the dead writer (its transaction aborted) and writes
    assert write_dead_records(target, source, 0, [_dead(source, 4), _dead(source, 7)], end=10) == 2
    committed = consume_to_end(kafka.bootstrap, target.topic, "read_committed")
    assert sorted(m.value() for m in committed) == [b"\x07not avro 4", b"\x07not avro 7"]
    # the killed writer's records are in the log: what read_committed does not show
    everything = [
        m.value() for m in consume_to_end(kafka.bootstrap, target.topic, "read_uncommitted")
    ]
    assert sorted(v for v in everything if v.startswith(b"half")) == [
        b"half-written 4",
        b"half-written 7",
    ]


# a tally's reader (a consumer of the dead-letter topic, read at most once a second) in the
# Spark tier's first minutes, beside every other tier's start: 30 s were not enough (CI run 46)
TALLY_SECONDS = 90


def test_the_drivers_tally_counts_this_runs_copies_of_this_job_by_reason(kafka, source) -> None:
    target = _target(kafka.bootstrap)
    before = [_dead(source, 1)]
    assert write_dead_records(target, source, 0, before, end=2) == 1  # an earlier run's
    tally = DeadLetterTally(target)
    try:
        assert tally.counts() == {}
        truncated = replace(_dead(source, 5), reason="truncated")
        assert write_dead_records(target, source, 0, [_dead(source, 3), truncated], end=6) == 2
        other_job = replace(target, job="another", group="g2")
        assert write_dead_records(other_job, source, 1, [_dead(source, 0, partition=1)], 1) == 1
        wait_for(
            lambda: tally.counts() == {"bad-magic-byte": 1, "truncated": 1},
            TALLY_SECONDS,
            "this run's two copies counted",
        )
    finally:
        tally.close()


def test_a_tally_started_before_the_topic_exists_counts_from_its_start(kafka, source) -> None:
    target = replace(_target(kafka.bootstrap), topic=f"dead-later-{uuid.uuid4().hex[:6]}")
    tally = DeadLetterTally(target)
    try:
        assert tally.counts() == {}  # no topic yet: nothing written
        new_topic_named(kafka.bootstrap, target.topic)
        assert write_dead_records(target, source, 0, [_dead(source, 3)], end=4) == 1
        tally._next_start = 0.0  # its next look, without waiting out the retry interval
        wait_for(lambda: tally.counts() == {"bad-magic-byte": 1}, TALLY_SECONDS, "the first copy")
    finally:
        tally.close()


def test_a_tally_whose_first_start_failed_counts_the_copies_since_the_run_began(kafka, source):
    """The tally's first start finds no broker (away, or too slow to answer in 10 s); this
    run's copies written before its next start are counted all the same (found again by
    their time), the earlier run's copy is not (CI run 75: all were missed)."""
    target = _target(kafka.bootstrap)
    assert write_dead_records(target, source, 0, [_dead(source, 1)], end=2) == 1  # an earlier run's
    away = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "socket.timeout.ms": 1000}
    tally = DeadLetterTally(replace(target, client=away))
    try:
        assert tally.counts() == {}  # its first start failed (logged)
        assert tally._consumer is None and tally._tried
        assert write_dead_records(target, source, 0, [_dead(source, 3)], end=4) == 1
        tally.target, tally._next_start = target, 0.0  # the broker back: its next look
        wait_for(lambda: tally.counts() == {"bad-magic-byte": 1}, TALLY_SECONDS, "the copy")
    finally:
        tally.close()
