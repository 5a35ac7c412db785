"""Offsets: the source's checkpoint state, as pure data and pure functions.

Spark writes the dict `latestOffset()` returns into `offsets/<batch>` before the batch runs,
so these dicts ARE the checkpoint (semantics rule 1). Shapes:

- positions: `{topic: {partition: next_offset_to_read}}` with int partitions inside Python;
- the JSON form Spark stores and compares *as a string*: topics sorted, partitions sorted
  numerically and written as strings (otherwise equal offsets look like new data);
- `initialOffset()` returns the fixed sentinel `{"fresh": true}` because Spark calls it again
  when batch 0 replays: the resolved start is pinned in batch 0's end offset under "start".
- beside the end offsets, "epochs" keeps each partition's leader epoch as the broker reported
  it with the log end the batch was planned against (and batch 0, "startEpochs" beside
  "start"), so the read that starts there later (the next batch, a restore) can ask the
  leader whether its log still holds what was read up to it (semantics rule 16, KIP-320).
  A checkpoint written before epochs were kept has none: its positions start unvalidated.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Positions = dict[TopicPartition, int]
Epochs = dict[TopicPartition, int]  # leader epochs: only of partitions where one is known

FRESH_START = {"fresh": True}


def is_fresh_start(offset: Mapping[str, object]) -> bool:
    return offset.get("fresh") is True


def to_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Canonical JSON form: sorted topics, numerically sorted partitions as string keys."""
    nested: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(positions):
        nested.setdefault(topic, {})[str(partition)] = int(positions[(topic, partition)])
    return nested


def from_json(nested: Mapping[str, Mapping[str, int]]) -> Positions:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in nested.items()
        for partition, offset in partitions.items()
    }


def batch_offset(
    end: Positions,
    start: Positions | None = None,
    epochs: Mapping[TopicPartition, int] | None = None,
    start_epochs: Mapping[TopicPartition, int] | None = None,
) -> dict[str, object]:
    """The dict Spark stores for a batch end; batch 0 also pins where it started. `epochs`
    (`start_epochs`): the leader epoch of each end (start) position where one is known."""
    offset: dict[str, object] = {"offsets": to_json(end)}
    if epochs:
        offset["epochs"] = to_json({tp: e for tp, e in epochs.items() if tp in end})
    if start is not None:
        offset["start"] = to_json(start)
        if start_epochs:
            offset["startEpochs"] = to_json(
                {tp: e for tp, e in start_epochs.items() if tp in start}
            )
    return offset


def end_positions(offset: Mapping[str, object]) -> Positions:
    return from_json(offset["offsets"])  # type: ignore[arg-type]


def end_epochs(offset: Mapping[str, object]) -> Epochs:
    """The leader epochs kept with a batch's end offsets (none in an older checkpoint)."""
    return _epochs(offset.get("epochs"))


def start_positions(start: Mapping[str, object], end: Mapping[str, object]) -> Positions:
    """Where a batch `[start, end)` begins; for batch 0 the pinned start inside `end`."""
    if is_fresh_start(start):
        return from_json(end["start"])  # type: ignore[arg-type]
    return end_positions(start)


def start_epochs(start: Mapping[str, object], end: Mapping[str, object]) -> Epochs:
    """The leader epochs of where a batch `[start, end)` begins, where known."""
    if is_fresh_start(start):
        return _epochs(end.get("startEpochs"))
    return end_epochs(start)


def _epochs(nested: object) -> Epochs:
    if not isinstance(nested, Mapping):
        return {}
    return {tp: epoch for tp, epoch in from_json(nested).items() if epoch >= 0}


@dataclass(frozen=True)
class StartDecision:
    """Where one partition of a fresh query starts, and why (shown in status)."""

    offset: int
    origin: str  # committed | earliest | latest | timestamp | specific
    # the committed (or asked-for) offset the reset strategy replaced, being out of the log's
    # range: the records between the two are lost (data_loss.resumed_from)
    replaced: int | None = None


class StartError(RuntimeError):
    """A fresh start that cannot be resolved under the configured policy."""


def resolve_start(
    tp: TopicPartition,
    mode: str | int | dict[str, dict[str, int]],
    reset: str,
    low: int,
    high: int,
    committed: int | None,
    by_timestamp: int | None,
    committed_epoch: int | None = None,
) -> StartDecision:
    """Flink's start rules for one partition of a fresh query.

    `mode` is what `parse_starting_offsets` returns. `committed` is the group's committed
    offset (None when the group has none), `committed_epoch` the leader epoch it was
    committed with (None: none, as when set by hand); `by_timestamp` is the first offset with
    a timestamp >= the requested one (None: no such record). `low`/`high` are watermarks.
    """
    topic, partition = tp
    if isinstance(mode, dict):
        explicit = mode.get(topic, {}).get(str(partition))
        if explicit is not None:
            if explicit == -2:
                return StartDecision(low, "earliest")
            if explicit == -1:
                return StartDecision(high, "latest")
            return StartDecision(_clamp_specific(tp, explicit, low, high, reset), "specific")
        mode = "committed"  # partitions the JSON does not name: Flink's SpecificOffsets rule
    if mode == "earliest":
        return StartDecision(low, "earliest")
    if mode == "latest":
        return StartDecision(high, "latest")
    if isinstance(mode, int):
        # No record at or after the timestamp: start at the end (Flink's behaviour).
        return StartDecision(high if by_timestamp is None else by_timestamp, "timestamp")
    if committed is not None and low <= committed <= high:
        return StartDecision(committed, "committed")
    if committed is not None and committed > high and committed_epoch is not None:
        # a position a reader committed, past a log that now ends below it (truncated by an
        # unclean election, or the topic recreated): kept, as a restore keeps its
        # checkpoint's, for failOnDataLoss to judge and the read to validate (rule 16)
        return StartDecision(committed, "committed")
    return _reset(tp, reset, low, high, committed)


def _clamp_specific(tp: TopicPartition, offset: int, low: int, high: int, reset: str) -> int:
    if low <= offset <= high:
        return offset
    return _reset(tp, reset, low, high, offset).offset


def _reset(
    tp: TopicPartition, reset: str, low: int, high: int, offset: int | None
) -> StartDecision:
    if reset == "earliest":
        return StartDecision(low, "earliest", offset)
    if reset == "latest":
        return StartDecision(high, "latest", offset)
    where = "no committed offset" if offset is None else f"offset {offset} outside [{low}, {high}]"
    raise StartError(
        f"{tp[0]}-{tp[1]}: {where} and offsetResetStrategy=error; commit offsets for the "
        "group, or choose offsetResetStrategy earliest or latest"
    )


def rate_limit(start: Positions, latest: Positions, max_offsets: int) -> Positions:
    """Split `max_offsets` across partitions in proportion to their backlog (as Spark does).

    A partition missing from `start` is new and begins at 0. The result never passes
    `latest` and never goes below `start`.
    """
    backlog = {tp: max(0, high - start.get(tp, 0)) for tp, high in latest.items()}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(latest)
    end: Positions = {}
    for tp, high in latest.items():
        begin = start.get(tp, 0)
        share = max_offsets * backlog[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        end[tp] = min(high, begin + step)
    return end


def plan_end(
    begin: Positions,
    begin_epochs: Epochs,
    log_ends: Positions,
    epochs: Epochs,
    max_rows: int | None,
) -> tuple[Positions, Epochs]:
    """A batch's end from `begin` (the source's latestOffset): the log ends, never below
    `begin` (a log truncated below it is the read's to find), at most `max_rows` on; and the
    leader epoch to keep with each end (rule 16). A partition the batch does not move keeps
    its start's epoch: the position was read in that leader's log, and stamped with today's
    leader's it would hide a truncation below it from the next read's validation."""
    latest = {tp: max(o, begin.get(tp, 0)) for tp, o in log_ends.items()}
    end = rate_limit(begin, latest, max_rows) if max_rows is not None else latest
    unmoved = {tp: e for tp, e in begin_epochs.items() if end.get(tp) == begin.get(tp)}
    return end, {**epochs_at(end, log_ends, epochs), **unmoved}


def epochs_at(positions: Positions, log_ends: Positions, epochs: Epochs) -> Epochs:
    """The leader epoch to keep with each position where a log end at or past it came with
    one (semantics rule 16): that leader's log holds every offset below the position, so
    asking the leader of a later read where that epoch ends tells whether the log was
    truncated below it."""
    return {
        tp: epochs[tp]
        for tp, offset in positions.items()
        if tp in epochs and offset <= log_ends.get(tp, -1)
    }


def lag(end: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, latest[tp] - end.get(tp, 0)) for tp in latest)


_TIMESTAMP_START = re.compile(r"timestamp:([0-9]{1,13})")
# Kafka's own rule for topic names (its Topic.validate): 1 to 249 of [a-zA-Z0-9._-], and not
# "." or "..". Written for both engines that check it (pydantic's and the API server's RE2):
# no lookaround, so "not only dots" is spelled out; the length is checked beside it.
TOPIC_PATTERN = r"^([a-zA-Z0-9._-]*[a-zA-Z0-9_-][a-zA-Z0-9._-]*|[.]{3,})$"
MAX_TOPIC = 249
_TOPIC = re.compile(TOPIC_PATTERN)
_PARTITION = re.compile(r"[0-9]{1,10}")


def is_topic_name(name: str) -> bool:
    """A name Kafka accepts for a topic."""
    return 1 <= len(name) <= MAX_TOPIC and bool(_TOPIC.fullmatch(name))


def parse_starting_offsets(value: str) -> str | int | dict[str, dict[str, int]]:
    """Validates a start mode: a name, a timestamp in ms, or {"topic": {"partition": offset}}
    (Kafka topic names, partitions 0..2^31-1, offsets 0..2^63-1 or -2 / -1)."""
    if value in ("committed", "earliest", "latest"):
        return value
    if match := _TIMESTAMP_START.fullmatch(value):
        return int(match.group(1))
    try:
        parsed = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(
            f"startingOffsets {value[:200]!r} is not committed, earliest, latest, "
            'timestamp:<epoch-ms> or JSON like {"topic":{"0":42}}'
        )
    result: dict[str, dict[str, int]] = {}
    for topic, partitions in parsed.items():
        if not is_topic_name(topic):
            raise ValueError(f"startingOffsets: {topic[:200]!r} is not a Kafka topic name")
        if not isinstance(partitions, dict) or not partitions:
            raise ValueError(f"startingOffsets[{topic!r}] must map partitions to offsets")
        result[topic] = {}
        for partition, offset in partitions.items():
            valid_offset = (
                isinstance(offset, int) and not isinstance(offset, bool) and -2 <= offset < 2**63
            )
            partition_ok = _PARTITION.fullmatch(partition) and int(partition) < 2**31
            if not partition_ok or not valid_offset:
                raise ValueError(
                    f"startingOffsets[{topic!r}][{partition[:20]!r}]={str(offset)[:30]}: "
                    "partitions are integers 0..2147483647, offsets 0..2^63-1 or -2 "
                    "(earliest) / -1 (latest)"
                )
            result[topic][str(int(partition))] = offset
    return result
