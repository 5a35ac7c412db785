"""The operator reads the group's committed offsets and the lag from a real broker."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devbed.polling import PATIENCE
from devbed.tls import Authority
from tests.integration.operator.kube_helpers import REPO, Kube, job_spec, wait_for
from tests.support.kafka_tools import commit_offsets

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
    # the session's broker may still be loading its offsets topic (NOT_COORDINATOR under load)
    commit_offsets(kafka.bootstrap, "op-lag-group", "op-lag", {0: 3})

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
from spark_app.api.source_spec import SourceSpec
from streamingjob_operator.io.kafka import KafkaMonitor, KafkaTarget
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

    from devbed.kafka_broker import KafkaBroker
    from tests.integration.operator.kube_helpers import REPO

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
    from spark_app.api.source_spec import SourceSpec
    from streamingjob_operator.io.kafka import KafkaMonitor, KafkaTarget
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


def test_closing_stops_a_reading_of_an_unreachable_cluster_after_its_attempt_in_flight():
    """A shutdown while a job's brokers do not answer: the reading in flight ends after its
    current attempt (a 1 s socket timeout), not after its 60 s deadline of retries, and no
    client is destroyed under it (the monitor waits for it)."""
    import time

    from devbed.ports import free_port
    from spark_app.api.source_spec import SourceSpec
    from streamingjob_operator.io.kafka import KafkaMonitor, KafkaTarget

    monitor = KafkaMonitor(workers=1, timeout=1, max_age=0, deadline=60)
    nobody = SourceSpec(bootstrap_servers=f"127.0.0.1:{free_port()}", subscribe=["t"], group_id="g")
    monitor.refresh(("ns", "down"), KafkaTarget.of(nobody, {}))
    time.sleep(3)  # well into the retries
    asked = time.monotonic()
    monitor.close()
    assert time.monotonic() - asked < 20  # an attempt (first 2 s, then 3 s, ...), not 60 s
    assert monitor.clients() == 0


# --- offsets actions (spec.offsetsAction) ----------------------------------------------------


def _request(kube: Kube, ns: str, name: str, action: dict, **spec) -> None:
    """Replaces spec.offsetsAction whole (a merge patch keeps the fields it does not name)."""
    whole = {"to": None, "timestamp": None, "partitions": None, **action}
    kube.patch_spec(ns, name, {"offsetsAction": whole, **spec})


def _offsets_action(kube: Kube, ns: str, name: str, nonce: int) -> dict:
    """The action's outcome once recorded. 60 s: a fresh operator reconciles every job the
    module's earlier tests left (their Kafka unreachable or refusing) before or beside this
    one, and an unreachable broker's action takes its own kafkaDeadlineSeconds; in CI run 80,
    at the start's load, it was recorded 30 s after the job's creation."""
    return wait_for(
        lambda: (
            (kube.status(ns, name).get("offsetsAction") or {}).get("nonce") == nonce
            and kube.status(ns, name)["offsetsAction"]
        ),
        60,
        f"offsets action {nonce} recorded",
    )


def test_offsets_actions_list_reset_alter_refusals_and_resume(
    kube: Kube, ns: str, operator: object, kafka
):
    """On a real broker and API server: an action is refused while the job runs (the driver
    stays); once suspended list, reset and alter act once per nonce, out-of-range is refused
    naming the partition and its range (nothing written), and the next resume starts a new
    epoch from the new offsets even under upgradeMode last-state."""
    from tests.support.kafka_tools import commit_offsets, group_offsets, new_topic, produce

    topic = new_topic(kafka.bootstrap, partitions=2, prefix="op-offsets")
    for partition in (0, 1):
        produce(kafka.bootstrap, topic, range(10), partition=partition)
    group = f"{topic}-group"
    commit_offsets(kafka.bootstrap, group, topic, {0: 4})  # partition 1: no commit yet
    spec = job_spec(upgradeMode="last-state")
    spec["job"]["source"].update(
        {"bootstrapServers": kafka.bootstrap, "subscribe": [topic], "groupId": group}
    )
    spec["offsetsAction"] = {"nonce": 1, "action": "reset", "to": "earliest"}
    kube.create_job(ns, "offs", spec)
    wait_for(lambda: kube.driver_names(ns) == ["offs-e1-a1-driver"], 30, "driver")

    # running: refused at once, nothing written, the driver untouched
    done = _offsets_action(kube, ns, "offs", 1)
    assert done["result"] == "Refused" and "not suspended" in done["message"]
    assert done["requestedBy"]  # the field manager of the create
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 4, 1: None}
    assert kube.driver_names(ns) == ["offs-e1-a1-driver"]
    cond = next(c for c in kube.status(ns, "offs")["conditions"] if c["type"] == "OffsetsAction")
    assert cond["status"] == "False" and cond["reason"] == "Refused"

    # suspend and list in one change: the action waits for the driver to go, then lists
    _request(kube, ns, "offs", {"nonce": 2, "action": "list"}, suspend=True)
    done = _offsets_action(kube, ns, "offs", 2)
    assert done["result"] == "Succeeded", done
    assert kube.status(ns, "offs")["phase"] == "Suspended"
    rows = {p["partition"]: p for p in done["partitions"]}
    assert rows[0] == {
        "topic": topic,
        "partition": 0,
        "before": 4,
        "after": 4,
        "logStart": 0,
        "logEnd": 10,
    }
    assert rows[1]["logEnd"] == 10 and "before" not in rows[1]  # no commit: absent
    listing = kube.core.read_namespaced_config_map(done["configMap"], ns)
    assert f'"topic": "{topic}"' in listing.data["offsets.json"]
    assert not kube.status(ns, "offs").get("offsetsActedSinceLaunch")  # list alters nothing

    # out of range: refused, naming the partition and its valid range; nothing written
    out_of_range = {
        "nonce": 3,
        "action": "alter",
        "partitions": [
            {"topic": topic, "partition": 0, "offset": 5},
            {"topic": topic, "partition": 1, "offset": 11},
        ],
    }
    _request(kube, ns, "offs", out_of_range)
    done = _offsets_action(kube, ns, "offs", 3)
    assert (
        done["result"] == "Refused" and f"{topic}-1 offset 11 is outside [0, 10]" in done["message"]
    )
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 4, 1: None}

    # reset one partition to earliest, then alter: each runs once
    earliest = {
        "nonce": 4,
        "action": "reset",
        "to": "earliest",
        "partitions": [{"topic": topic, "partition": 1}],
    }
    _request(kube, ns, "offs", earliest)
    assert _offsets_action(kube, ns, "offs", 4)["result"] == "Succeeded"
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 4, 1: 0}
    alter = {
        "nonce": 5,
        "action": "alter",
        "partitions": [{"topic": topic, "partition": 0, "offset": 7}],
    }
    _request(kube, ns, "offs", alter)
    done = _offsets_action(kube, ns, "offs", 5)
    assert done["result"] == "Succeeded"
    assert [(p["before"], p["after"]) for p in done["partitions"]] == [(4, 7)]
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 7, 1: 0}
    st = kube.status(ns, "offs")
    assert st["offsetsActedSinceLaunch"] is True
    kube.wait_for_events(
        ns, "offs", {"OffsetsRefused", "OffsetsListed", "OffsetsReset", "OffsetsAltered"}
    )

    # the same nonce never runs again: another spec change is reconciled, the offsets stay
    commit_offsets(kafka.bootstrap, group, topic, {0: 9})
    kube.patch_spec(ns, "offs", {"restartPolicy": {"stableRunSeconds": 7}})
    generation = kube.job(ns, "offs")["metadata"]["generation"]
    wait_for(
        lambda: kube.status(ns, "offs").get("observedGeneration") == generation,
        30,
        "the change reconciled",
    )
    assert kube.status(ns, "offs")["offsetsAction"]["time"] == done["time"]
    assert group_offsets(kafka.bootstrap, group, topic) == {0: 9, 1: 0}

    # resume: a new epoch (fresh start from the group's offsets), even under last-state
    kube.patch_spec(ns, "offs", {"suspend": False})
    wait_for(lambda: kube.driver_names(ns) == ["offs-e2-a1-driver"], 30, "epoch 2 driver")
    history = [h["message"] for h in kube.status(ns, "offs")["history"]]
    assert any("after an offsets action" in m for m in history), history


def test_an_offsets_action_kafka_does_not_answer_fails_with_the_broker_named(
    kube: Kube, ns: str, operator: object
):
    """A job created suspended (never launched) asks for a list on a broker nobody listens
    on: Failed, naming the broker, with a Warning Event; nothing launches."""
    spec = job_spec(suspend=True, offsetsAction={"nonce": 1, "action": "list"})
    kube.create_job(ns, "nobroker", spec)
    done = _offsets_action(kube, ns, "nobroker", 1)
    assert done["result"] == "Failed", done
    assert "127.0.0.1:1" in done["message"] and "nothing written" in done["message"]
    events = kube.wait_for_events(ns, "nobroker", {"OffsetsFailed"})
    assert all(e.type == "Warning" for e in events if e.reason == "OffsetsFailed")
    assert kube.status(ns, "nobroker")["phase"] == "Suspended"
    assert kube.driver_names(ns) == []


def test_a_resume_while_kafka_applies_the_action_still_starts_a_new_epoch(
    kube: Kube, apiserver, ns: str, kafka
):
    """The user resumes while the reset is being committed (a real commit on the real broker,
    the resume patched in between): the outcome is still recorded (status conflict → the job
    read again) and the resume starts epoch 2 from the new offsets, under last-state."""
    from streamingjob_operator.io.k8s import KubeApi
    from streamingjob_operator.io.kafka import run_offsets_action
    from streamingjob_operator.reconcile import Reconciler
    from streamingjob_operator.settings import OperatorSettings
    from tests.integration.operator.kube_helpers import operator_env
    from tests.support.kafka_tools import commit_offsets, group_offsets, new_topic, produce

    topic = new_topic(kafka.bootstrap, partitions=1, prefix="op-race")
    produce(kafka.bootstrap, topic, range(10), partition=0)
    commit_offsets(kafka.bootstrap, f"{topic}-g", topic, {0: 6})
    spec = job_spec(upgradeMode="last-state")
    spec["job"]["source"].update(
        {"bootstrapServers": kafka.bootstrap, "subscribe": [topic], "groupId": f"{topic}-g"}
    )
    kube.create_job(ns, "race", spec)
    with operator_env(apiserver.kubeconfig):
        reconciler = Reconciler(KubeApi(), OperatorSettings.from_env())
        reconciler.reconcile(ns, "race")
        assert kube.driver_names(ns) == ["race-e1-a1-driver"]
        resumed = []

        def resumed_meanwhile(target, request, timeout, deadline):
            # committed on the broker
            result = run_offsets_action(target, request, timeout, deadline)
            kube.patch_spec(ns, "race", {"suspend": False})
            resumed.append(True)
            return result

        reconciler.offsets.runner = resumed_meanwhile
        _request(kube, ns, "race", {"nonce": 1, "action": "reset", "to": "earliest"}, suspend=True)
        for _ in range(5):  # stop, Suspended, the action, then (spec changed) the resume
            reconciler.reconcile(ns, "race")
            if resumed and kube.driver_names(ns):
                break
    assert resumed == [True]
    assert group_offsets(kafka.bootstrap, f"{topic}-g", topic) == {0: 0}
    st = kube.status(ns, "race")
    assert st["offsetsAction"]["result"] == "Succeeded", st["offsetsAction"]
    assert kube.driver_names(ns) == ["race-e2-a1-driver"], json.dumps(st)  # new epoch, no restore
    assert st.get("previousCheckpointLocation", "") == ""  # the action wins over catch-up
    assert not st.get("offsetsActedSinceLaunch")  # consumed by that launch


# --- per-job metrics and the chart's alert rules (promtool) ----------------------------------

ALERT_RULES = REPO / "charts" / "streamingjob-operator" / "files" / "alerts.yaml"
JOB_SERIES = (
    "streamingjob_consumer_",
    "streamingjob_job_",
    "streamingjob_seconds_since_progress",
    "streamingjob_offset_commit_failures",
    "streamingjob_dead_letter_records",
)


def promtool_binary() -> str:
    """promtool built from its Go module (scripts/k8s-toolchain.sh promtool, cached)."""
    import subprocess

    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "k8s-toolchain.sh"), "promtool"],
        capture_output=True,
        text=True,
        check=True,
        timeout=1200,
    )
    return f"{out.stdout.strip().splitlines()[-1]}/promtool"


def scrape(port: int, ns: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The per-job samples of namespace `ns` on the operator's /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    # a bound of progress like every wait's: stretched by the tests' patience (devbed/polling.py)
    address = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(address, timeout=10 * PATIENCE) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(JOB_SERIES) and s.labels.get("namespace") == ns
    }


def value(sample: dict, name: str, **labels: str) -> float | None:
    return next(
        (v for (n, ls), v in sample.items() if n == name and labels.items() <= dict(ls).items()),
        None,
    )


def promtool_series(scrapes: list[dict]) -> list[dict[str, str]]:
    """Scrape i becomes minute i of promtool's input (a missing sample: `_`)."""
    keys = sorted({key for sample in scrapes for key in sample})
    series = []
    for name, labels in keys:
        selector = ",".join(f'{k}="{v}"' for k, v in labels)
        values = [sample.get((name, labels)) for sample in scrapes]
        text = " ".join(
            "_" if v is None else f"{v:g}" if v != int(v) else str(int(v)) for v in values
        )
        series.append({"series": f"{name}{{{selector}}}", "values": text})
    return series


def test_job_metrics_and_alert_rules_on_a_real_operator(
    apiserver, kube: Kube, ns: str, kafka, tmp_path
):
    """The operator's per-job metrics from real readings of a real broker, scraped at each
    step while the jobs evolve (records produced, offsets committed, a driver failing until
    Failed); the scrapes become promtool's input series, minute by minute, and the chart's
    alert rules must fire exactly for: the stalled job (lag growing, no progress), the slow
    one (lag growing, records dead-lettered), the failing one (Failed, Degraded, restarting
    often); never for the idle job. A deleted job's series go."""
    import subprocess

    import yaml

    from devbed.ports import free_port
    from tests.integration.operator.kube_helpers import running_operator
    from tests.support.kafka_tools import commit_offsets, new_topic, produce

    promtool = promtool_binary()
    port = free_port()
    topics = {
        name: new_topic(kafka.bootstrap, 1, f"al-{name}")
        for name in ("stalled", "slow", "idle", "crashing")
    }
    for name in ("stalled", "slow", "idle"):
        produce(kafka.bootstrap, topics[name], range(10), partition=0)
    committed = {"stalled": 3, "slow": 3, "idle": 10}
    for name, offset in committed.items():
        commit_offsets(kafka.bootstrap, f"{topics[name]}-g", topics[name], {0: offset})
    for name, topic in topics.items():
        spec = job_spec()
        spec["job"]["source"].update(
            {"bootstrapServers": kafka.bootstrap, "subscribe": [topic], "groupId": f"{topic}-g"}
        )
        spec["restartPolicy"]["maxRestarts"] = 3
        spec["restartPolicy"]["backoff"] = {"baseSeconds": 0.2, "capSeconds": 0.5}
        kube.create_job(ns, name, spec)

    fast = {"STREAMINGJOB_RESYNC_SECONDS": "0.3", "STREAMINGJOB_KAFKA_POLL_SECONDS": "0.2"}
    with running_operator(apiserver.kubeconfig, STREAMINGJOB_METRICS_PORT=str(port), **fast):
        for name in ("stalled", "slow", "idle"):
            driver = f"{name}-e1-a1-driver"
            wait_for(lambda d=driver: d in kube.driver_names(ns), 30, driver)
            kube.set_running(ns, driver)

        def ready():
            sample = scrape(port, ns)
            running = [
                value(sample, "streamingjob_job_phase", job=n, phase="Running")
                for n in ("stalled", "slow", "idle")
            ]
            lags = [value(sample, "streamingjob_consumer_lag", job=n) for n in topics]
            return running == [1, 1, 1] and None not in lags and sample

        scrapes = [wait_for(ready, 30, "the first readings")]
        assert value(scrapes[0], "streamingjob_consumer_lag", job="stalled") == 7
        assert value(scrapes[0], "streamingjob_consumer_lag", job="idle") == 0
        steps = 16
        for step in range(1, steps):
            produce(kafka.bootstrap, topics["stalled"], range(5), partition=0)
            produce(kafka.bootstrap, topics["slow"], range(5), partition=0)
            committed["slow"] += 2
            commit_offsets(
                kafka.bootstrap, f"{topics['slow']}-g", topics["slow"], {0: committed["slow"]}
            )
            # slow's driver reports one more record sent to its dead-letter topic each step
            report = {"epoch": 1, "attempt": 1, "deadLetterRecords": {"truncated": step}}
            kube.core.patch_namespaced_config_map(
                "slow-report", ns, {"data": {"report.json": json.dumps(report)}}
            )
            if step <= 4:  # attempts 1-3 fail and are restarted; the 4th failure is one too many
                driver = f"crashing-e1-a{step}-driver"
                # a bound for progress, not a speed: four jobs' first launches beside the
                # other sessions' start took over 30 s in run 73
                wait_for(lambda d=driver: d in kube.driver_names(ns), 90, driver)
                kube.set_terminated(ns, driver, 1)
            previous = scrapes[-1]

            def moved(previous=previous, step=step):
                sample = scrape(port, ns)
                grew = all(
                    (value(sample, "streamingjob_consumer_lag", job=n) or 0)
                    > (value(previous, "streamingjob_consumer_lag", job=n) or 0)
                    for n in ("stalled", "slow")
                )
                slow_done = value(sample, "streamingjob_consumer_committed_offset", job="slow")
                dead = value(sample, "streamingjob_dead_letter_records", job="slow")
                restarts = sum(
                    v
                    for (n, ls), v in sample.items()
                    if n == "streamingjob_job_restarts_total" and ("job", "crashing") in ls
                )
                failed = value(sample, "streamingjob_job_phase", job="crashing", phase="Failed")
                crashing = restarts == min(step, 3) and (step < 4 or failed == 1)
                return (
                    grew and slow_done == committed["slow"] and dead == step and crashing and sample
                )

            scrapes.append(wait_for(moved, 30, f"step {step} in the metrics"))

        last = scrapes[-1]
        assert value(last, "streamingjob_consumer_lag", job="stalled") == 10 + 5 * (steps - 1) - 3
        assert value(last, "streamingjob_consumer_log_end_offset", job="slow") == 10 + 5 * (
            steps - 1
        )
        assert value(last, "streamingjob_job_degraded", job="crashing") == 1
        assert (
            value(last, "streamingjob_job_restarts_total", job="crashing", reason="DriverFailed")
            == 3
        )
        assert (value(last, "streamingjob_seconds_since_progress", job="stalled") or 0) > 0

        # the rules on the real series: exactly these alerts fire at the last minute
        firing = [
            ("StreamingJobLagGrowing", "stalled", "warning", {}),
            ("StreamingJobNoProgress", "stalled", "critical", {}),
            ("StreamingJobLagGrowing", "slow", "warning", {}),
            ("StreamingJobFailed", "crashing", "critical", {"phase": "Failed"}),
            ("StreamingJobDegraded", "crashing", "warning", {}),
            ("StreamingJobRestartingOften", "crashing", "warning", {}),
            ("StreamingJobDeadLetters", "slow", "warning", {"reason": "truncated"}),
        ]
        expected = []
        for alert, job, severity, extra in firing:
            labels = {
                "alertname": alert,
                "alertstate": "firing",
                "severity": severity,
                "namespace": ns,
                "job": job,
                **extra,
            }
            selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            expected.append({"labels": f"ALERTS{{{selector}}}", "value": 1})
        test_file = tmp_path / "alerts-test.yaml"
        test_file.write_text(
            yaml.safe_dump(
                {
                    "rule_files": [str(ALERT_RULES)],
                    "evaluation_interval": "1m",
                    "tests": [
                        {
                            "interval": "1m",
                            "input_series": promtool_series(scrapes),
                            "promql_expr_test": [
                                {
                                    "expr": 'ALERTS{alertstate="firing"}',
                                    "eval_time": f"{steps - 1}m",
                                    "exp_samples": expected,
                                },
                                {  # and nothing at all fires before the first minute
                                    "expr": 'ALERTS{alertstate="firing"}',
                                    "eval_time": "0m",
                                    "exp_samples": [],
                                },
                            ],
                        }
                    ],
                },
                sort_keys=False,
            )
        )
        check = subprocess.run(
            [promtool, "check", "rules", str(ALERT_RULES)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        run = subprocess.run(
            [promtool, "test", "rules", str(test_file)], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stdout + run.stderr

        # a deleted job's series go
        kube.delete_job(ns, "idle")
        wait_for(
            lambda: not any(("job", "idle") in ls for _n, ls in scrape(port, ns)),
            30,
            "idle's series gone",
        )
