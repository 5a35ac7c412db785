"""failOnDataLoss while planning (data_loss.py): what a position loses against the log."""

import pytest

from spark_app.api import offsets as off
from spark_app.source.data_loss import judge, losses, resumed_from
from spark_app.source.partition_range import DataLossError

pytestmark = pytest.mark.unit

TP = ("orders", 0)


@pytest.mark.parametrize(
    ("begin", "latest", "low", "skipped", "problem"),
    [
        (10, 100, 0, None, None),  # inside the log
        (10, 100, None, None, None),  # the log start unknown: nothing to say
        (100, 100, 100, None, None),  # at the end, everything read
        (10, 100, 50, 40, "orders-0: offsets 10..49 were deleted by retention"),
        (100, 30, 0, 70, "orders-0 ends at 30, before offset 100 the job resumes from"),
    ],
)
def test_a_position_loses_what_retention_deleted_or_a_shorter_log_no_longer_has(
    begin, latest, low, skipped, problem
):
    found = losses({TP: begin}, {TP: latest}, {} if low is None else {TP: low})
    if skipped is None:
        assert found == []
    else:
        (loss,) = found
        assert (loss.tp, loss.offset, loss.skipped) == (TP, begin, skipped)
        assert loss.problem.startswith(problem)


def test_a_partition_gone_is_a_loss_of_nothing_countable():
    (loss,) = losses({TP: 7}, {}, {})
    assert loss.skipped == 0 and "no longer exists" in loss.problem


def test_a_fresh_start_resumes_from_the_committed_offset_the_reset_replaced_below_the_log():
    """Retention deleted 5..9 before the group read them: the start is 10, the loss 5..9. A
    committed offset past the end is a recreated topic: all its records are new."""
    below = off.resolve_start(TP, "committed", "earliest", 10, 100, 5, None)
    past = off.resolve_start(TP, "committed", "earliest", 10, 100, 500, None)
    inside = off.resolve_start(TP, "committed", "earliest", 10, 100, 42, None)
    latest = off.resolve_start(TP, "committed", "latest", 10, 100, 5, None)
    chosen = off.resolve_start(TP, "earliest", "earliest", 10, 100, 5, None)  # not the group's
    assert resumed_from({TP: below}) == {TP: 5}
    assert resumed_from({TP: past}) == {TP: 10}
    assert resumed_from({TP: inside}) == {TP: 42}
    assert resumed_from({TP: latest}) == {TP: 5}
    assert resumed_from({TP: chosen}) == {TP: 10}
    (loss,) = losses(resumed_from({TP: latest}), {TP: 100}, {TP: 10})
    assert loss.skipped == 5  # what retention took; 10..99 skipped by the strategy chosen


def test_a_committed_offset_past_the_end_with_its_leader_epoch_is_the_groups_position():
    """Committed by a reader (it has a leader epoch), an offset past the log end is where the
    group read to in a log since truncated (an unclean election): kept, for the check to
    judge (rule 16). Without one (set by hand) it is a recreated topic's, reset."""
    kept = off.resolve_start(TP, "committed", "earliest", 10, 100, 500, None, 3)
    reset = off.resolve_start(TP, "committed", "earliest", 10, 100, 500, None, None)
    assert (kept.offset, kept.origin, kept.replaced) == (500, "committed", None)
    assert (reset.offset, reset.origin, reset.replaced) == (10, "earliest", 500)
    (loss,) = losses(resumed_from({TP: kept}), {TP: 100}, {TP: 10})
    assert "ends at 100, before offset 500" in loss.problem


def test_judge_fails_only_under_fail_on_data_loss_naming_the_loss_and_the_ways_out():
    found = losses({TP: 10}, {TP: 100}, {TP: 50})
    judge(found, fail_on_data_loss=False)
    judge([], fail_on_data_loss=True)
    with pytest.raises(DataLossError, match=r"offsets 10\.\.49 .*failOnDataLoss=false.*offsets"):
        judge(found, fail_on_data_loss=True)
