"""failOnDataLoss while planning (semantics rule 15): what a batch's or a fresh start's
positions lose against the log as it is now. Pure, so that the driver (`driver_side`) and
the simulation (`simulation/losses.py`) run the same rule.

The executors apply the same option to what goes missing between the plan and the read
(`partition_range.offsets_lost`, `log_truncated`)."""

from __future__ import annotations

from dataclasses import dataclass

from spark_app.api.offsets import Positions, StartDecision, TopicPartition
from spark_app.source.partition_range import DataLossError


@dataclass(frozen=True)
class Loss:
    tp: TopicPartition
    offset: int  # the position the read would resume from
    skipped: int  # offsets no read will return (0: the partition is gone)
    problem: str


def losses(begin: Positions, latest: Positions, low: Positions) -> list[Loss]:
    """What reading on from `begin` loses, given each partition's log end (`latest`) and log
    start (`low`, where known): a partition gone, a log that ends before the position (the
    topic recreated, an unclean election), offsets retention deleted before they were read."""
    found = []
    for tp, offset in sorted(begin.items()):
        start = low.get(tp)
        if tp not in latest:
            found.append(Loss(tp, offset, 0, f"{_name(tp)} no longer exists (it was at {offset})"))
        elif latest[tp] < offset:
            problem = (
                f"{_name(tp)} ends at {latest[tp]}, before offset {offset} the job resumes "
                "from (was the topic recreated?)"
            )
            found.append(Loss(tp, offset, offset - latest[tp], problem))
        elif start is not None and offset < start:
            problem = (
                f"{_name(tp)}: offsets {offset}..{start - 1} were deleted by retention before "
                f"they were read (log start {start})"
            )
            found.append(Loss(tp, offset, start - offset, problem))
    return found


def resumed_from(decisions: dict[TopicPartition, StartDecision]) -> Positions:
    """Where a fresh start resumes, for the check: the group's committed offset where it was
    below the log start and the reset strategy chose the start instead (retention deleted
    the records between the two before the group read them), else the start chosen. (One
    past the log end is a recreated topic: its records are all new, none is lost.)"""
    return {
        tp: d.replaced if d.replaced is not None and d.replaced < d.offset else d.offset
        for tp, d in decisions.items()
    }


def judge(found: list[Loss], fail_on_data_loss: bool) -> None:
    """failOnDataLoss=true: the first loss fails the query, naming it and the way out."""
    if found and fail_on_data_loss:
        raise DataLossError(
            found[0].problem + "; failOnDataLoss=true. Set failOnDataLoss=false to skip the "
            "lost offsets, or move the group with an offsets action and redeploy"
        )


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"
