"""Chaos on a replicated cluster (3 KRaft nodes, RF 3, min.insync.replicas 2), on every read
path: one job per engine (fetch, librdkafka, pure Python) writing a file sink runs as a real
runner process side by side with a fourth job writing the Kafka sink (a topic on the same
cluster, through the same churn), under continuous production (acks=all, idempotent), through
one scripted sequence of events: the node leading most partitions SIGKILLed and gracefully
stopped, restarted after random outages; a rolling restart of all three nodes; a reassignment
moving replicas and leaders, then a preferred-leader election; partitions added mid-stream.

A runner that exits fails the test (`RunnerProcess.wait_for`), also where a relaunch would
have saved the records: a broker restart must cost a job a pause, never its driver. At the end
every record of the topic (each partition and offset, with the id it holds) is in each job's
sink exactly once, every produced id is in the topic, and each group's committed offsets equal
the log ends. The oracle is the topic, not the producer's count: librdkafka's idempotent
producer can itself write a record twice when a leader moves (its open issue #4953; CI saw it
once), and a source can only deliver each offset once; such ids are printed.

The Kafka sink's job is exactly once too (rule 18, its default `deliveryGuarantee`): a
`read_committed` reader of its topic sees each record of the source topic once. Besides the
cluster's churn, its driver is SIGKILLed at a random moment and restored, killed again right
after its transactions of a batch committed and before `commits/N` (the replay a restore must
skip), restored, then SIGKILLed and redeployed: a new epoch from the group's offsets, which
the catch-up first moves to the sink's progress (rule 9). Each event's pause (the event to the
first batch planned after it committed) is printed per job: docs/benchmarks.md ("Kafka
churn") quotes them.

Cost: one cluster, one sequence, four jobs at once (a runner mostly waits on its trigger).
"""

from __future__ import annotations

import json
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from devbed.kafka_cluster import KafkaCluster
from devbed.object_store import Storage
from spark_app.api.exit_codes import EXIT_CATCH_UP_FAILED
from spark_app.api.options import NATIVE_ENGINE_ENV, READ_PATH_ENV
from spark_app.sinks.kafka_eos_sink import CRASH_AFTER_COMMIT_ENV
from tests.support.file_sink import committed_rows
from tests.support.kafka_tools import (
    DURABLE,
    ContinuousProducer,
    add_partitions,
    consume_to_end,
    group_offsets,
    log_end_offsets,
    new_topic,
    produce,
)
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ENGINES = {
    "fetch": {READ_PATH_ENV: "native", NATIVE_ENGINE_ENV: "fetch"},
    "librdkafka": {READ_PATH_ENV: "native", NATIVE_ENGINE_ENV: "librdkafka"},
    "python": {READ_PATH_ENV: "python"},
}
KAFKA_SINK_JOB = "kafka-sink"  # the job writing the Kafka sink (reading with pure Python)
CHAOS_TRIGGER = "2 seconds"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[KafkaCluster]:
    with KafkaCluster(Path(tmp_path_factory.mktemp("chaos"))) as c:
        yield c


def batch_id(runner: RunnerProcess) -> int:
    return (runner.report().get("latestBatch") or {}).get("batchId", -1)


class Jobs:
    """One job per engine and the Kafka sink's, reading the same topic into sinks of their
    own."""

    def __init__(self, cluster: KafkaCluster, topic: str, workdir: Path, kafka_sink: str):
        self.runners: dict[str, RunnerProcess] = {}
        self.manifests: dict[str, dict] = {}
        for job, env in {**ENGINES, KAFKA_SINK_JOB: ENGINES["python"]}.items():
            where = workdir / job
            where.mkdir()
            manifest = job_manifest(
                f"chaos-{job}",
                cluster.bootstrap,
                topic,
                where,
                partitionDiscoveryIntervalMs=1000,
                maxOffsetsPerTrigger=3000,  # catches up after a pause in few batches
            )
            # a batch every 2 s, not 500 ms: four jobs' per-batch work (the driver's source
            # calls, a Python worker per task) was most of the test's CPU; every event
            # still falls between several batches of each job
            manifest["spec"]["job"]["trigger"] = {"processingTime": CHAOS_TRIGGER}
            if job == KAFKA_SINK_JOB:
                manifest["spec"]["job"]["sink"] = {"format": "kafka", "topic": kafka_sink}
            self.runners[job] = RunnerProcess(manifest, where, env=env)
            self.manifests[job] = manifest
        self.pauses: dict[str, dict[str, float]] = {job: {} for job in self.runners}

    def start(self) -> None:
        for runner in self.runners.values():
            runner.start()
        for runner in self.runners.values():
            runner.wait_for_batch(1, timeout=240)

    def through(self, event: str, action: Callable[[], None]) -> None:
        """Runs `action`; then every job must commit the first batch planned after the event
        began (two past the one it had: one may have been in flight), within 300 s of the
        action's end (a redeploy's action alone may take longer: its restarted catch-ups).
        Records each pause, from the event's start."""
        began = time.monotonic()
        before = dict(self.runners)
        wanted = {engine: batch_id(r) + 2 for engine, r in self.runners.items()}
        action()
        acted = time.monotonic()
        for engine, runner in self.runners.items():  # restarted by the action: a batch on
            if runner is not before[engine] or runner.epoch != before[engine].epoch:
                wanted[engine] = batch_id(runner) + 1
        waiting = dict(self.runners)
        while waiting:  # all side by side: each pause is when its own batch was seen
            for engine, runner in list(waiting.items()):
                if batch_id(runner) >= wanted[engine]:
                    self.pauses[engine][event] = round(time.monotonic() - began, 1)
                    del waiting[engine]
                elif runner.process.poll() is not None or time.monotonic() - acted > 300:
                    code = runner.process.poll()
                    raise AssertionError(
                        f"{engine}: {'exited ' + str(code) if code is not None else 'stuck'} "
                        f"after {event}, before batch {wanted[engine]}:\n{runner.tail()}"
                    )
            time.sleep(0.1)
        print(f"{event}: pauses {[p[event] for p in self.pauses.values()]} s", flush=True)

    def kill_restore_and_kill_after_the_sinks_commit(self, job: str, rng: random.Random) -> None:
        """`job`'s driver SIGKILLed at a random moment and restored; then, armed, killed by its
        sink right after the next batch's transactions committed (no `commits/N`); restored
        again: a replay whose transactions are committed already."""
        runner = self.runners[job]
        time.sleep(rng.uniform(0.0, 4.0))  # anywhere in a 2 s trigger's batch or wait
        runner.kill()
        log = runner.workdir / "checkpoints" / "test" / f"chaos-{job}" / f"epoch-{runner.epoch}"
        # the batch after the newest planned one: the restore runs it whatever the kill hit
        armed = max(int(n.name) for n in (log / "offsets").iterdir() if n.name.isdigit()) + 1
        runner.env = {**runner.env, CRASH_AFTER_COMMIT_ENV: str(armed)}
        runner.start()
        assert runner.wait(240) == -signal.SIGKILL, runner.tail()
        assert (log / "offsets" / str(armed)).exists(), "killed before its batch was planned"
        assert not (log / "commits" / str(armed)).exists(), "killed after commits/N"
        del runner.env[CRASH_AFTER_COMMIT_ENV]
        runner.start().wait_for_batch(armed, timeout=240)

    def kill_and_redeploy(self, job: str) -> None:
        """`job`'s driver SIGKILLed, then a manual redeploy: a new epoch's checkpoint,
        started from the group's offsets after the catch-up from the killed epoch's."""
        old = self.runners[job]
        old.kill()
        previous = f"{Storage(old.workdir).checkpoints}/test/chaos-{job}/epoch-{old.epoch}"
        new = RunnerProcess(self.manifests[job], old.workdir, old.epoch + 1, dict(old.env))
        for attempt in range(1, 4):
            new.start("--previous-checkpoint", previous)
            try:
                report = new.wait_for_batch(0, timeout=240)
                break
            except AssertionError:
                # a catch-up that cannot read or commit (a coordinator still loading after
                # the churn) fails the start, reading nothing; the operator starts it again
                # after its backoff (rule 9): so does the test, a few times
                if new.process is None or new.process.poll() != EXIT_CATCH_UP_FAILED:
                    raise
                if attempt == 3:
                    raise
                print(f"{job}: the redeploy's catch-up failed (exit 5), started again")
        assert report["previousCheckpoint"]["outcome"] in ("committed", "nothing ahead"), report
        self.runners[job] = new

    def reach(self, cluster: KafkaCluster, topic: str) -> None:
        ends = {str(p): o for p, o in log_end_offsets(cluster.bootstrap, topic).items()}
        for runner in self.runners.values():
            runner.wait_for(
                lambda r: (r.get("latestBatch") or {}).get("endOffsets", {}).get(topic) == ends,
                300,
                f"the job to reach the log end {ends}",
            )


def rotated(cluster: KafkaCluster, topic: str) -> dict[int, list[int]]:
    """Each partition's replicas moved one node on: every preferred leader changes."""
    metadata = cluster._admin().list_topics(topic, timeout=10).topics[topic].partitions
    return {p: [r % 3 + 1 for r in m.replicas] for p, m in metadata.items()}


@pytest.mark.timeout(1500)  # the Kafka sink job's three driver starts besides the churn
def test_every_engine_rides_out_leader_churn_exactly_once(cluster, tmp_path) -> None:
    topic, sink = (new_topic(cluster.bootstrap, partitions=4, replicas=3) for _ in range(2))
    cluster.wait_in_sync(topic)
    cluster.wait_in_sync(sink)
    rng = random.Random(21)
    jobs = Jobs(cluster, topic, tmp_path, kafka_sink=sink)
    producing = {**DURABLE, "topic.metadata.refresh.interval.ms": 1000}  # sees new partitions
    started = time.monotonic()
    with ContinuousProducer(cluster.bootstrap, topic, rate=50, config=producing) as producer:
        jobs.start()

        def outage(kill: bool) -> Callable[[], None]:
            def act() -> None:
                with cluster.outage(cluster.node_leading_most(topic), kill=kill):
                    time.sleep(rng.uniform(2.0, 8.0))  # a random outage, the job running
                cluster.wait_in_sync(topic)

            return act

        def rolling_restart() -> None:
            for node in cluster.nodes:
                with cluster.outage(node, kill=False):
                    pass
                cluster.wait_in_sync(topic)

        jobs.through("leader SIGKILLed", outage(kill=True))
        jobs.through("leader stopped gracefully", outage(kill=False))
        jobs.through("leader SIGKILLed again", outage(kill=True))
        jobs.through(
            "Kafka sink's driver killed at random, then after its transactions",
            lambda: jobs.kill_restore_and_kill_after_the_sinks_commit(KAFKA_SINK_JOB, rng),
        )
        jobs.through("rolling restart of all three nodes", rolling_restart)
        jobs.through(
            "Kafka sink's driver killed, the job redeployed",
            lambda: jobs.kill_and_redeploy(KAFKA_SINK_JOB),
        )
        jobs.through("reassignment", lambda: cluster.reassign(topic, rotated(cluster, topic)))
        jobs.through("preferred-leader election", lambda: cluster.elect_preferred_leaders(topic))
        jobs.through(
            "partitions added (4 to 6)", lambda: add_partitions(cluster.bootstrap, topic, 6)
        )
        produced = producer.stop()
    jobs.reach(cluster, topic)
    ends = log_end_offsets(cluster.bootstrap, topic)
    in_topic = ids_at_offsets(cluster.bootstrap, topic)
    assert set(in_topic.values()) == set(range(produced)), "the cluster lost or made up ids"
    print(f"ids the producer wrote twice: {written_twice(in_topic)}")
    problems: dict[str, list[str]] = {}
    for job, runner in jobs.runners.items():  # every job checked before any failure
        runner.wait_for(  # the runner's group commits are asynchronous: poll Kafka itself
            lambda _r, job=job: (
                group_offsets(cluster.bootstrap, f"chaos-{job}-group", topic) == ends
            ),
            60,
            f"{job}: the group's offsets at the log ends {ends}",
        )
        assert runner.terminate() == 0, runner.tail()
        assert "partitions discovered" in runner.output(), job
        if job == KAFKA_SINK_JOB:
            # as its consumers must read it (transactions: their markers take offsets too)
            read = consume_to_end(cluster.bootstrap, sink, "read_committed")
            got = Counter(json.loads(m.value())["id"] for m in read)
            wanted = Counter(in_topic.values())  # an id the producer wrote twice: twice
            lost, extra = wanted - got, got - wanted
            problems[job] = [
                f"{len(ids)} ids {what}, e.g. {sorted(ids)[:10]}"
                for what, ids in (("lost", lost), ("more often than in the topic", extra))
                if ids
            ]
        else:
            problems[job] = not_exactly_once(committed_rows(runner.workdir / "output"), in_topic)
    assert not any(problems.values()), problems
    print(f"chaos: {time.monotonic() - started:.0f}s; pauses (s) per job: {jobs.pauses}")


def ids_at_offsets(bootstrap: str, topic: str) -> dict[tuple[int, int], int]:
    """What a source must deliver: the id at each (partition, offset) of the topic."""
    messages = consume_to_end(bootstrap, topic, "read_uncommitted")
    return {(m.partition(), m.offset()): json.loads(m.value())["id"] for m in messages}


def written_twice(in_topic: dict[tuple[int, int], int]) -> dict[int, list[tuple[int, int]]]:
    where: dict[int, list[tuple[int, int]]] = {}
    for at, record_id in sorted(in_topic.items()):
        where.setdefault(record_id, []).append(at)
    return {record_id: at for record_id, at in where.items() if len(at) > 1}


def not_exactly_once(rows: list[dict], in_topic: dict[tuple[int, int], int]) -> list[str]:
    """What breaks exactly-once in a file sink's rows: an offset of the topic twice or
    never, one the topic does not have, or an id that is not the one at its offset."""
    seen = Counter((row["partition"], row["offset"]) for row in rows)
    wrong = {
        (row["partition"], row["offset"]): row["id"]
        for row in rows
        if in_topic.get((row["partition"], row["offset"]), row["id"]) != row["id"]
    }
    found = {
        "offsets twice": sorted(at for at, n in seen.items() if n > 1),
        "offsets missing": sorted(in_topic.keys() - seen.keys()),
        "offsets not in the topic": sorted(seen.keys() - in_topic.keys()),
        "ids not the topic's at their offset": sorted(wrong.items()),
    }
    return [f"{len(at)} {what}, e.g. {at[:10]}" for what, at in found.items() if at]


def offsets_by_partition(runner: RunnerProcess) -> dict[int, list[int]]:
    rows = committed_rows(runner.workdir / "output")
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)), "an id twice in the sink"
    found: dict[int, list[int]] = {}
    for row in rows:
        found.setdefault(row["partition"], []).append(row["offset"])
    return {p: sorted(o) for p, o in found.items()}


def never_past_the_sink(cluster: KafkaCluster, group: str, topic: str, runner: RunnerProcess):
    """The group's offsets never run ahead of what the sink holds."""
    read = offsets_by_partition(runner)
    for partition, offset in group_offsets(cluster.bootstrap, group, topic).items():
        if offset is not None:
            assert offset <= max(read.get(partition, [-1])) + 1, (partition, offset, group)


def test_retention_and_topic_deletion_under_a_running_job(cluster, tmp_path) -> None:
    """Records deleted before the job read them (the log start moved past its position, as
    retention does): failOnDataLoss=true fails clearly naming the partition and range with
    nothing committed past the sink; false skips them with a warning and counts them. A topic
    deleted mid-stream fails the job within seconds (a read in flight: the topic out of the
    metadata for 5 s; between batches: the driver's look-up), the termination message that
    the operator puts in status naming the topic, and nothing read is lost."""
    kept, gone = (new_topic(cluster.bootstrap, partitions=3, replicas=3) for _ in range(2))
    for topic in (kept, gone):
        for p in range(3):  # 1000 records in each partition
            produce(cluster.bootstrap, topic, range(p * 1000, p * 1000 + 1000), p, **DURABLE)
    jobs = {}
    for name, topic, engine, loss in (
        ("strict", kept, "fetch", True),
        ("lenient", kept, "librdkafka", False),
        ("deleted", gone, "python", True),
    ):
        where = tmp_path / name
        where.mkdir()
        (where / "termination-log").touch()  # as the kubelet makes it
        env = {**ENGINES[engine], "STREAMJOB_TERMINATION_LOG": str(where / "termination-log")}
        manifest = job_manifest(
            name, cluster.bootstrap, topic, where, maxOffsetsPerTrigger=150, failOnDataLoss=loss
        )
        jobs[name] = RunnerProcess(manifest, where, env=env).start()
    for runner in jobs.values():
        runner.wait_for_batch(1, timeout=240)
    admin = cluster._admin()
    cut = [TopicPartition(kept, p, 800) for p in range(3)]
    for future in admin.delete_records(cut).values():
        future.result(30)
    admin.delete_topics([gone])[gone].result(30)
    deleted = time.monotonic()

    assert jobs["deleted"].wait(120) != 0
    assert time.monotonic() - deleted < 60, "not failed within seconds of the deletion"
    said = (tmp_path / "deleted" / "termination-log").read_text()
    assert re.search(rf"topic {gone} was deleted while the job read|topic\(s\) {gone} not", said)
    never_past_the_sink(cluster, "deleted-group", gone, jobs["deleted"])

    assert jobs["strict"].wait(180) != 0
    said = (tmp_path / "strict" / "termination-log").read_text()
    assert re.search(rf"{kept}-\d: offsets \d+\.\.799 were deleted", said)
    never_past_the_sink(cluster, "strict-group", kept, jobs["strict"])

    lenient = jobs["lenient"]
    report = lenient.wait_for(
        lambda r: (
            (r.get("latestBatch") or {}).get("endOffsets", {}).get(kept)
            == {str(p): 1000 for p in range(3)}
        ),
        180,
        "the lenient job to reach the log end",
    )
    assert report["dataLossSkippedOffsets"] > 0
    assert "continuing (failOnDataLoss=false)" in lenient.output()
    read = offsets_by_partition(lenient)
    assert all(set(range(800, 1000)) <= set(read[p]) for p in range(3)), "a kept record lost"
    assert lenient.terminate() == 0
