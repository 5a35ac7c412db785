"""Reads across leader epochs on a real broker (semantics rule 16): a batch planned before an
unclean leader election whose read meets the new leader's records below its end.

An unclean election cannot be made on one broker, but what a read then meets can: a
broker's restart starts a later leader epoch, so a log of epoch 0's records followed by the
later epoch's is, to a batch planned in epoch 0 up to past them, the log an unclean
election leaves (truncated where the later leader's records begin, written again by it)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from devbed.kafka_broker import KafkaBroker
from spark_app.api import offsets as off
from spark_app.api.dead_letter_options import DeadLetterTarget
from spark_app.formats.poison import DeadRecord
from spark_app.sinks.dead_letter import read_name, write_dead_records
from spark_app.source.leader_epochs import log_end_of_epoch
from spark_app.source.partition_range import DataLossError, KafkaInputPartition
from spark_app.source.partition_reader import read_range
from tests.integration.spark_app.test_source_on_broker import on_path, read_all, reader
from tests.support.kafka_tools import consume_to_end, new_topic, produce

pytestmark = pytest.mark.integration

PATHS = ("fetch", "librdkafka", "python")


@pytest.fixture(scope="module")
def later_leader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict]]:
    """A broker and a topic per read path: offsets 0..4 of leader epoch 0, then 5..12 of the
    epoch the broker's restart started; "two" has a second partition, of 3 records of the
    later epoch only; "idle-<path>" only epoch 0's five."""
    with KafkaBroker(Path(tmp_path_factory.mktemp("epochs")) / "broker") as broker:
        topics = {name: new_topic(broker.bootstrap, partitions=1) for name in PATHS}
        topics["two"] = new_topic(broker.bootstrap, partitions=2)
        idle = {f"idle-{path}": new_topic(broker.bootstrap, partitions=1) for path in PATHS}
        for topic in [*topics.values(), *idle.values()]:
            produce(broker.bootstrap, topic, range(5), partition=0)
        broker.stop()
        broker.start()
        for topic in topics.values():
            produce(broker.bootstrap, topic, range(5, 13), partition=0)
        produce(broker.bootstrap, topics["two"], range(3), partition=1)
        yield broker.bootstrap, {**topics, **idle}


def ids(rows: list[dict]) -> list[int]:
    return [json.loads(row["value"])["id"] for row in rows]


@pytest.mark.parametrize("read_path", PATHS)
def test_a_read_planned_before_an_unclean_election_ends_where_the_new_leader_begins(
    later_leader, read_path, caplog
):
    """Batch N planned [0, 10) in leader epoch 0; the new leader's records begin at 5. N reads
    0..4 and ends there, saying why; N+1 ([10, 13), its start validated with N's end epoch)
    goes back to 5 and reads the new leader's records once (failOnDataLoss=false), or fails
    naming the truncation (true). Read on to 9, N would have read 5..9 and N+1 again."""
    bootstrap, topics = later_leader
    topic = topics[read_path]
    tp = (topic, 0)
    lenient = reader(bootstrap, topic, read_path, failOnDataLoss="false")
    start = off.batch_offset({tp: 0}, epochs={tp: 0})
    planned = off.batch_offset({tp: 10}, epochs={tp: 0})
    with caplog.at_level(logging.WARNING, logger="spark_app.source"):
        assert ids(read_all(lenient, start, planned)) == list(range(5))
    assert f"{topic}-0: offsets from 5 on were written by a leader elected after" in caplog.text

    after = lenient.latestOffset(planned, ReadAllAvailable())
    assert off.end_positions(after) == {tp: 13}
    assert ids(read_all(lenient, planned, after)) == list(range(5, 13))
    lenient.stop()

    strict = reader(bootstrap, topic, read_path)
    with pytest.raises(DataLossError, match=rf"{topic}-0: the log was truncated .* 5\.\.9 "):
        read_all(strict, planned, after)
    strict.stop()


@pytest.mark.parametrize("read_path", PATHS)
def test_a_read_planned_past_where_an_unclean_election_cut_the_log_ends_there(
    later_leader, read_path, caplog
):
    """Simulation seed 215: batch N planned [0, 10) in leader epoch 0; an unclean election
    cut the log to 5 and the new leader has written nothing since (an idle topic). The read
    takes 0..4 and makes no progress; after pollTimeoutMs it asks where epoch 0's log ends
    (5, at its position) and ends, instead of failing and waiting again after each restore.
    (A stall with no epoch known fails: test_source_on_broker.py's
    `test_a_range_that_makes_no_progress_fails_naming_the_partition`.)"""
    bootstrap, topics = later_leader
    planned = KafkaInputPartition(
        topics[f"idle-{read_path}"],
        0,
        0,
        10,
        {"bootstrap.servers": bootstrap},
        end_epoch=0,
        poll_timeout_ms=2000,
    )
    with caplog.at_level(logging.WARNING, logger="spark_app.source"):
        read = [o for b in read_range(on_path(planned, read_path)) for o in b.column("offset")]
    assert [o.as_py() for o in read] == list(range(5))
    assert "the log of leader epoch 0 (the plan's) ends at or below 5 now" in caplog.text


def test_a_partition_a_batch_leaves_where_it_was_keeps_the_epoch_it_was_read_in(later_leader):
    """Simulation seed 204: a position read in leader epoch 0's log, at today's log end (the
    later leader's), while another partition moves. Stamped with today's epoch, the next read
    would validate nothing and the later leader's records below it would go unread; it keeps
    epoch 0, and the read that starts there goes back to where epoch 0's log ends."""
    bootstrap, topics = later_leader
    topic = topics["two"]
    read = off.batch_offset({(topic, 0): 13, (topic, 1): 0}, epochs={(topic, 0): 0})
    source = reader(bootstrap, topic, "python", failOnDataLoss="false")
    planned = source.latestOffset(read, ReadAllAvailable())
    source.stop()
    assert off.end_positions(planned) == {(topic, 0): 13, (topic, 1): 3}
    assert off.end_epochs(planned)[(topic, 0)] == 0


def test_a_dead_letter_progress_counts_only_what_its_leaders_log_still_holds(later_leader):
    """Simulation seeds 775 and 896: a read planned in epoch 0 handled 0..9 and dead-lettered
    its poison records 3 and 8 (progress 10). After an unclean election the new leader's
    records begin at 5, and an offsets action moved the group back to 0: the redeploy's read,
    planned in the later epoch, asks where epoch 0's log ends now (5). Its record 3 was
    written before; 7 (the new leader's, below the progress) and 11 are written, each once."""
    bootstrap, topics = later_leader
    topic = topics["librdkafka"]  # read by nothing else that writes
    p = KafkaInputPartition(topic, 0, 0, 13, {"bootstrap.servers": bootstrap}, end_epoch=2)
    assert log_end_of_epoch(p, 0, 10) == 5
    assert (log_end_of_epoch(p, 0, 4), log_end_of_epoch(p, 2, 10)) == (4, 10)
    target = DeadLetterTarget(
        topic=new_topic(bootstrap, partitions=1, prefix="dead"),
        client={"bootstrap.servers": bootstrap},
        job="orders",
        epoch=3,
        group=f"{topic}-g",
    )

    def dead(offset: int) -> DeadRecord:
        return DeadRecord(topic, 0, offset, None, None, b"\x07%d" % offset, "bad-magic-byte", "")

    def ask(epoch: int, offset: int) -> int:
        return log_end_of_epoch(p, epoch, offset)

    first = read_name(0, 0, 0)
    assert write_dead_records(target, topic, 0, [dead(3), dead(8)], 10, first, ask) == 2
    again = [dead(3), dead(7), dead(11)]
    assert write_dead_records(target, topic, 0, again, 13, read_name(0, 0, 2), ask) == 2
    assert write_dead_records(target, topic, 0, again, 13, read_name(0, 0, 2), ask) == 0
    written = consume_to_end(bootstrap, target.topic, "read_committed")
    assert sorted(m.value() for m in written) == [b"\x0711", b"\x073", b"\x077", b"\x078"]
