"""The Delta table sink: exactly once for every reader, through restores and redeploys.

Each test runs the runner as a real process on local Spark against a real broker and reads
the table back through delta-rs: what any Delta reader sees. The table and the checkpoints
live on a real object store (MinIO, s3a://) for the random kills (three restores there) and on
a local disk for the exact kill points; test_delta_maintenance.py's redeploy is on s3a://.

The kill point that matters is between the table's commit and the checkpoint's commit-log
entry: the sink's fault point (`CRASH_AFTER_COMMIT_ENV`) SIGKILLs the driver exactly there.
`rewind_to_the_table_commit` makes the same state after a kill elsewhere (for the maintenance
tests, which need the job running first).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from devbed.object_store import Storage
from spark_app.sinks.table_writer import CRASH_AFTER_COMMIT_ENV
from tests.integration.spark_app.test_runner import (
    assert_exactly_once,
    sigkill_at_random_points_then_restore,
    wait_for_all,
)
from tests.support.delta_output import committed_batch, delta_rows, delta_sink, storage_table
from tests.support.kafka_tools import commit_offsets, group_offsets, new_topic, produce
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration


def delta_job(name: str, bootstrap: str, topic: str, tmp_path: Path, storage: Storage) -> dict:
    manifest = job_manifest(name, bootstrap, topic, tmp_path, storage)
    manifest["spec"]["job"]["sink"] = delta_sink(storage)
    return manifest


def checkpoint_of(storage: Storage, job: str, epoch: int) -> str:
    return f"{storage.checkpoints}/test/{job}/epoch-{epoch}"


def rewind_to_the_table_commit(storage: Storage, checkpoint: str, batch: int) -> None:
    """The checkpoint as a kill between the table's commit of `batch` and Spark's commit-log
    entry leaves it: no `commits/<batch>`, and no later batch planned yet."""
    from pyarrow import fs

    base = checkpoint.removeprefix("file://").removeprefix("s3a://")
    store = storage.filesystem
    for log in ("commits", "offsets"):
        for entry in store.get_file_info(fs.FileSelector(f"{base}/{log}")):
            name = entry.base_name.removeprefix(".").removesuffix(".crc")  # a local checksum
            if name.isdigit() and int(name) >= batch + (log == "offsets"):
                store.delete_file(entry.path)


def stop_after_a_table_commit(runner: RunnerProcess, storage: Storage, checkpoint: str) -> int:
    """Runs until the table has committed a batch, SIGKILLs the driver and returns the
    table's newest batch for this checkpoint, its commit-log entry removed."""
    runner.wait_for_batch(2)
    runner.kill()
    batch = committed_batch(storage, checkpoint)
    assert batch is not None and batch >= 2
    rewind_to_the_table_commit(storage, checkpoint, batch)
    return batch


@pytest.mark.timeout(1200)  # four starts, each bounded by RESTORE_BOUND_S
@pytest.mark.parametrize("storage", ["s3a"], indirect=True)
def test_sigkill_at_random_points_then_restore_is_exactly_once(kafka, tmp_path, storage):
    """Rule 4 with the table sink on the object store: three kills anywhere in a batch, each
    restored (the file sink's test makes five)."""
    sigkill_at_random_points_then_restore(
        kafka, tmp_path, storage, kills=3, sink=delta_sink(storage), read_rows=delta_rows
    )


@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_a_restore_does_not_write_again_a_batch_the_table_committed(kafka, tmp_path, storage):
    """The driver SIGKILLed right after the table committed batch 2 and before Spark wrote
    `commits/2` (the sink's fault point): the restore replays the batch (same id, same
    offsets) and the table keeps it once."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(6000))
    manifest = delta_job("replay", kafka.bootstrap, topic, tmp_path, storage)
    crashing = {**storage.env, CRASH_AFTER_COMMIT_ENV: "2"}
    runner = RunnerProcess(manifest, tmp_path, env=crashing).start()
    assert runner.wait(180) == -signal.SIGKILL
    checkpoint = checkpoint_of(storage, "replay", 1)
    assert committed_batch(storage, checkpoint) == 2
    versions = storage_table(storage).version()

    runner.env = storage.env
    runner.start()
    report = wait_for_all(runner, kafka.bootstrap, topic)
    assert (report["restoredBatch"], report["rerunBatch"]) == (1, 2)
    assert runner.terminate() == 0
    assert_exactly_once(storage, range(6000), delta_rows(storage))
    assert "batch 2 is in the Delta table already" in runner.output()
    # the replay made no commit: each later version is one later batch
    history = storage_table(storage).history()
    later = [h for h in history if h["version"] > versions and h["operation"] == "WRITE"]
    assert len(later) == report["latestBatch"]["batchId"] - 2


@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_a_redeploy_counts_the_tables_commit_as_durable(kafka, tmp_path, storage):
    """Rule 9 with the table sink: epoch 1 dies after a table commit whose commit-log entry
    and group commit never happened; epoch 2's catch-up finds the batch in the table, and the
    table holds every record once across both epochs (one table, two queries)."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(6000))
    manifest = delta_job("redeploy", kafka.bootstrap, topic, tmp_path, storage)
    crashing = {**storage.env, CRASH_AFTER_COMMIT_ENV: "2"}
    first = RunnerProcess(manifest, tmp_path, epoch=1, env=crashing).start()
    assert first.wait(180) == -signal.SIGKILL
    previous = checkpoint_of(storage, "redeploy", 1)
    batch = committed_batch(storage, previous)
    assert batch == 2
    commit_offsets(kafka.bootstrap, "redeploy-group", topic, {0: 0, 1: 0})  # commits lost
    redeploy_finds_the_batch(kafka.bootstrap, manifest, tmp_path, storage, previous, batch)


def redeploy_finds_the_batch(
    bootstrap: str, manifest: dict, tmp_path: Path, storage: Storage, previous: str, batch: int
) -> None:
    """Epoch 2 of a job whose epoch 1 (6000 records produced, checkpoint `previous`) died
    after the table committed `batch`: its catch-up finds the batch, 2000 more records
    arrive, and the table holds every record once; the group ends at the last batch's end."""
    source = manifest["spec"]["job"]["source"]
    (topic,), group = source["subscribe"], source["groupId"]
    second = RunnerProcess(manifest, tmp_path, epoch=2, env=storage.env)
    report = second.start("--previous-checkpoint", previous).wait_for_batch(0)
    caught_up = report["previousCheckpoint"]
    assert (caught_up["outcome"], caught_up["batch"]) == ("committed", batch), caught_up
    produce(bootstrap, topic, range(6000, 8000))
    report = wait_for_all(second, bootstrap, topic)
    assert second.terminate() == 0
    assert_exactly_once(storage, range(8000), delta_rows(storage))
    ends = report["latestBatch"]["endOffsets"][topic]
    assert group_offsets(bootstrap, group, topic) == {int(p): o for p, o in ends.items()}
