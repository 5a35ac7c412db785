"""Offsets are the checkpoint: canonical JSON, start resolution, rate limiting."""

import json

import pytest

from spark_app import offsets as off

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
        ("committed", "earliest", 5, off.StartDecision(10, "earliest")),  # below log start
        ("committed", "latest", 500, off.StartDecision(100, "latest")),  # past the end
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
