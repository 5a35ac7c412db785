"""Whole jobs: the runner as a real process on local Spark against a real broker.

Every test reads the sink's committed output and the group's offsets from Kafka itself.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from devbed.kafka_broker import KafkaBroker
from devbed.kafka_versions import driver_kill_versions, version_id
from devbed.object_store import Storage
from devbed.polling import wait_for
from devbed.ports import free_port
from devbed.tls import Authority
from spark_app.api.exit_codes import REFUSED_MARK
from spark_app.api.options import READ_PATH_ENV
from spark_app.kafka.config import (
    ENV_SASL_MECHANISM,
    ENV_SASL_PASSWORD,
    ENV_SASL_USERNAME,
    ENV_SECURITY_PROTOCOL,
    ENV_SSL_CA_LOCATION,
)
from tests.support.file_sink import committed_rows
from tests.support.kafka_tools import (
    ContinuousProducer,
    add_partitions,
    commit_offsets,
    consume_to_end,
    group_offsets,
    group_positions,
    log_end_offsets,
    new_topic,
    produce,
)
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration


def sink_rows(storage: Storage) -> list[dict]:
    return committed_rows(storage.output_path, filesystem=storage.filesystem)


def assert_exactly_once(
    output: Path | Storage, expected_ids: range, rows: list[dict] | None = None
) -> None:
    if rows is None:
        rows = sink_rows(output) if isinstance(output, Storage) else committed_rows(output)
    counts = Counter(row["id"] for row in rows)
    duplicates = {i: n for i, n in counts.items() if n > 1}
    missing = set(expected_ids) - counts.keys()
    assert not duplicates, f"duplicated ids: {sorted(duplicates.items())[:10]}"
    assert not missing, f"{len(missing)} ids missing, e.g. {sorted(missing)[:10]}"
    assert set(counts) == set(expected_ids)


def wait_for_all(runner: RunnerProcess, bootstrap: str, topic: str, timeout: float = 180):
    ends = {str(p): o for p, o in log_end_offsets(bootstrap, topic).items()}
    return runner.wait_for(
        lambda r: (r.get("latestBatch") or {}).get("endOffsets", {}).get(topic) == ends,
        timeout,
        f"the job to reach the log end {ends}",
    )


@pytest.mark.timeout(1500)  # six starts, each bounded by RESTORE_BOUND_S
def test_sigkill_at_random_points_then_restore_is_exactly_once(kafka, tmp_path, storage):
    """Automatic restart (rule 4): same checkpoint → every record exactly once, with the
    checkpoint and the sink on a local disk or on a real object store (s3a://)."""
    sigkill_at_random_points_then_restore(kafka, tmp_path, storage)


@pytest.mark.parametrize("versioned_kafka", driver_kill_versions(), ids=version_id, indirect=True)
def test_sigkill_then_restore_is_exactly_once_on_every_broker_version(versioned_kafka, tmp_path):
    """The same on the supported broker versions, checkpoint and sink on a local disk, with
    two kills (each start of a driver costs ~20 s): the oldest in every run (the default
    version is the test above, five kills), each one under `make test-versions`."""
    sigkill_at_random_points_then_restore(versioned_kafka, tmp_path, Storage(tmp_path), kills=2)


RESTORE_BOUND_S = 240


def sigkill_at_random_points_then_restore(
    kafka: KafkaBroker,
    tmp_path: Path,
    storage: Storage,
    kills: int = 5,
    sink: dict | None = None,
    read_rows: Callable[[Storage], list[dict]] = sink_rows,
) -> list[dict]:
    """SIGKILLs of the driver mid-batch, each followed by a restore from the checkpoint, then
    every record exactly once and the group's offsets never past the sink's output.
    `sink`, `read_rows`: another sink than the file sink, and how to read what it committed
    (the rows read are returned)."""
    topic = new_topic(kafka.bootstrap, partitions=3)
    manifest = job_manifest("kills", kafka.bootstrap, topic, tmp_path, storage)
    if sink is not None:
        manifest["spec"]["job"]["sink"] = sink
    chunk = 2_000
    total = chunk * (kills + 1)
    runner = RunnerProcess(manifest, tmp_path, env=storage.env)
    rng = random.Random(7)
    produced = 0
    for kill in range(kills):
        # New records before every start: each run has a batch to do (and to be killed in).
        produce(kafka.bootstrap, topic, range(produced, produced + chunk))
        produced += chunk
        runner.start()
        # a bound for progress, not a speed: beside the e2e tier on a slow host one restore
        # took over 120 s to its first batch (the JVM 36 s, its query 22.5 s to start)
        report = runner.wait_for_batch(0 if kill == 0 else 1, timeout=RESTORE_BOUND_S)
        if kill:
            assert report["startPath"] == "restored"
        # Kill while batches run: somewhere in the next 0-3 s of processing.
        threading.Event().wait(rng.uniform(0.0, 3.0))
        runner.kill()
    produce(kafka.bootstrap, topic, range(produced, total))
    runner.start()
    report = wait_for_all(runner, kafka.bootstrap, topic)
    assert report["startPath"] == "restored" and report["restoredBatch"] is not None
    assert runner.terminate() == 0
    assert "restored from checkpoint batch" in runner.output()
    rows = read_rows(storage)
    assert_exactly_once(storage, range(total), rows)
    # Offsets reached the group only for completed checkpoints: never past the output.
    committed = group_offsets(kafka.bootstrap, "kills-group", topic)
    processed = Counter()
    for row in rows:
        processed[row["partition"]] = max(processed[row["partition"]], row["offset"] + 1)
    assert all(committed[p] is not None and committed[p] <= processed[p] for p in committed)
    return rows


def batch_ends(storage: Storage, job: str, epoch: int) -> tuple[int | None, dict[int, dict]]:
    """(newest batch in the commit log, {batch: end offsets by partition} of the offset log)
    of an epoch's checkpoint, read straight from its storage."""
    from pyarrow import fs

    store = storage.filesystem
    base = f"{storage.root}/checkpoints/test/{job}/epoch-{epoch}"

    def ids(log: str, where: str = base) -> list[int]:
        found = store.get_file_info(fs.FileSelector(f"{where}/{log}", allow_not_found=True))
        names = (f.base_name.removesuffix(".compact") for f in found)
        return sorted(int(n) for n in names if n.isdigit())

    ends = {}
    for batch in ids("offsets"):
        with store.open_input_stream(f"{base}/offsets/{batch}") as stream:
            (topic_offsets,) = json.loads(stream.read().decode().splitlines()[-1])[
                "offsets"
            ].values()
        ends[batch] = {int(p): o for p, o in topic_offsets.items()}
    # durable: in Spark's commit log, or in the file sink's own log (its output is final)
    durable = ids("commits") + ids("_spark_metadata", f"{storage.output_path}/epoch-{epoch}")
    durable = [batch for batch in durable if batch in ends]
    return (max(durable) if durable else None), ends


def test_redeploy_starts_from_the_groups_committed_offsets(kafka, tmp_path, storage):
    """Manual redeploy (rules 5 and 9) under continuous production: a new epoch, an empty
    checkpoint, committed offsets, which first catch up with what the previous epoch made
    durable even when its driver crashed before its commits reached the group; a graceful stop
    leaves the group at the last durable batch's end. Checkpoints and sink on a local disk or
    on a real object store (s3a://)."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    manifest = job_manifest("redeploy", kafka.bootstrap, topic, tmp_path, storage)
    produce(kafka.bootstrap, topic, range(3000))
    with ContinuousProducer(kafka.bootstrap, topic, rate=500, first_id=3000) as producer:
        first = RunnerProcess(manifest, tmp_path, epoch=1, env=storage.env).start()
        first.wait_for_batch(3)
        first.kill()  # a crashed driver…
        # …whose last commits never reached the group: the group is where it started.
        commit_offsets(kafka.bootstrap, "redeploy-group", topic, {0: 0, 1: 0})
        durable1, ends1 = batch_ends(storage, "redeploy", 1)
        assert durable1 is not None and durable1 >= 3

        previous = f"{storage.checkpoints}/test/redeploy/epoch-1"
        second = RunnerProcess(manifest, tmp_path, epoch=2, env=storage.env)
        report = second.start("--previous-checkpoint", previous).wait_for_batch(1)
        assert report["startPath"] == "fresh"
        assert report["checkpointLocation"].endswith("/test/redeploy/epoch-2")
        caught_up = report["previousCheckpoint"]
        assert (caught_up["outcome"], caught_up["batch"]) == ("committed", durable1), caught_up
        starts = {int(p): d for p, d in report["startOffsets"][topic].items()}
        assert {p: d["offset"] for p, d in starts.items()} == ends1[durable1]
        assert {d["from"] for d in starts.values()} == {"committed"}
        second.wait_for_batch(report["latestBatch"]["batchId"] + 2)
        assert second.terminate() == 0  # graceful, records still arriving
        assert producer.produced > 3000
    durable2, ends2 = batch_ends(storage, "redeploy", 2)
    committed = group_offsets(kafka.bootstrap, "redeploy-group", topic)
    assert committed == ends2[durable2]  # the last durable batch's end, not one before
    # with the leader epoch the checkpoint keeps beside each end: the next redeploy's start
    # asks the leader whether its log still holds what was read below them (rule 16)
    epochs = {
        p: e for p, (_, e) in group_positions(kafka.bootstrap, "redeploy-group", topic).items()
    }
    assert None not in epochs.values(), epochs
    final = second.report()["finalCommit"]
    assert final["batch"] == durable2 and final["outcome"] in ("committed", "nothing ahead")
    assert f"final commit of the last durable batch: {final['outcome']}" in second.output()

    rows = sink_rows(storage)  # both epochs write to the same sink
    seen = {(r["partition"], r["offset"]) for r in rows}
    lost = {(p, o) for p, end in committed.items() for o in range(end) if (p, o) not in seen}
    assert not lost, f"{len(lost)} records lost, e.g. {sorted(lost)[:5]}"
    # Nothing epoch 1 made durable (commit log or file-sink log) is read again.
    twice = {(r["partition"], r["offset"]) for r in rows if r["epoch"] == "epoch-2"} & {
        (r["partition"], r["offset"]) for r in rows if r["epoch"] == "epoch-1"
    }
    assert not twice, f"{len(twice)} records in both epochs, e.g. {sorted(twice)[:10]}"


def test_a_catch_up_that_cannot_commit_fails_the_start_and_its_retry_reads_nothing_twice(
    kafka, tmp_path
):
    """Rule 9 when the catch-up's commit fails (here the broker refuses it: the group has a
    live member): nothing has been read yet, so the start fails with exit 5 and a termination
    message naming the checkpoint, the group and the cause (the operator's CatchUpFailed and
    its backoff), instead of starting from the group's older offsets and reading again what
    the previous epoch made durable. The retry, once the group accepts commits, catches up."""
    from confluent_kafka import Consumer

    topic = new_topic(kafka.bootstrap, partitions=2)
    storage = Storage(tmp_path)
    manifest = job_manifest("catchup", kafka.bootstrap, topic, tmp_path)
    produce(kafka.bootstrap, topic, range(4000))
    first = RunnerProcess(manifest, tmp_path, epoch=1).start()
    first.wait_for_batch(1)
    first.kill()
    commit_offsets(kafka.bootstrap, "catchup-group", topic, {0: 0, 1: 0})  # commits lost
    durable1, ends1 = batch_ends(storage, "catchup", 1)
    assert durable1 is not None

    member = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": "catchup-group",
            "enable.auto.commit": False,  # a member that commits nothing itself
        }
    )
    member.subscribe([topic])
    wait_for(lambda: member.poll(0.2) is not None or bool(member.assignment()), 60, "a member")
    termination = tmp_path / "termination-log"
    termination.touch()
    previous = f"{storage.checkpoints}/test/catchup/epoch-1"
    second = RunnerProcess(
        manifest, tmp_path, epoch=2, env={"STREAMJOB_TERMINATION_LOG": str(termination)}
    )
    try:
        assert second.start("--previous-checkpoint", previous).wait(180) == 5
    finally:
        member.close()
    said = termination.read_text()
    assert previous in said and "'catchup-group'" in said and "Nothing was read" in said
    report = second.report()
    assert report["previousCheckpoint"]["outcome"] == "failed" and report["state"] == "failed"
    assert said in second.output()
    assert batch_ends(storage, "catchup", 2) == (None, {})  # no batch planned, nothing read
    assert group_offsets(kafka.bootstrap, "catchup-group", topic) == {0: 0, 1: 0}

    # A redeploy now (epoch 3, as the Failed message advises): epoch 2 never started its
    # query, so the catch-up reaches back past it to epoch 1 (issue 41, finding 2)
    third = RunnerProcess(manifest, tmp_path, epoch=3)
    chain = ("--previous-checkpoint", f"{storage.checkpoints}/test/catchup/epoch-2")
    report = third.start(*chain, "--previous-checkpoint", previous).wait_for_batch(0)
    assert report["previousCheckpoint"]["outcome"] == "committed"
    assert report["previousCheckpoint"]["location"] == previous
    starts = {int(p): d["offset"] for p, d in report["startOffsets"][topic].items()}
    assert starts == ends1[durable1]
    assert third.terminate() == 0


def test_a_restore_commits_its_last_durable_batch_where_the_group_was_left_behind(kafka, tmp_path):
    """Rule 3 after a crash between a batch's commit-log entry and its group commit (found by
    the simulation, issue 41): the restored driver commits the restored batch's end where the
    group is behind, so an idle stream's group does not stay behind its output."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    storage = Storage(tmp_path)
    manifest = job_manifest("restorecommit", kafka.bootstrap, topic, tmp_path)
    produce(kafka.bootstrap, topic, range(1000))
    first = RunnerProcess(manifest, tmp_path, epoch=1).start()
    wait_for_all(first, kafka.bootstrap, topic)
    first.kill()
    commit_offsets(kafka.bootstrap, "restorecommit-group", topic, {0: 0, 1: 0})  # lost
    durable, ends = batch_ends(storage, "restorecommit", 1)
    assert durable is not None
    restored = RunnerProcess(manifest, tmp_path, epoch=1).start()
    wait_for(
        lambda: group_offsets(kafka.bootstrap, "restorecommit-group", topic) == ends[durable],
        120,
        "the restored batch's end offsets in the group (no new record arrives)",
    )
    report = restored.report()
    assert report["startPath"] == "restored"
    assert report["restoredCommit"]["outcome"] == "committed"
    assert restored.terminate() == 0


def test_commit_offsets_on_checkpoints_false_leaves_the_group_untouched(kafka, tmp_path):
    topic = new_topic(kafka.bootstrap, partitions=2)
    manifest = job_manifest(
        "nocommit",
        kafka.bootstrap,
        topic,
        tmp_path,
        commitOffsetsOnCheckpoints=False,
        startingOffsets="earliest",
    )
    produce(kafka.bootstrap, topic, range(1500))
    runner = RunnerProcess(manifest, tmp_path).start()
    wait_for_all(runner, kafka.bootstrap, topic)
    produce(kafka.bootstrap, topic, range(1500, 1600))
    wait_for_all(runner, kafka.bootstrap, topic)  # the earlier batches are durable by now
    assert runner.terminate() == 0
    assert runner.report()["commits"]["succeeded"] == 0
    assert group_offsets(kafka.bootstrap, "nocommit-group", topic) == {0: None, 1: None}
    assert_exactly_once(tmp_path / "output", range(1600))


def test_a_partition_added_mid_run_is_read_from_its_start(kafka, tmp_path):
    topic = new_topic(kafka.bootstrap, partitions=2)
    manifest = job_manifest(
        "grow", kafka.bootstrap, topic, tmp_path, partitionDiscoveryIntervalMs=300
    )
    produce(kafka.bootstrap, topic, range(500))
    runner = RunnerProcess(manifest, tmp_path).start()
    wait_for_all(runner, kafka.bootstrap, topic)
    add_partitions(kafka.bootstrap, topic, 4)
    produce(kafka.bootstrap, topic, range(500, 800), partition=2)
    produce(kafka.bootstrap, topic, range(800, 900), partition=3)
    wait_for_all(runner, kafka.bootstrap, topic)
    assert runner.terminate() == 0
    assert_exactly_once(tmp_path / "output", range(900))
    rows = committed_rows(tmp_path / "output")
    assert min(r["offset"] for r in rows if r["partition"] == 2) == 0
    assert "partitions discovered" in runner.output()


def test_a_failed_task_is_retried_as_on_a_cluster_and_its_records_land_once(kafka, tmp_path):
    """Outside a cluster too, Spark retries a failed task (the runner's `local[2,4]`, as
    Kubernetes' scheduler does with spark.task.maxFailures): a transform whose every task fails
    its first attempt costs the query a retry, not its run (CI's chaos test: a transaction's
    commit timed out through a broker's restart and ended the run), and the sink holds each
    record once."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    manifest = job_manifest("retried", kafka.bootstrap, topic, tmp_path)
    manifest["spec"]["job"]["transform"] = "tests.support.transforms:fails_each_first_attempt"
    produce(kafka.bootstrap, topic, range(300))
    runner = RunnerProcess(manifest, tmp_path).start()
    wait_for_all(runner, kafka.bootstrap, topic)
    produce(kafka.bootstrap, topic, range(300, 400))
    wait_for_all(runner, kafka.bootstrap, topic)  # a second batch: the query went on
    assert runner.terminate() == 0
    assert_exactly_once(tmp_path / "output", range(400))
    assert "this task's first attempt fails" in runner.output()


def test_a_broker_restart_mid_run_loses_nothing(tmp_path):
    """The job rides out a broker crash or fails clearly; a restart then finishes the work."""
    with KafkaBroker(tmp_path / "broker") as broker:
        topic = new_topic(broker.bootstrap, partitions=2)
        manifest = job_manifest("brokerdown", broker.bootstrap, topic, tmp_path)
        produce(broker.bootstrap, topic, range(2000))
        runner = RunnerProcess(manifest, tmp_path).start()
        runner.wait_for_batch(0)
        broker.stop(kill=True)
        threading.Event().wait(3)  # the broker stays down for a while
        broker.start()
        produce(broker.bootstrap, topic, range(2000, 3000))
        try:
            wait_for_all(runner, broker.bootstrap, topic, timeout=240)
        except AssertionError:
            if runner.process.poll() is None:
                raise
            # It failed clearly instead (exit 1); restarting it is what the operator does.
            assert runner.process.returncode == 1, runner.tail()
            runner.start()
            wait_for_all(runner, broker.bootstrap, topic, timeout=240)
        assert runner.terminate() == 0
        assert_exactly_once(tmp_path / "output", range(3000))


@pytest.mark.parametrize(
    ("field", "change", "message", "code"),
    [
        (
            "subscribe",
            {"subscribe": ["no-such-topic"]},
            "spec.job.source.subscribe: topic(s) no-such-topic not found",
            6,  # KafkaUnavailable: the topic may be created, the start is retried
        ),
        (
            "startingOffsets",
            {"startingOffsets": "yesterday"},
            "spec.job.source.startingOffsets: String should match pattern '^(committed|earliest",
            2,
        ),
        (
            "subscribePattern",
            {"subscribePattern": "t-.*"},
            "set exactly one of subscribe or subscribePattern",
            2,
        ),
        ("groupId", {"groupId": None}, "groupId is required while commitOffsetsOnCheckpoints", 2),
        (
            "bootstrapServers",
            {"bootstrapServers": "127.0.0.1:{closed}"},
            "spec.job.source.bootstrapServers: Kafka at 127.0.0.1:",
            6,
        ),
    ],
)
def test_bad_input_exits_naming_the_field_and_commits_nothing(
    kafka, tmp_path, field, change, message, code
):
    """Exit 2 for input that cannot run (the operator holds the job: InvalidSpec), exit 6 for
    Kafka away or a topic missing at the start (the operator retries with backoff); either way
    the termination message names the field, and nothing is read or committed."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(10))
    closed = free_port()
    change = {k: (v.format(closed=closed) if isinstance(v, str) else v) for k, v in change.items()}
    manifest = job_manifest("bad", kafka.bootstrap, topic, tmp_path)
    source = manifest["spec"]["job"]["source"]
    source.update({k: v for k, v in change.items() if v is not None})
    for key in [k for k, v in change.items() if v is None]:
        source.pop(key)
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {"STREAMJOB_TERMINATION_LOG": str(termination)}
    runner = RunnerProcess(manifest, tmp_path, env=env).start("--preflight-timeout", "3")
    assert runner.wait(60) == code
    assert message.format(closed=closed) in runner.output()
    said = termination.read_text()
    assert message.format(closed=closed) in said
    assert said.startswith(REFUSED_MARK) == (code == 2)  # only a refusal is held InvalidSpec
    assert group_offsets(kafka.bootstrap, "bad-group", topic) == {0: None}
    assert not (tmp_path / "checkpoints").exists()


def test_an_invalid_manifest_names_every_bad_field(tmp_path):
    manifest = job_manifest("invalid", "127.0.0.1:9", "t", tmp_path)
    del manifest["spec"]["job"]["sink"]
    manifest["spec"]["job"]["source"]["maxOffsetsPerTrigger"] = 0
    runner = RunnerProcess(manifest, tmp_path).start()
    assert runner.wait(60) == 2
    output = runner.output()
    assert "spec.job.sink: Field required" in output
    assert "spec.job.source.maxOffsetsPerTrigger: Input should be greater than or equal to 1" in (
        output
    )


def secured_env(
    kafka: KafkaBroker, tmp_path: Path, prefix: str = "KAFKA_", **changes: str
) -> dict[str, str]:
    """The KAFKA_* environment the operator gives a driver pod of a SASL_SSL job: SCRAM
    credentials (from the Secret) and the CA as a file (the Secret volume); KAFKA_SINK_*
    those of spec.sinkKafkaCredentials."""
    ca = tmp_path / f"{prefix.lower()}ca.crt"
    ca.write_text(changes.pop("ca_pem", kafka.ca_pem))
    env = {
        ENV_SECURITY_PROTOCOL: "SASL_SSL",
        ENV_SASL_MECHANISM: "SCRAM-SHA-512",
        ENV_SASL_USERNAME: kafka.SASL_USER,
        ENV_SASL_PASSWORD: kafka.sasl_password,
        ENV_SSL_CA_LOCATION: str(ca),
    }
    return {prefix + k.removeprefix("KAFKA_"): v for k, v in env.items()} | changes


SECURED_CREDENTIALS = {"secretName": "kafka-login", "caSecret": {"name": "kafka-ca"}}
SINK_CREDENTIALS = {"secretName": "sink-login", "caSecret": {"name": "sink-ca"}}


def test_a_transform_and_the_kafka_sink_deliver_every_record_over_sasl_ssl(kafka, tmp_path):
    """Source, committer and Kafka sink (exactly-once: its transactions and progress groups)
    on the broker's SASL_SSL listener (SCRAM-SHA-512, a CA of the test's own), the sink with
    credentials of its own (spec.sinkKafkaCredentials: KAFKA_SINK_*, its own CA file); the
    passwords are in no output and no report."""
    source, target = (new_topic(kafka.bootstrap, partitions=2) for _ in range(2))
    manifest = job_manifest("tokafka", kafka.secured_bootstrap, source, tmp_path)
    manifest["spec"]["kafkaCredentials"] = SECURED_CREDENTIALS
    manifest["spec"]["sinkKafkaCredentials"] = SINK_CREDENTIALS
    manifest["spec"]["job"]["transform"] = "tests.support.transforms:even_ids"
    manifest["spec"]["job"]["sink"] = {
        "format": "kafka",
        "topic": target,
        "bootstrapServers": kafka.secured_bootstrap,
    }
    produce(kafka.bootstrap, source, range(2000))
    env = secured_env(kafka, tmp_path) | secured_env(kafka, tmp_path, "KAFKA_SINK_")
    runner = RunnerProcess(manifest, tmp_path, env=env).start()
    wait_for_all(runner, kafka.bootstrap, source)
    ends = log_end_offsets(kafka.bootstrap, source)
    wait_for(  # the committer's commits went over SASL_SSL too
        lambda: group_offsets(kafka.bootstrap, "tokafka-group", source) == ends,
        60,
        "the group's offsets at the log end",
    )
    assert runner.terminate() == 0
    read = consume_to_end(kafka.bootstrap, target, "read_committed")  # as consumers must
    ids = Counter(json.loads(m.value())["id"] for m in read)
    assert ids == Counter(range(0, 2000, 2))  # the default writer: exactly once, transactions
    assert kafka.sasl_password not in runner.output()
    assert kafka.sasl_password not in json.dumps(runner.report())


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        (
            {ENV_SASL_PASSWORD: "not-the-password"},
            3,
            "spec.kafkaCredentials.secretName (Secret 'kafka-login'): Kafka at 127.0.0.1:"
            "{port}: authentication failed (SASL)",
        ),
        (
            {"ca_pem": "other"},
            4,
            "spec.kafkaCredentials.caSecret (Secret 'kafka-ca', key 'ca.crt'): Kafka at "
            "127.0.0.1:{port}: certificate verify failed (TLS)",
        ),
        (
            {"KAFKA_SINK_SASL_PASSWORD": "not-the-password"},
            3,
            "spec.sinkKafkaCredentials.secretName (Secret 'sink-login'): Kafka at 127.0.0.1:"
            "{port}: authentication failed (SASL)",
        ),
    ],
    ids=["wrong-password", "untrusted-ca", "wrong-sink-password"],
)
def test_refused_credentials_or_certificate_exit_fast_naming_the_secret_and_cause(
    kafka, tmp_path, change, code, message
):
    """The preflight, before Spark starts: a distinct exit code per cause (the operator's
    KafkaAuthFailed / KafkaTLSFailed), long before the preflight timeout; for the source's
    cluster and for a Kafka sink's with credentials of its own."""
    if change.get("ca_pem") == "other":
        change["ca_pem"] = Authority.create(tmp_path / "other-ca").pem
    topic = new_topic(kafka.bootstrap, partitions=1)
    manifest = job_manifest("refused", kafka.secured_bootstrap, topic, tmp_path)
    manifest["spec"]["kafkaCredentials"] = SECURED_CREDENTIALS
    env = secured_env(kafka, tmp_path, **change)
    if "KAFKA_SINK_SASL_PASSWORD" in change:  # the source's are right: the sink's refused
        manifest["spec"]["sinkKafkaCredentials"] = SINK_CREDENTIALS
        manifest["spec"]["job"]["sink"] = {"format": "kafka", "topic": topic}
        env = secured_env(kafka, tmp_path) | secured_env(kafka, tmp_path, "KAFKA_SINK_", **change)
    runner = RunnerProcess(manifest, tmp_path, env=env)
    started = time.monotonic()
    runner.start("--preflight-timeout", "30")
    assert runner.wait(60) == code
    assert time.monotonic() - started < 20  # the cause ends the wait, not the timeout
    output = runner.output()
    assert message.format(port=kafka.sasl_port) in output
    assert kafka.sasl_password not in output and "not-the-password" not in output
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("read_path", ["native", "python"])
def test_available_now_reads_the_backlog_in_bounded_batches_and_stops(kafka, tmp_path, read_path):
    """Whole queries on both executor read paths (`native` fails rather than falls back)."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    manifest = job_manifest("backfill", kafka.bootstrap, topic, tmp_path)
    manifest["spec"]["job"]["trigger"] = {"availableNow": True}
    produce(kafka.bootstrap, topic, range(5000))
    runner = RunnerProcess(manifest, tmp_path, env={READ_PATH_ENV: read_path}).start()
    assert runner.wait(180) == 0  # finished, not failed
    assert_exactly_once(tmp_path / "output", range(5000))
    report = runner.report()
    assert report["latestBatch"]["batchId"] >= 3  # 5000 offsets, 1500 per batch
    # the totals the operator's autoscaler measures the processing rate with
    totals = report["throughput"]
    assert totals["rows"] == 5000 and totals["batches"] == report["latestBatch"]["batchId"] + 1
    assert 0 < totals["executionMs"] <= totals["busyMs"]
    assert totals["taskMs"] > 0  # local mode: the driver's own tasks


def test_sigterm_stops_back_to_back_batches_between_two_of_them(kafka, tmp_path):
    """A graceful stop (the kubelet's SIGTERM) while batches run back to back, as they do
    whenever a batch takes longer than the trigger interval: the batch in flight ends, no new
    one is planned, and the query stops with every planned batch committed, its offsets in
    the group."""
    topic = new_topic(kafka.bootstrap, partitions=3)
    manifest = job_manifest("drain", kafka.bootstrap, topic, tmp_path, maxOffsetsPerTrigger=300)
    del manifest["spec"]["job"]["trigger"]  # Spark's default: the next batch at once
    total = 60_000  # 200 batches: far more than run before the SIGTERM
    produce(kafka.bootstrap, topic, range(total))
    runner = RunnerProcess(manifest, tmp_path).start()
    runner.wait_for_batch(1)
    assert runner.terminate() == 0
    output = runner.output()
    assert "stopping the query between batches" in output
    # The batch in flight (and one that ended unprinted) at most; without the drain, Spark
    # starts batch after batch and the runner rarely sees the query between two of them.
    after_request = output.split("stop requested: finishing the batch in flight", 1)[1]
    assert len(re.findall(r"^batch \d+:", after_request, re.MULTILINE)) <= 2, after_request
    report = runner.report()
    assert report["state"] == "stopped" and report["stop"]["betweenBatches"] is True, report
    last = report["latestBatch"]
    checkpoint = Path(report["checkpointLocation"].removeprefix("file://"))

    def newest(log: str) -> int:
        return max(int(f.name) for f in (checkpoint / log).iterdir() if f.name.isdigit())

    assert newest("offsets") == newest("commits") == last["batchId"]  # none planned, unrun
    ends = {int(p): o for p, o in last["endOffsets"][topic].items()}
    assert sum(ends.values()) < total  # stopped mid-stream, not at the end of the backlog
    assert group_offsets(kafka.bootstrap, "drain-group", topic) == ends
    ids = Counter(row["id"] for row in committed_rows(tmp_path / "output"))
    assert max(ids.values()) == 1 and len(ids) == sum(ends.values())
