"""The operator reads the group's committed offsets and the lag from a real broker."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for
from tests.support.tls import Authority

TMP = Path(tempfile.mkdtemp(prefix="op-kafka-"))

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_committed_offsets_and_lag_in_status(kube: Kube, ns: str, operator: object, kafka):
    """Read over SASL_SSL with the job's Secrets (SCRAM-SHA-512, a CA of the test's own)."""
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

    kube.create_secret(
        ns, "kafka-login", {"username": kafka.SASL_USER, "password": kafka.sasl_password}
    )
    kube.create_secret(ns, "kafka-ca", {"ca.crt": kafka.ca_pem})
    spec = secured_spec(kafka.secured_bootstrap, "op-lag", "op-lag-group")
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


def secured_spec(
    bootstrap: str, topic: str, group: str, login: str = "kafka-login", ca: str = "kafka-ca"
) -> dict:
    spec = job_spec(kafkaCredentials={"secretName": login, "caSecret": {"name": ca}})
    spec["job"]["source"].update(
        {"bootstrapServers": bootstrap, "subscribe": [topic], "groupId": group}
    )
    return spec


def test_refused_credentials_are_degraded_naming_the_secret_with_restart_backoff(
    kube: Kube, ns: str, operator: object, kafka
):
    """A wrong password: the lag reader's condition names the Secret and the cause; the
    driver's exit 3 (the runner's preflight) is a restart with backoff, not a storm. An
    untrusted CA is KafkaTLSFailed naming the CA Secret. No password in status or Events."""
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    new = NewTopic("op-refused", num_partitions=1, replication_factor=1)
    admin.create_topics([new])["op-refused"].result(30)
    kube.create_secret(ns, "wrong-login", {"username": kafka.SASL_USER, "password": "nope-123"})
    kube.create_secret(
        ns, "kafka-login", {"username": kafka.SASL_USER, "password": kafka.sasl_password}
    )
    kube.create_secret(ns, "kafka-ca", {"ca.crt": kafka.ca_pem})
    kube.create_secret(ns, "other-ca", {"ca.crt": Authority.create(TMP / ns).pem})  # untrusted
    bootstrap = kafka.secured_bootstrap
    kube.create_job(ns, "refused", secured_spec(bootstrap, "op-refused", "g", "wrong-login"))
    kube.create_job(ns, "untrusted", secured_spec(bootstrap, "op-refused", "g", ca="other-ca"))

    def degraded(name: str, reason: str):
        def probe():
            conditions = kube.status(ns, name).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Degraded"), {}).get(
                "reason"
            ) == reason and kube.status(ns, name)

        return probe

    st = wait_for(degraded("untrusted", "KafkaTLSFailed"), 60, "KafkaTLSFailed")
    cond = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert "spec.kafkaCredentials.caSecret (Secret 'other-ca', key 'ca.crt')" in cond["message"]
    assert "certificate verify failed" in cond["message"]

    wait_for(degraded("refused", "KafkaAuthFailed"), 60, "KafkaAuthFailed from the lag reader")
    st = kube.status(ns, "refused")
    cond = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert "spec.kafkaCredentials.secretName (Secret 'wrong-login')" in cond["message"]
    assert "authentication failed (SASL)" in cond["message"]

    # the driver's runner refuses too (exit 3, its termination message): backoff, no storm
    wait_for(lambda: "refused-e1-a1-driver" in kube.driver_names(ns), 30, "refused driver")
    runner_says = (
        "spec.kafkaCredentials.secretName (Secret 'wrong-login'): Kafka at "
        f"{kafka.secured_bootstrap}: authentication failed (SASL)"
    )
    kube.set_terminated(ns, "refused-e1-a1-driver", 3, message=runner_says)
    st = wait_for(
        lambda: (
            (s := kube.status(ns, "refused")).get("lastRestartReason") == "KafkaAuthFailed" and s
        ),
        60,
        "a restart for KafkaAuthFailed",
    )
    assert st["nextRetryTime"], st  # a delay before the next attempt (restartPolicy.backoff)
    backoff = [h for h in st["history"] if h["reason"] == "BackOff"]
    assert runner_says in backoff[-1]["message"]
    wait_for(lambda: "refused-e1-a2-driver" in kube.driver_names(ns), 30, "the next attempt")
    events = [e.message or "" for e in kube.events(ns)]
    assert any("KafkaAuthFailed" in m and "wrong-login" in m for m in events), events
    for name in ("refused", "untrusted"):
        assert kafka.sasl_password not in str(kube.job(ns, name))
        assert "nope-123" not in str(kube.job(ns, name))
    assert not any(kafka.sasl_password in m or "nope-123" in m for m in events)


# --- the operator's Kafka reader on its own (no API server) ---------------------------------

# Run in a process of its own: a crash in librdkafka kills the process, not the test. It reads
# the committed offsets of several jobs (each its own group) as soon as the broker is up and
# the topic is being created, again and again for a while, as a fresh install does.
FRESH_BROKER_READER = r"""
import faulthandler, sys, time
faulthandler.enable()
from spark_app.manifest import SourceSpec
from streamingjob_operator.kafka import KafkaMonitor, KafkaTarget
jobs, seconds = int(sys.argv[1]), float(sys.argv[2])
print("ready", flush=True)
bootstrap, topic = sys.stdin.readline().split()
monitor = KafkaMonitor(workers=jobs, timeout=5, max_age=0)
targets = {
    ("ns", f"j{i}"): KafkaTarget.of(
        SourceSpec(bootstrap_servers=bootstrap, subscribe=[topic], group_id=f"g{i}-{topic}"), {}
    )
    for i in range(jobs)
}
deadline = time.monotonic() + seconds
while time.monotonic() < deadline or not all(
    (v := monitor.view(k)) is not None and v.committed is not None for k in targets
):
    assert time.monotonic() < deadline + 30, {k: monitor.view(k) for k in targets}
    for key, target in targets.items():
        monitor.refresh(key, target)
    time.sleep(0.005)
assert monitor.clients() == jobs
for key in targets:
    monitor.forget(key)
monitor.close()
assert monitor.clients() == 0
print("ok", flush=True)
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("round_", range(2))
def test_readings_on_a_fresh_broker_whose_topic_was_just_created_do_not_crash(tmp_path, round_):
    """The kind install that crashed: the operator read a job's committed offsets with the
    admin API right after the broker started and the topic was created; an OffsetFetch
    answer asking to re-query the coordinator made librdkafka's admin client dereference its
    absent consumer group handle (SIGSEGV in rdk:main). Each round is a fresh broker."""
    import subprocess
    import sys

    from tests.integration.operator.kube_helpers import REPO
    from tests.support.kafka_broker import KafkaBroker

    reader = subprocess.Popen(
        [sys.executable, "-c", FRESH_BROKER_READER, "8", "6"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'operator'}"},
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        with KafkaBroker(tmp_path / "broker") as broker:
            topic = "fresh"
            assert reader.stdin is not None
            reader.stdin.write(f"{broker.bootstrap} {topic}\n")
            reader.stdin.flush()
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[
                topic
            ].result(30)
            out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert reader.returncode == 0 and out.strip().endswith("ok"), (
        f"reader exited {reader.returncode} (-11 = SIGSEGV)\n{out}\n{err[-3000:]}"
    )


def test_patterns_hide_internal_topics_and_clients_are_shared_per_connection(kafka):
    """The operator's look-ups are the source's: a pattern never matches `__` topics (the
    offsets topic would count as lag), and jobs with the same connection share one client,
    closed when the last of them is forgotten."""
    from spark_app.manifest import SourceSpec
    from streamingjob_operator.kafka import KafkaMonitor, KafkaTarget
    from tests.support.kafka_tools import commit_offsets, new_topic, produce

    topic = new_topic(kafka.bootstrap, partitions=2, prefix="op-pat")
    produce(kafka.bootstrap, topic, range(10))
    commit_offsets(kafka.bootstrap, "pat-group", topic, {0: 1})  # creates __consumer_offsets
    pattern = SourceSpec(
        bootstrap_servers=kafka.bootstrap,
        subscribe_pattern=f"__consumer_offsets|{topic}",
        group_id="pat-group",
    )
    other_group = pattern.model_copy(update={"group_id": "other-group"})
    monitor = KafkaMonitor(workers=2, timeout=5, max_age=0)
    try:
        jobs = {("ns", "a"): pattern, ("ns", "b"): pattern, ("ns", "c"): other_group}
        for key, source in jobs.items():
            monitor.refresh(key, KafkaTarget.of(source, {}))
        wait_for(lambda: all(monitor.view(k) is not None for k in jobs), 30, "three readings")
        view = monitor.view(("ns", "a"))
        assert view is not None
        assert view.problem is None and set(view.end) == {topic}
        assert view.committed == {topic: {"0": 1}}
        assert monitor.clients() == 2  # a and b share theirs
        monitor.forget(("ns", "a"))
        assert monitor.clients() == 2
        monitor.forget(("ns", "b"))
        monitor.forget(("ns", "c"))
        wait_for(lambda: monitor.clients() == 0, 10, "idle clients closed")
    finally:
        monitor.close()
