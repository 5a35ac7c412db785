"""Offsets actions on a job's consumer group: list, reset (earliest, latest, a timestamp) and
alter (per-partition offsets), for all or some partitions. The one implementation behind
`python -m spark_app offsets ...` and the operator's `spec.offsetsAction`.

* `plan` is pure: from the partitions' committed offsets and log ranges (and, for a reset to
  a timestamp, the offsets Kafka resolved for it) it computes the new offsets, or raises
  `OffsetsRefused` naming the partition and its valid range. Nothing is written then.
* `spark_app.kafka.offsets_run.run` does the I/O with the source's own look-ups
  (`spark_app.kafka.metadata`): partitions, watermarks (the LSO under read_committed),
  committed offsets (read through a consumer of the group, never the admin API, see that
  module), offsets for a time; then commits the plan with a standalone commit of the group
  (no subscription, so no rebalance). The broker refuses a standalone commit while the group
  has live members: the error says so.

A valid offset lies in [log start, log end]: the log end is "nothing left to read"; anything
outside is refused, never clamped. A reset to a timestamp that no record reaches goes to the
log end, as Kafka's own tools do. Callers make sure the job does not run (the operator: only
while suspended with no driver or executor pods; the CLI: the user's word).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from spark_app.api.offsets import TopicPartition

Action = Literal["list", "reset", "alter"]
ResetTo = Literal["earliest", "latest", "timestamp"]
ACTIONS = ("list", "reset", "alter")
RESET_TARGETS = ("earliest", "latest", "timestamp")


class OffsetsRefused(ValueError):
    """The request cannot be applied as asked (out of range, unknown partition, no group);
    nothing was written."""


@dataclass(frozen=True)
class OffsetsRequest:
    action: Action
    to: ResetTo | None = None  # reset only
    timestamp_ms: int | None = None  # reset to a timestamp only
    # None: every partition of the job's topics. alter: each with its offset.
    partitions: tuple[tuple[str, int, int | None], ...] | None = None

    def describe(self) -> str:
        what: str = self.action
        if self.action == "reset":
            what += f" to {self.to}" + (f" {self.timestamp_ms}" if self.to == "timestamp" else "")
        if self.partitions is not None:
            what += " of " + ", ".join(f"{t}-{p}" for t, p, _ in self.partitions)
        return what


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition: committed offset before and after (the same for list), log range."""

    topic: str
    partition: int
    before: int | None
    after: int | None
    log_start: int
    log_end: int

    @property
    def lag(self) -> int:
        """What is left to read from the offset the group holds after the action."""
        position = self.after if self.after is not None else self.log_start
        return max(self.log_end - position, 0)

    def as_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "before": self.before,
            "after": self.after,
            "logStart": self.log_start,
            "logEnd": self.log_end,
            "lag": self.lag,
        }


@dataclass(frozen=True)
class OffsetsResult:
    request: OffsetsRequest
    group: str
    partitions: tuple[PartitionOffsets, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> int:
        return sum(1 for p in self.partitions if p.before != p.after)

    def summary(self) -> str:
        if self.request.action == "list":
            lag = sum(p.lag for p in self.partitions)
            return f"group {self.group}: {len(self.partitions)} partition(s), lag {lag}"
        return (
            f"group {self.group}: {self.request.describe()}: {self.changed} of "
            f"{len(self.partitions)} partition(s) changed"
        )


def parse_timestamp(value: str | int) -> int:
    """Epoch milliseconds, or RFC 3339 (2026-11-23T05:00:00Z) as epoch milliseconds."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OffsetsRefused(
            f"timestamp {value!r} is neither epoch milliseconds nor RFC 3339 "
            "(e.g. 2026-11-23T05:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise OffsetsRefused(f"timestamp {value!r} has no time zone (add Z or +hh:mm)")
    return int(moment.timestamp() * 1000)


def selected(request: OffsetsRequest, available: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions the request acts on; an unknown one is refused by name."""
    available = sorted(available)
    if request.partitions is None:
        return available
    known = set(available)
    unknown = [f"{t}-{p}" for t, p, _ in request.partitions if (t, p) not in known]
    if unknown:
        raise OffsetsRefused(
            f"partition(s) {', '.join(unknown)} are not partitions of the job's topics "
            f"({len(known)} known)"
        )
    return sorted({(t, p) for t, p, _ in request.partitions})


def plan(
    request: OffsetsRequest,
    committed: Mapping[TopicPartition, int | None],
    ranges: Mapping[TopicPartition, tuple[int, int]],
    by_time: Mapping[TopicPartition, int | None] | None = None,
) -> dict[TopicPartition, int]:
    """The offsets to commit per partition (empty for list); refuses what is out of range."""
    tps = selected(request, ranges)
    if request.action == "list":
        return {}
    if request.action == "alter":
        wanted = {(t, p): o for t, p, o in request.partitions or ()}
        missing = [f"{t}-{p}" for (t, p), o in wanted.items() if o is None]
        if request.partitions is None or missing:
            raise OffsetsRefused(
                "alter needs an offset for each partition"
                + (f" (missing for {', '.join(missing)})" if missing else "")
            )
        out_of_range = [
            f"{t}-{p} offset {wanted[(t, p)]} is outside [{ranges[(t, p)][0]}, {ranges[(t, p)][1]}]"
            for t, p in tps
            if not ranges[(t, p)][0] <= int(wanted[(t, p)] or 0) <= ranges[(t, p)][1]
        ]
        if out_of_range:
            raise OffsetsRefused(
                "out of range: "
                + "; ".join(out_of_range)
                + " (valid: log start to log end, inclusive)"
            )
        return {tp: int(wanted[tp] or 0) for tp in tps}
    if request.to == "earliest":
        return {tp: ranges[tp][0] for tp in tps}
    if request.to == "latest":
        return {tp: ranges[tp][1] for tp in tps}
    if request.to == "timestamp":
        if by_time is None:
            raise OffsetsRefused("reset to a timestamp needs the offsets for that time")
        result = {}
        for tp in tps:
            found = by_time.get(tp)
            low, high = ranges[tp]
            # no record at or after the time: the log end; before the log start: the start
            result[tp] = high if found is None else min(max(found, low), high)
        return result
    raise OffsetsRefused(f"reset needs to: one of {', '.join(RESET_TARGETS)}")


def request_of(
    action: str,
    to: str | None = None,
    timestamp: str | int | None = None,
    partitions: Sequence[tuple[str, int, int | None]] | None = None,
) -> OffsetsRequest:
    """A checked request from loose parts (CLI arguments, the operator's spec)."""
    if action not in ACTIONS:
        raise OffsetsRefused(f"action {action!r} must be one of {', '.join(ACTIONS)}")
    if action == "reset" and to not in RESET_TARGETS:
        raise OffsetsRefused(f"reset needs to: one of {', '.join(RESET_TARGETS)}")
    if action != "reset" and to is not None:
        raise OffsetsRefused(f"to is for reset only, not {action}")
    timestamp_ms = None
    if to == "timestamp":
        if timestamp is None:
            raise OffsetsRefused("reset to timestamp needs a timestamp")
        timestamp_ms = parse_timestamp(timestamp)
    elif timestamp is not None:
        raise OffsetsRefused("timestamp is for reset to timestamp only")
    parts = tuple((t, int(p), o) for t, p, o in partitions) if partitions else None
    if action == "alter" and (parts is None or any(o is None for _, _, o in parts)):
        raise OffsetsRefused("alter needs partitions, each with an offset")
    if action != "alter" and parts and any(o is not None for _, _, o in parts):
        raise OffsetsRefused(f"offsets per partition are for alter only, not {action}")
    return OffsetsRequest(action, to, timestamp_ms, parts)  # type: ignore[arg-type]
