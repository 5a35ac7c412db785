"""Offsets are the checkpoint: canonical JSON, start resolution, rate limiting."""

import json

import pytest

from spark_app.api import offsets as off

pytestmark = pytest.mark.unit

TP = ("orders", 0)


def test_json_is_canonical_whatever_the_insertion_order():
    a = off.to_json({("b", 10): 1, ("a", 2): 3, ("b", 9): 4})
    b = off.to_json({("b", 9): 4, ("a", 2): 3, ("b", 10): 1})
    assert json.dumps(a) == json.dumps(b) == '{"a": {"2": 3}, "b": {"9": 4, "10": 1}}'
    assert off.from_json(json.loads(json.dumps(a))) == {("a", 2): 3, ("b", 9): 4, ("b", 10): 1}


def test_batch_zero_pins_its_start_so_a_replay_starts_at_the_same_place():
    end = off.batch_offset({TP: 50}, start={TP: 7})
    replayed = json.loads(json.dumps(end))  # what Spark hands back after a crash
    assert off.start_positions(off.FRESH_START, replayed) == {TP: 7}
    assert off.start_positions(replayed, off.batch_offset({TP: 60})) == {TP: 50}


@pytest.mark.parametrize(
    ("mode", "reset", "committed", "expected"),
    [
        ("committed", "earliest", 42, off.StartDecision(42, "committed")),
        ("committed", "earliest", None, off.StartDecision(10, "earliest")),
        ("committed", "latest", None, off.StartDecision(100, "latest")),
        ("committed", "earliest", 5, off.StartDecision(10, "earliest", 5)),  # below log start
        ("committed", "latest", 500, off.StartDecision(100, "latest", 500)),  # past the end
        ("earliest", "error", 42, off.StartDecision(10, "earliest")),
        ("latest", "error", 42, off.StartDecision(100, "latest")),
    ],
)
def test_fresh_start_follows_flinks_rules(mode, reset, committed, expected):
    decision = off.resolve_start(
        TP, off.parse_starting_offsets(mode), reset, 10, 100, committed, None
    )
    assert decision == expected


def test_reset_strategy_error_names_the_partition_and_the_fix():
    with pytest.raises(off.StartError, match=r"orders-0: no committed offset.*offsetResetStrategy"):
        off.resolve_start(TP, "committed", "error", 10, 100, None, None)


def test_timestamp_start_uses_the_first_offset_at_or_after_it_else_the_end():
    mode = off.parse_starting_offsets("timestamp:1700000000000")
    assert off.resolve_start(TP, mode, "earliest", 0, 100, None, 33) == off.StartDecision(
        33, "timestamp"
    )
    assert off.resolve_start(TP, mode, "earliest", 0, 100, None, None) == off.StartDecision(
        100, "timestamp"
    )


def test_specific_offsets_with_unnamed_partitions_falling_back_to_committed():
    mode = off.parse_starting_offsets('{"orders": {"0": 20, "1": -2, "2": -1}}')
    assert off.resolve_start(("orders", 0), mode, "earliest", 0, 90, 5, None).offset == 20
    assert off.resolve_start(("orders", 1), mode, "earliest", 3, 90, 5, None).origin == "earliest"
    assert off.resolve_start(("orders", 2), mode, "earliest", 3, 90, 5, None).offset == 90
    assert off.resolve_start(("orders", 3), mode, "earliest", 0, 90, 5, None) == off.StartDecision(
        5, "committed"
    )


@pytest.mark.parametrize(
    "value", ["newest", "timestamp:abc", '{"t": 5}', '{"t": {"x": 1}}', '{"t": {"0": -3}}', "{}"]
)
def test_malformed_starting_offsets_are_rejected_with_the_accepted_forms(value):
    with pytest.raises(ValueError, match="startingOffsets"):
        off.parse_starting_offsets(value)


def test_rate_limit_splits_by_backlog_and_stays_within_bounds():
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 900, ("t", 1): 200, ("t", 2): 5}  # t-2 is new: starts at 0
    end = off.rate_limit(start, latest, 100)
    assert end == {("t", 0): 89, ("t", 1): 109, ("t", 2): 1}  # floor; ceil below 1
    assert all(start.get(tp, 0) <= end[tp] <= latest[tp] for tp in latest)
    assert off.rate_limit(start, latest, 10_000) == latest


def test_lag_counts_offsets_behind_the_log_end():
    assert off.lag({("t", 0): 5, ("t", 1): 10}, {("t", 0): 8, ("t", 1): 10, ("t", 2): 4}) == 7


def test_end_offsets_keep_their_leader_epochs_through_the_json_spark_stores():
    """Rule 16 across reads: the epochs ride beside the offsets, so the read that starts
    where a batch ended (the next batch, a restore) can validate that position."""
    other = ("orders", 1)
    end = off.batch_offset({TP: 50, other: 8}, epochs={TP: 3, ("gone", 0): 9})
    stored = json.dumps(end)  # Spark writes json.dumps(offset) into offsets/N
    assert stored == '{"offsets": {"orders": {"0": 50, "1": 8}}, "epochs": {"orders": {"0": 3}}}'
    restored = json.loads(stored)
    assert off.end_positions(restored) == {TP: 50, other: 8}
    assert off.end_epochs(restored) == {TP: 3}  # none for a partition no epoch came with
    assert off.start_epochs(restored, off.batch_offset({TP: 60})) == {TP: 3}


def test_batch_zero_pins_the_epochs_of_its_start_too():
    end = off.batch_offset({TP: 50}, start={TP: 7}, epochs={TP: 4}, start_epochs={TP: 2})
    replayed = json.loads(json.dumps(end))
    assert off.start_positions(off.FRESH_START, replayed) == {TP: 7}
    assert off.start_epochs(off.FRESH_START, replayed) == {TP: 2}
    assert off.end_epochs(replayed) == {TP: 4}


def test_a_checkpoint_without_epochs_still_restores_with_none_known():
    """Offsets written before epochs were kept: the same positions, no epoch to validate."""
    old_end = json.loads('{"offsets": {"orders": {"0": 50}}}')
    old_batch0 = json.loads('{"offsets": {"orders": {"0": 50}}, "start": {"orders": {"0": 7}}}')
    assert off.end_positions(old_end) == {TP: 50}
    assert off.end_epochs(old_end) == {}
    assert off.start_epochs(old_end, off.batch_offset({TP: 60})) == {}
    assert off.start_epochs(off.FRESH_START, old_batch0) == {}
    assert off.start_positions(off.FRESH_START, old_batch0) == {TP: 7}
    assert json.dumps(off.batch_offset({TP: 50})) == '{"offsets": {"orders": {"0": 50}}}'
    assert off.end_epochs({"offsets": {}, "epochs": {"orders": {"0": -1}}}) == {}


class _Kafka:
    """The driver's Kafka look-ups without a broker: orders-0 ends at 100 with leader epoch
    7, orders-1 at 40 with no epoch given (an old broker)."""

    def __init__(self, options, *args, **kwargs) -> None:
        self.ends = {TP: 100, ("orders", 1): 40}
        self.group: dict = {}  # committed offsets, each with its leader epoch or None

    def topic_partitions(self):
        return sorted(self.ends)

    def log_ends(self, tps):
        return {tp: (0, self.ends[tp]) for tp in tps}, {TP: 7}

    def committed(self, tps, epochs=None):
        found = {tp: self.group[tp] for tp in tps if tp in self.group}
        if epochs is not None:
            epochs.update({tp: e for tp, (_, e) in found.items() if e is not None})
        return {tp: found[tp][0] if tp in found else None for tp in tps}

    def close(self) -> None:
        pass


def _driver_side(monkeypatch, **options: str):
    """A DriverSide on `_Kafka`, reading orders from `options` (default: earliest)."""
    from spark_app.api.options import SourceOptions
    from spark_app.source import driver_side

    monkeypatch.setattr(driver_side, "KafkaMetadata", _Kafka)
    raw = {
        "kafka.bootstrap.servers": "fake:1",
        "subscribe": "orders",
        "startingOffsets": "earliest",
        "partitionDiscoveryIntervalMs": "0",
        "minFetchIntervalMs": "0",
        "commitOffsetsOnCheckpoints": "false",
        **options,
    }
    return driver_side.DriverSide(SourceOptions.parse(raw))


@pytest.fixture
def driver(monkeypatch):
    side = _driver_side(monkeypatch)
    yield side
    side.close()


def test_the_driver_keeps_the_epoch_each_log_end_came_with_and_hands_it_to_the_next_read(
    driver,
):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    batch0 = json.loads(json.dumps(driver.latest_offset(dict(off.FRESH_START), ReadAllAvailable())))
    # earliest (0) and the end (100) are both in the log of the leader of epoch 7
    assert batch0["epochs"] == {"orders": {"0": 7}} and batch0["startEpochs"] == batch0["epochs"]
    first = {p.partition: p.start_epoch for p in driver.plan_partitions(off.FRESH_START, batch0)}
    assert first == {0: 7, 1: None}
    driver.metadata.ends[TP] = 160
    batch1 = json.loads(json.dumps(driver.latest_offset(batch0, ReadMaxRows(20))))
    assert batch1["offsets"] == {"orders": {"0": 120, "1": 40}}
    assert batch1["epochs"] == {"orders": {"0": 7}}
    (partition,) = driver.plan_partitions(batch0, batch1)
    assert (partition.start, partition.start_epoch) == (100, 7)
    # a checkpoint of an older version: its start has no epoch, the read validates nothing
    old = {"offsets": {"orders": {"0": 100, "1": 40}}}
    (partition,) = driver.plan_partitions(old, batch1)
    assert (partition.start, partition.start_epoch) == (100, None)


def test_a_start_from_committed_offsets_validates_them_with_the_epoch_they_were_committed_with(
    monkeypatch,
):
    """Rule 16 on a redeploy: the group's offset 60 of orders-0 was committed with leader
    epoch 5 (the log its reader read below 60). Today's leader is of epoch 7; validating 60
    against epoch 7 would prove nothing about what was read. orders-1's offset was set by
    hand (no epoch committed) and its broker gives none: nothing to validate with."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    side = _driver_side(monkeypatch, **{"kafka.group.id": "g", "startingOffsets": "committed"})
    side.metadata.group = {TP: (60, 5), ("orders", 1): (30, None)}
    try:
        batch0 = json.loads(
            json.dumps(side.latest_offset(dict(off.FRESH_START), ReadAllAvailable()))
        )
        assert batch0["start"] == {"orders": {"0": 60, "1": 30}}
        assert batch0["startEpochs"] == {"orders": {"0": 5}}
        starts = {p.partition: p.start_epoch for p in side.plan_partitions(off.FRESH_START, batch0)}
        assert starts == {0: 5, 1: None}
    finally:
        side.close()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_committed_offset_past_a_truncated_log_is_kept_with_its_epoch_as_a_restore_keeps_its(
    monkeypatch, fail_on_data_loss
):
    """Rule 16 on a redeploy (simulation seed 23): the group committed orders-0 at 150 with
    leader epoch 5, and an unclean election truncated the log to 100. Read as a recreated
    topic, the reset strategy started at 0 and read again what the group had read. The
    position is kept, as a restore keeps its checkpoint's: failOnDataLoss=true fails naming
    it; false waits for the log to pass it, the read then validates it with epoch 5. An
    offset set by hand past the end (orders-1: no epoch) is still a recreated topic's."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_app.source.partition_range import DataLossError

    options = {"kafka.group.id": "g", "startingOffsets": "committed"}
    side = _driver_side(monkeypatch, failOnDataLoss=fail_on_data_loss, **options)
    side.metadata.group = {TP: (150, 5), ("orders", 1): (70, None)}
    try:
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError, match="orders-0 ends at 100, before offset 150"):
                side.latest_offset(dict(off.FRESH_START), ReadAllAvailable())
            return
        batch0 = json.loads(
            json.dumps(side.latest_offset(dict(off.FRESH_START), ReadAllAvailable()))
        )
        assert batch0["start"] == {"orders": {"0": 150, "1": 0}}
        assert batch0["startEpochs"] == {"orders": {"0": 5}}
        assert side.table.snapshot().data_loss_skipped_offsets == 50
    finally:
        side.close()


def test_an_epoch_is_kept_only_with_a_position_its_log_end_covers():
    from spark_app.api.offsets import epochs_at

    ends, epochs = {TP: 100, ("orders", 1): 40}, {TP: 7, ("orders", 1): 2}
    # 120 is past the end epoch 7 came with (a log truncated below a checkpoint, read on
    # with failOnDataLoss=false): no epoch is known for it
    assert epochs_at({TP: 120, ("orders", 1): 40}, ends, epochs) == {("orders", 1): 2}
    assert epochs_at({TP: 100}, ends, epochs) == {TP: 7}


def test_a_partition_a_batch_does_not_move_keeps_its_starts_epoch():
    """Simulation seed 204: read to 2 in epoch 0, an unclean election cut the log to 0 and
    the new leader (epoch 1) wrote 0..1 again; the next batch, unmoved at 2 = the log end,
    stamped 2 with epoch 1, so no read ever found the truncation and the new leader's 0..1
    were committed unread. It keeps epoch 0; a moved one takes the log end's."""
    from spark_app.api.offsets import plan_end

    begin, begin_epochs = {TP: 2, ("orders", 1): 5}, {TP: 0, ("orders", 1): 0}
    ends, epochs = {TP: 2, ("orders", 1): 9}, {TP: 1, ("orders", 1): 1}
    end, end_epochs = plan_end(begin, begin_epochs, ends, epochs, None)
    assert end == {TP: 2, ("orders", 1): 9}
    assert end_epochs == {TP: 0, ("orders", 1): 1}
