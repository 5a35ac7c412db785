"""What a group commit hands the Kafka client: each offset with the leader epoch kept beside
it where one is known, and none where it is not (an offsets action's, a moved position's)."""

from __future__ import annotations

import pytest

from spark_app.kafka.group_commits import commit_sync

pytestmark = pytest.mark.unit


class _Consumer:
    """The client's commit, recording what it was handed (the client's own TopicPartition)."""

    def __init__(self) -> None:
        self.sent: list = []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.sent = offsets
        return offsets


def test_each_offset_goes_with_its_leader_epoch_or_none():
    consumer = _Consumer()
    commit_sync(consumer, {("t", 0): 10, ("t", 1): 7}, {("t", 0): 3})  # type: ignore[arg-type]
    sent = {(tp.topic, tp.partition): (tp.offset, tp.leader_epoch) for tp in consumer.sent}
    assert sent == {("t", 0): (10, 3), ("t", 1): (7, None)}
    commit_sync(consumer, {("t", 0): 4})  # type: ignore[arg-type]  # an offsets action's
    assert [(tp.offset, tp.leader_epoch) for tp in consumer.sent] == [(4, None)]
