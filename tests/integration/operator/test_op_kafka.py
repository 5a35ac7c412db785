"""The operator reads the group's committed offsets and the lag from a real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_committed_offsets_and_lag_in_status(kube: Kube, ns: str, operator: object, kafka):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("op-lag", num_partitions=2, replication_factor=1)])[
        "op-lag"
    ].result(30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        producer.produce("op-lag", value=str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "op-lag-group"})
    consumer.commit(offsets=[TopicPartition("op-lag", 0, 3)], asynchronous=False)
    consumer.close()

    spec = job_spec()
    spec["job"]["source"].update(
        {"bootstrapServers": kafka.bootstrap, "subscribe": ["op-lag"], "groupId": "op-lag-group"}
    )
    kube.create_job(ns, "lagging", spec)
    st = wait_for(
        lambda: kube.status(ns, "lagging").get("lag") is not None and kube.status(ns, "lagging"),
        60,
        "lag in status",
    )
    assert st["committedOffsets"] == {"op-lag": {"0": 3}}
    assert st["lag"] == (5 - 3) + 5  # partition 1 has no commit: all 5 count

    spec = job_spec()
    spec["job"]["source"].update(
        {"bootstrapServers": kafka.bootstrap, "subscribe": ["no-such-topic"], "groupId": "g"}
    )
    kube.create_job(ns, "notopic", spec)

    def degraded():
        conditions = kube.status(ns, "notopic").get("conditions") or []
        return next(
            (c for c in conditions if c["type"] == "Degraded" and c["status"] == "True"), None
        )

    cond = wait_for(degraded, 60, "Degraded for the unknown topic")
    assert cond["reason"] == "KafkaUnavailable"
    assert "spec.job.source.subscribe" in cond["message"] and "no-such-topic" in cond["message"]
    # the job itself is still launched: Kafka may come back, the driver retries on its own
    wait_for(lambda: "notopic-e1-a1-driver" in kube.driver_names(ns), 30, "notopic driver")
