"""The Iceberg table sink: exactly once for every reader, through restores, redeploys and
maintenance, on both catalog protocols.

Each test runs the runner as a real process on local Spark against a real broker, commits
through a real catalog (Apache Iceberg's own REST server; PyIceberg's SQL catalog on a real
PostgreSQL server, its password given as a Secret's would be) and reads the table back
through the catalog with PyIceberg: what any Iceberg reader sees. The kill point that
matters is between the table's commit and the checkpoint's commit-log entry: the sink's
fault point (`CRASH_AFTER_COMMIT_ENV`) SIGKILLs the driver exactly there. Between that kill
and the next start, maintenance rewrites the small files into one (a REPLACE snapshot) and
expires every snapshot but the newest: the batch must still be found (rule 4).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyarrow.fs import FileSelector
from pyiceberg.table.snapshots import Operation

from devbed.iceberg_catalog import RestCatalog
from devbed.ports import free_port
from devbed.postgres import PostgresServer
from spark_app.api.iceberg_spec import CREDENTIAL_ENV
from spark_app.sinks.iceberg_sink import BATCH_PROPERTY, newest_batch
from spark_app.sinks.table_writer import CRASH_AFTER_COMMIT_ENV
from tests.integration.spark_app.test_runner import (
    assert_exactly_once,
    sigkill_at_random_points_then_restore,
    wait_for_all,
)
from tests.support.iceberg_output import (
    iceberg_rows,
    maintain,
    open_table,
    postgres_sink,
    read_alike_by_java,
    rest_sink,
)
from tests.support.kafka_tools import commit_offsets, group_offsets, new_topic, produce
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def rest_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestCatalog]:
    with RestCatalog(tmp_path_factory.mktemp("iceberg-rest")) as catalog:
        yield catalog


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


def crashed_after_the_table_commit(
    kafka, tmp_path: Path, env: dict, sink: dict, name: str, storage
) -> tuple[dict, str, RunnerProcess]:
    """Epoch 1 of a job over 6000 records (its environment `env`), SIGKILLed right after the
    table committed batch 2 (before `commits/2`), then maintenance beside it. The manifest,
    the checkpoint and the runner."""
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(6000))
    manifest = job_manifest(name, kafka.bootstrap, topic, tmp_path, storage)
    manifest["spec"]["job"]["sink"] = sink
    runner = RunnerProcess(manifest, tmp_path, env={**env, CRASH_AFTER_COMMIT_ENV: "2"})
    assert runner.start().wait(180) == -signal.SIGKILL, runner.tail()
    checkpoint = f"{storage.checkpoints}/test/{name}/epoch-1"
    assert newest_batch(open_table(sink, env, storage), checkpoint) == 2
    assert maintain(manifest, tmp_path, env, storage) == 1  # only the rewrite's is left
    summary = open_table(sink, env, storage).current_snapshot().summary
    assert summary.operation == Operation.REPLACE
    assert BATCH_PROPERTY not in summary.additional_properties
    return manifest, checkpoint, runner


@pytest.mark.timeout(900)  # three starts, each bounded by RESTORE_BOUND_S
@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_sigkill_at_random_points_then_restore_is_exactly_once(
    kafka, tmp_path, storage, rest_catalog
):
    """Rule 4 with the Iceberg sink through the REST catalog: two kills anywhere in a batch,
    each restored."""
    sink = rest_sink(rest_catalog, "lake.kills")
    rows = sigkill_at_random_points_then_restore(
        kafka, tmp_path, storage, kills=2, sink=sink, read_rows=lambda _: iceberg_rows(sink)
    )
    read_alike_by_java(rest_catalog, sink, rows)


@pytest.mark.parametrize("storage", ["s3a"], indirect=True)
def test_a_restore_after_maintenance_does_not_write_again_a_committed_batch(
    kafka, tmp_path, storage, postgres
):
    """SQL catalog on PostgreSQL, its password only in the driver's environment (as from
    spec.job.sink.catalog.credentialsSecret); the table's files, like the checkpoint, in a
    bucket of a real object store (s3a://, MinIO). The restore replays batch 2 (same id, same
    offsets): the table property its commit set still names it after the snapshot's expiry,
    so the replay writes nothing and every record is in the table once."""
    sink = postgres_sink(postgres, storage, "lake.replay")
    env = {**storage.env, CREDENTIAL_ENV: postgres.password}
    manifest, _, runner = crashed_after_the_table_commit(
        kafka, tmp_path, env, sink, "replay", storage
    )
    (topic,) = manifest["spec"]["job"]["source"]["subscribe"]
    snapshots = len(open_table(sink, env, storage).snapshots())
    runner.env = env
    runner.start()
    report = wait_for_all(runner, kafka.bootstrap, topic)
    assert (report["restoredBatch"], report["rerunBatch"]) == (1, 2)
    assert runner.terminate() == 0
    assert_exactly_once(storage, range(6000), iceberg_rows(sink, env, storage))
    assert "batch 2 is in the Iceberg table already" in runner.output()
    assert postgres.password not in runner.output()  # nor in the driver's log
    # the replay made no commit: each later snapshot is one later batch
    later = len(open_table(sink, env, storage).snapshots()) - snapshots
    assert later == report["latestBatch"]["batchId"] - 2
    in_bucket = storage.filesystem.get_file_info(
        FileSelector(f"{storage.root}/warehouse", recursive=True)
    )
    assert any(f.path.endswith(".parquet") for f in in_bucket)  # the files went to the store


@pytest.mark.parametrize("storage", ["file"], indirect=True)
def test_a_redeploy_after_maintenance_counts_the_tables_commit_as_durable(
    kafka, tmp_path, storage, rest_catalog
):
    """REST catalog. Rule 9: epoch 1 died after a table commit whose commit-log entry and
    group commit never happened, and maintenance expired that commit's snapshot; epoch 2's
    catch-up finds the batch in the table, and the table holds every record once across both
    epochs (one table, two queries)."""
    sink = rest_sink(rest_catalog, "lake.redeploy")
    manifest, previous, _ = crashed_after_the_table_commit(
        kafka, tmp_path, storage.env, sink, "redeploy", storage
    )
    (topic,) = manifest["spec"]["job"]["source"]["subscribe"]
    commit_offsets(kafka.bootstrap, "redeploy-group", topic, {0: 0, 1: 0})  # commits lost
    second = RunnerProcess(manifest, tmp_path, epoch=2, env=storage.env)
    report = second.start("--previous-checkpoint", previous).wait_for_batch(0)
    caught_up = report["previousCheckpoint"]
    assert (caught_up["outcome"], caught_up["batch"]) == ("committed", 2), caught_up
    produce(kafka.bootstrap, topic, range(6000, 8000))
    wait_for_all(second, kafka.bootstrap, topic)
    assert second.terminate() == 0
    rows = iceberg_rows(sink)
    assert_exactly_once(storage, range(8000), rows)
    read_alike_by_java(rest_catalog, sink, rows)  # a second reader, after the maintenance too


def test_a_catalog_away_at_the_start_fails_the_start_naming_it_and_reads_nothing(kafka, tmp_path):
    """Every batch commits through the catalog: one that does not answer before the query
    starts is exit 1 (restarted with backoff) with a termination message naming the field,
    before anything is read or planned."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, topic, range(10))
    manifest = job_manifest("nocatalog", kafka.bootstrap, topic, tmp_path)
    away = {"type": "rest", "uri": f"http://127.0.0.1:{free_port()}"}
    manifest["spec"]["job"]["sink"] = {"format": "iceberg", "table": "lake.t", "catalog": away}
    termination = tmp_path / "termination-log"
    termination.touch()
    runner = RunnerProcess(manifest, tmp_path, env={"STREAMJOB_TERMINATION_LOG": str(termination)})
    assert runner.start().wait(180) == 1, runner.tail()
    said = termination.read_text()
    assert said.startswith(f"spec.job.sink.catalog: the Iceberg catalog at {away['uri']}"), said
    assert "restartPolicy.backoff" in said
    assert group_offsets(kafka.bootstrap, "nocatalog-group", topic) == {0: None}
    assert not list((tmp_path / "checkpoints").rglob("offsets/*"))  # no batch planned
