"""Maintenance of a job's Delta table while the job runs keeps every record exactly once.

The maintenance CLI (spark_app/sinks/delta_maintenance.py) runs as a real process, as a CronJob
runs it, beside the runner (a real process on local Spark, a real broker): compaction, a log
checkpoint with cleanup under a short `delta.logRetentionDuration`, and vacuum with no
retention. Then the two moments that read the table's app transactions happen after the
commit file that carried the batch is gone: a restore's replay of a batch the table has
(made exact as in test_delta_sink.py: a SIGKILL, then the checkpoint rewound to the table's
commit) and a redeploy's catch-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from devbed.object_store import Storage
from devbed.polling import wait_for
from devbed.ports import free_port
from spark_app.sinks.delta_maintenance import EXIT_NO_TABLE, EXIT_UNREACHABLE
from tests.integration.spark_app.test_delta_sink import (
    checkpoint_of,
    redeploy_finds_the_batch,
    rewind_to_the_table_commit,
    stop_after_a_table_commit,
)
from tests.integration.spark_app.test_runner import assert_exactly_once, wait_for_all
from tests.support.delta_output import (
    commit_of_batch,
    committed_batch,
    data_files,
    delta_rows,
    delta_sink,
    live_files,
    log_file_age,
    log_versions,
    storage_table,
)
from tests.support.kafka_tools import (
    ContinuousProducer,
    commit_offsets,
    new_topic,
    produce,
)
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration

LOG_RETENTION_S = 1  # the table's delta.logRetentionDuration: cleanup has work within a test


def maintained_job(name: str, bootstrap: str, topic: str, tmp_path: Path, storage: Storage):
    manifest = job_manifest(name, bootstrap, topic, tmp_path, storage)
    manifest["spec"]["job"]["sink"] = {
        **delta_sink(storage),
        "tableProperties": {"delta.logRetentionDuration": f"interval {LOG_RETENTION_S} seconds"},
    }
    return manifest


def maintenance(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spark_app.sinks.delta_maintenance", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def maintain(runner: RunnerProcess) -> dict:
    """Every step, vacuum with no retention, on the job's manifest; its JSON summary."""
    done = maintenance(
        "--manifest",
        str(runner.manifest_path),
        "--retention-hours",
        "0",
        "--no-readers-of-old-versions",
        env=runner.env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def past_the_log_retention(storage: Storage, name: str) -> None:
    """Until `_delta_log/<name>` is older than the table's log retention: cleanup deletes the
    entries behind a checkpoint only once they are older than it."""
    wait_for(  # + 1 s: an object store's file times have whole seconds
        lambda: log_file_age(storage, name) > LOG_RETENTION_S + 1,
        timeout=LOG_RETENTION_S + 10,
        what=f"{name} to be older than the log retention",
    )


def newest_commit(storage: Storage) -> str:
    return f"{max(log_versions(storage)):020d}.json"


def test_maintenance_while_the_job_runs_keeps_exactly_once(kafka, tmp_path):
    """Under continuous production: three maintenance runs beside the job, a kill after a
    table commit, maintenance that removes that commit's file, a restore whose replay finds
    the batch in the log checkpoint; every record once, fewer files."""
    storage = Storage(tmp_path)
    topic = new_topic(kafka.bootstrap, partitions=2)
    runner = RunnerProcess(
        maintained_job("maint", kafka.bootstrap, topic, tmp_path, storage), tmp_path
    )
    checkpoint = checkpoint_of(storage, "maint", 1)
    with ContinuousProducer(kafka.bootstrap, topic, rate=400) as producer:
        batch = runner.start().wait_for_batch(3)["latestBatch"]["batchId"]
        live = []
        for _ in range(3):
            live.append(maintain(runner))
            checkpoint_file = f"{live[-1]['log']['checkpointVersion']:020d}.checkpoint.parquet"
            past_the_log_retention(storage, checkpoint_file)
            batch = runner.wait_for_batch(batch + 1)["latestBatch"]["batchId"]
        assert runner.process is not None and runner.process.poll() is None
        first = live[0]["compact"]
        assert first["filesRemoved"] > first["filesAdded"] == 1, first
        # the log was cleaned up behind the checkpoints (delta-rs's commits clean up too)
        assert live[-1]["log"]["oldestVersion"] > live[0]["versionBefore"], live

        runner.kill()
        replayed = committed_batch(storage, checkpoint)
        assert replayed is not None
        rewind_to_the_table_commit(storage, checkpoint, replayed)
        its_commit = commit_of_batch(storage, checkpoint, replayed)
        past_the_log_retention(storage, newest_commit(storage))
        cleaned = maintain(runner)
        assert cleaned["log"]["oldestVersion"] > its_commit  # the batch: only in the checkpoint
        assert min(log_versions(storage)) > its_commit

        report = runner.start().wait_for_batch(replayed + 1)
        assert (report["restoredBatch"], report["rerunBatch"]) == (replayed - 1, replayed)
        maintain(runner)  # and once more beside the restored job
        produced = producer.stop()
    wait_for_all(runner, kafka.bootstrap, topic)
    assert runner.terminate() == 0
    assert f"batch {replayed} is in the Delta table already" in runner.output()
    assert_exactly_once(storage, range(produced), delta_rows(storage))

    writes = sum(h["operation"] == "WRITE" for h in storage_table(storage).history())
    replaced = live_files(storage)
    final = maintain(runner)
    assert len(live_files(storage)) == final["compact"]["filesAfter"] == 1 < writes
    replaced -= live_files(storage)
    # vacuum deleted every file compaction replaced (a file the kill left half-written,
    # named by no commit, is not vacuum's: it deletes only files commits removed)
    assert replaced and not replaced & data_files(storage)
    assert_exactly_once(storage, range(produced), delta_rows(storage))


def test_a_redeploy_after_log_cleanup_finds_the_batch_in_the_checkpoint(kafka, tmp_path, minio):
    """On the object store (s3a://, the store's settings from the manifest's spec.s3, the
    key pair from the environment): epoch 1 dies after a table commit whose commit-log entry
    and group commit never happened; maintenance removes that commit's file; epoch 2's
    catch-up still finds the batch."""
    storage = Storage(tmp_path, minio, minio.create_bucket(f"t-{uuid.uuid4().hex[:12]}"))
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(6000))
    manifest = maintained_job("maint-redeploy", kafka.bootstrap, topic, tmp_path, storage)
    first = RunnerProcess(manifest, tmp_path, epoch=1, env=storage.env).start()
    previous = checkpoint_of(storage, "maint-redeploy", 1)
    batch = stop_after_a_table_commit(first, storage, previous)
    commit_offsets(kafka.bootstrap, "maint-redeploy-group", topic, {0: 0, 1: 0})  # lost
    its_commit = commit_of_batch(storage, previous, batch)
    past_the_log_retention(storage, newest_commit(storage))
    summary = maintain(first)
    assert summary["compact"]["filesRemoved"] > 1 and summary["vacuum"]["filesDeleted"] > 1
    assert min(log_versions(storage)) > its_commit

    redeploy_finds_the_batch(kafka.bootstrap, manifest, tmp_path, storage, previous, batch)


def test_no_table_and_an_unreachable_store_are_named(tmp_path, minio):
    """Exit 3 names the path and the flag it came from; exit 4 the endpoint to check."""
    missing = maintenance("--table", f"file://{tmp_path}/no-table")
    assert missing.returncode == EXIT_NO_TABLE, missing.stderr
    assert f"no Delta table at file://{tmp_path}/no-table (--table)" in missing.stderr

    storage = Storage(tmp_path, minio, "no-such-bucket")
    manifest = maintained_job("maint-down", "127.0.0.1:9", "t", tmp_path, storage)
    manifest["spec"]["s3"]["endpoint"] = f"http://127.0.0.1:{free_port()}"  # nothing listens
    path = tmp_path / "down.yaml"
    path.write_text(json.dumps(manifest))
    down = maintenance("--manifest", str(path), env=storage.env)
    assert down.returncode == EXIT_UNREACHABLE, down.stderr
    assert "is unreachable or refused" in down.stderr and "spec.s3.endpoint" in down.stderr
    assert storage.env["AWS_SECRET_ACCESS_KEY"] not in down.stderr + down.stdout
