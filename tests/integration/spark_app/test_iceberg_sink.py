"""The Iceberg table sink: exactly once for every reader, through restores and redeploys.

Each test runs the runner as a real process on local Spark against a real broker and a real
Iceberg REST catalog (Apache Iceberg's own server, devbed/iceberg_catalog.py; its warehouse
on the local disk), and reads the table back through the catalog with PyIceberg's scan: what
any Iceberg reader sees. The job gets the catalog as a driver pod would, from PyIceberg's
environment variables only.

The kill point that matters is between the table's commit and the checkpoint's commit-log
entry: the sink's fault point (`CRASH_AFTER_COMMIT_ENV`) SIGKILLs the driver exactly there.
"""

from __future__ import annotations

import signal
import uuid

import pytest

from devbed.iceberg_catalog import IcebergCatalog
from devbed.object_store import Storage
from spark_app.sinks.iceberg_sink import CRASH_AFTER_COMMIT_ENV
from tests.integration.spark_app.test_runner import (
    assert_exactly_once,
    sigkill_at_random_points_then_restore,
    wait_for_all,
)
from tests.support.iceberg_output import (
    batch_snapshots,
    committed_batch,
    iceberg_rows,
    iceberg_sink,
    load,
)
from tests.support.kafka_tools import commit_offsets, group_offsets, new_topic, produce
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def catalog_env(iceberg_catalog: IcebergCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog in the environment of this process and of the runners it starts."""
    for key, value in iceberg_catalog.client_env().items():
        monkeypatch.setenv(key, value)


def new_table() -> str:
    return f"streams.orders_{uuid.uuid4().hex[:10]}"


def checkpoint_of(storage: Storage, job: str, epoch: int) -> str:
    return f"{storage.checkpoints}/test/{job}/epoch-{epoch}"


@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_sigkill_at_random_points_then_restore_is_exactly_once(kafka, tmp_path, storage):
    """Rule 4 with the Iceberg sink: three kills anywhere in a batch, each restored; the
    table is created by the first batch, partitioned by topic."""
    table = new_table()
    sigkill_at_random_points_then_restore(
        kafka,
        tmp_path,
        storage,
        kills=3,
        sink=iceberg_sink(table, partitionBy=["partition"]),
        read_rows=lambda _storage: iceberg_rows(table),
    )
    spec = load(table).spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("partition", "identity")]


@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_a_restore_does_not_write_again_a_batch_the_table_committed(kafka, tmp_path, storage):
    """The driver SIGKILLed right after the table committed batch 2 and before Spark wrote
    `commits/2` (the sink's fault point): the restore replays the batch (same id, same
    offsets) and the table keeps it once: one snapshot per batch, none for the replay."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(6000))
    table = new_table()
    manifest = job_manifest("replay", kafka.bootstrap, topic, tmp_path, storage)
    manifest["spec"]["job"]["sink"] = iceberg_sink(table)
    crashing = {**storage.env, CRASH_AFTER_COMMIT_ENV: "2"}
    runner = RunnerProcess(manifest, tmp_path, env=crashing).start()
    assert runner.wait(180) == -signal.SIGKILL
    checkpoint = checkpoint_of(storage, "replay", 1)
    assert committed_batch(table, checkpoint) == 2

    runner.env = storage.env
    runner.start()
    report = wait_for_all(runner, kafka.bootstrap, topic)
    assert (report["restoredBatch"], report["rerunBatch"]) == (1, 2)
    assert runner.terminate() == 0
    assert_exactly_once(storage, range(6000), iceberg_rows(table))
    assert "batch 2 is in the Iceberg table already" in runner.output()
    last = report["latestBatch"]["batchId"]
    assert batch_snapshots(table, checkpoint) == list(range(last + 1))


@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_a_redeploy_counts_the_tables_commit_as_durable(kafka, tmp_path, storage):
    """Rule 9 with the Iceberg sink: epoch 1 dies after a table commit whose commit-log entry
    and group commit never happened; epoch 2's catch-up finds the batch in the table's
    snapshots, and the table holds every record once across both epochs."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(6000))
    table = new_table()
    manifest = job_manifest("redeploy", kafka.bootstrap, topic, tmp_path, storage)
    manifest["spec"]["job"]["sink"] = iceberg_sink(table)
    crashing = {**storage.env, CRASH_AFTER_COMMIT_ENV: "2"}
    first = RunnerProcess(manifest, tmp_path, epoch=1, env=crashing).start()
    assert first.wait(180) == -signal.SIGKILL
    previous = checkpoint_of(storage, "redeploy", 1)
    assert committed_batch(table, previous) == 2
    commit_offsets(kafka.bootstrap, "redeploy-group", topic, {0: 0, 1: 0})  # commits lost

    second = RunnerProcess(manifest, tmp_path, epoch=2, env=storage.env)
    report = second.start("--previous-checkpoint", previous).wait_for_batch(0)
    caught_up = report["previousCheckpoint"]
    assert (caught_up["outcome"], caught_up["batch"]) == ("committed", 2), caught_up
    produce(kafka.bootstrap, topic, range(6000, 8000))
    report = wait_for_all(second, kafka.bootstrap, topic)
    assert second.terminate() == 0
    assert_exactly_once(storage, range(8000), iceberg_rows(table))
    ends = report["latestBatch"]["endOffsets"][topic]
    assert group_offsets(kafka.bootstrap, "redeploy-group", topic) == {
        int(p): o for p, o in ends.items()
    }
