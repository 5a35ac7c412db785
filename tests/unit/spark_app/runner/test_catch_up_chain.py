"""Which earlier epoch a fresh start catches up from (`group_offsets.newest_durable`), and
where each epoch of each job writes a file sink (`manifest.epoch_sink_path`): findings 1 and 2
of issue 41, on the runner's side; and the group a run's report says it reads as."""

from __future__ import annotations

import pytest

from spark_app.api.manifest import checkpoint_location, epoch_sink_path, load_manifest
from spark_app.runner.checkpoint_log import DurableBatch
from spark_app.runner.group_offsets import newest_durable, sink_batch
from spark_app.runner.start import start_point

pytestmark = pytest.mark.unit

UID = "0f1e2d3c-0000-4000-8000-00000000000a"


class Logs:
    """A checkpoint's logs as `CheckpointFiles` answers: offsets planned, commits written."""

    def __init__(self, planned: list[int], committed: list[int]) -> None:
        self.planned, self.committed = planned, committed

    def newest(self, log: str) -> int | None:
        ids = self.planned if log == "offsets" else self.committed
        return max(ids) if ids else None

    def durable_batch(self, in_sink: int | None = None) -> DurableBatch | None:
        in_log = [in_sink] if in_sink in self.planned else []  # as CheckpointFiles counts it
        newest = max([*self.committed, *in_log], default=None)
        return None if newest is None else DurableBatch(newest, {("t", 0): 10 * (newest + 1)})


def test_the_catch_up_reaches_past_epochs_whose_query_never_started():
    epochs = {"e3": Logs([], []), "e2": Logs([], []), "e1": Logs([0, 1, 2], [0, 1])}
    location, batch = newest_durable(["e3", "e2", "e1"], epochs.__getitem__, lambda _: None)
    assert location == "e1" and batch == DurableBatch(1, {("t", 0): 20})


def test_an_epoch_whose_query_started_ends_the_walk_even_with_nothing_durable():
    """Its start caught the older epochs up already: nothing of theirs is committed again."""
    epochs = {"e2": Logs([0], []), "e1": Logs([0, 1], [0, 1])}
    assert newest_durable(["e2", "e1"], epochs.__getitem__, lambda _: None) == ("e2", None)
    assert newest_durable([], epochs.__getitem__, lambda _: None) == ("", None)


def test_the_sinks_own_batch_counts_as_durable():
    epochs = {"e2": Logs([], []), "e1": Logs([0, 1], [0])}
    location, batch = newest_durable(["e2", "e1"], epochs.__getitem__, lambda at: 1)
    assert location == "e1" and batch is not None and batch.batch_id == 1


def test_each_job_and_epoch_has_a_file_sink_directory_of_its_own():
    ours = checkpoint_location("s3a://c", "team", "orders", 2, UID)
    assert ours == f"s3a://c/team/orders/{UID}/epoch-2"
    assert epoch_sink_path("s3a://out/orders/", ours) == f"s3a://out/orders/{UID}/epoch-2"
    legacy = checkpoint_location("s3a://c", "team", "orders", 2)
    assert epoch_sink_path("s3a://out/orders", legacy) == "s3a://out/orders/epoch-2"
    assert epoch_sink_path("s3a://out/orders", "s3a://c/elsewhere") is None


def test_the_sinks_batch_is_read_where_that_checkpoints_query_wrote():
    ours = checkpoint_location("s3a://c", "team", "orders", 2, UID)
    logs: list[str] = []
    sink_batch("parquet", "s3a://out", ours, lambda *_: None, lambda d: logs.append(d) or 4)
    assert logs == [f"s3a://out/{UID}/epoch-2/_spark_metadata"]
    apps: list[str] = []
    for table_sink in ("delta", "iceberg"):
        sink_batch(table_sink, None, ours, lambda app: apps.append(app) or 3, lambda _: None)
    assert apps == [ours, ours]


def test_the_report_names_the_group_a_run_reads_as():
    """The operator's status.checkpointGroupId follows the runs that started on a checkpoint
    (simulation seed 1140): the start's report says which group it reads as."""
    manifest = load_manifest(
        {
            "apiVersion": "sparkkafka.dev/v1alpha1",
            "kind": "StreamingJob",
            "metadata": {"name": "orders"},
            "spec": {
                "job": {
                    "source": {"bootstrapServers": "k:9092", "subscribe": ["t"], "groupId": "g2"},
                    "sink": {"format": "noop"},
                },
                "checkpoint": {"location": "file:///mnt/ckpt"},
            },
        }
    )
    restored = start_point(Logs([0, 1], [0, 1]), "e1", manifest)  # type: ignore[arg-type]
    assert (restored["startPath"], restored["restoredBatch"], restored["groupId"]) == (
        "restored",
        1,
        "g2",
    )
