"""The replicated cluster bed does what the chaos tests rely on: leaders move when a node dies
or stops, acknowledged records survive, a reassignment and a preferred-leader election move
leaders back. On the default broker version in every run (the chaos tests' own), also on the
oldest supported one under `make test-versions` (STREAMJOB_BROKER_MATRIX=full)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devbed.kafka_cluster import KafkaCluster
from devbed.kafka_jars import kafka_version
from devbed.kafka_versions import OLDEST, full_matrix
from devbed.polling import wait_for
from tests.support.kafka_tools import consume_values, new_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.broker_versions]


@pytest.fixture(
    params=[OLDEST, kafka_version()] if full_matrix() else [kafka_version()], scope="module"
)
def cluster(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[KafkaCluster]:
    with KafkaCluster(Path(tmp_path_factory.mktemp("cluster")), version=request.param) as c:
        yield c


def test_leaders_move_and_acknowledged_records_survive_node_loss(cluster: KafkaCluster) -> None:
    topic = new_topic(cluster.bootstrap, partitions=3, replicas=3)
    cluster.wait_in_sync(topic)
    acks_all = {"acks": "all", "enable.idempotence": True}
    produce(cluster.bootstrap, topic, range(300), **acks_all)
    victim = cluster.node_leading_most(topic)
    with cluster.outage(victim, kill=True):
        produce(cluster.bootstrap, topic, range(300, 600), **acks_all)
        assert victim not in cluster.leaders(topic).values()
    cluster.wait_in_sync(topic)
    stopped = cluster.node_leading_most(topic)
    with cluster.outage(stopped, kill=False):  # controlled shutdown moves leaders first
        assert stopped not in cluster.leaders(topic).values()
    cluster.wait_in_sync(topic)
    ids = [json.loads(v)["id"] for v in consume_values(cluster.bootstrap, topic)]
    assert sorted(ids) == list(range(600))  # every acknowledged record, once


def test_reassignment_and_preferred_election_move_leaders(cluster: KafkaCluster) -> None:
    topic = new_topic(cluster.bootstrap, partitions=2, replicas=3)
    cluster.wait_in_sync(topic)
    cluster.reassign(topic, {0: [3, 1, 2], 1: [2, 3, 1]})
    cluster.elect_preferred_leaders(topic)
    # each node applies the controller's metadata records in its own time, and a look-up asks
    # any node: one that lags still names the old leader a moment (CI run 57, loaded: 1 for 3)
    moved = {0: 3, 1: 2}
    wait_for(lambda: cluster.leaders(topic) == moved, 30, f"look-ups to name leaders {moved}")
