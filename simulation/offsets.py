"""The operator's side of Kafka in the simulation: spec.offsetsAction through the real
`offsets_run.run` (plan and commit of a list, reset or alter) over the simulated Kafka
instead of a Kafka client, the user's act that asks for one, and the operator's readings
of the group (lag, the autoscaler's input)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from spark_app.api.offsets_admin import OffsetsRequest, OffsetsResult
from spark_app.api.options import SourceOptions
from spark_app.kafka import offsets_run
from streamingjob_operator.io.kafka import KafkaTarget
from streamingjob_operator.rules.status import KafkaView

from .data import Kafka

TopicPartition = tuple[str, int]


class Metadata:
    """What offsets_run.run asks of a `KafkaMetadata`, answered by the simulated Kafka;
    `moved` hears of every commit (the checker: the user moved the group)."""

    def __init__(
        self, kafka: Kafka, options: SourceOptions, moved: Callable[[str, dict], None]
    ) -> None:
        self.kafka, self.options, self.moved = kafka, options, moved

    def topic_partitions(self) -> list[TopicPartition]:
        return sorted(self.kafka.end)

    def watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: (0, self.kafka.end[tp]) for tp in tps}

    def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        group = self.kafka.committed(self.options.group_id or "")
        return {tp: group.get(tp) for tp in tps}

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        group = self.options.group_id or ""
        self.moved(group, dict(offsets))
        self.kafka.commit(group, offsets)


def runner(
    kafka: Kafka, moved: Callable[[str, dict], None]
) -> Callable[[KafkaTarget, OffsetsRequest, float, float], OffsetsResult]:
    """The reconciler's `offsets_runner` (kafka.run_offsets_action) over the simulated Kafka."""

    def run(target: KafkaTarget, request: OffsetsRequest, timeout: float, deadline: float):
        options = SourceOptions.parse(dict(target.options))
        metadata = Metadata(kafka, options, moved)  # answers what run asks of a KafkaMetadata
        return offsets_run.run(metadata, request)  # type: ignore[arg-type]

    return run


def action(arg: int, partitions: int) -> dict[str, Any]:
    """A list, a reset (earliest or latest) or an alter of one partition."""
    kind = ("list", "reset", "reset", "alter")[arg % 4]
    asked: dict[str, Any] = {"action": kind}
    if kind == "reset":
        asked["to"] = "earliest" if arg % 8 < 4 else "latest"
    if kind == "alter":
        asked["partitions"] = [
            {"topic": "orders", "partition": arg // 4 % partitions, "offset": arg // 8 % 20}
        ]
    return asked


class Readings:
    """The operator's Kafka readings (kafka.KafkaMonitor's part the reconciler uses) over the
    simulated Kafka: a reading every `max_age` seconds of the replica's clock, taken at once
    (the real one reads on a worker; the next reconcile sees it). They feed status (lag) and
    the real autoscaler (autoscaling.py) its input rate."""

    def __init__(self, kafka: Kafka, max_age: float) -> None:
        self.kafka, self.max_age = kafka, max_age
        self.views: dict[tuple[str, str], KafkaView] = {}
        self.now: Callable[[], datetime] = lambda: datetime.min

    def view(self, key: tuple[str, str]) -> KafkaView | None:
        return self.views.get(key)

    def is_due(self, key: tuple[str, str], now: datetime) -> bool:
        read = self.views.get(key)
        return (
            read is None
            or read.read_at is None
            or (now - read.read_at).total_seconds() >= self.max_age
        )

    def refresh(self, key: tuple[str, str], target: KafkaTarget) -> None:
        group = SourceOptions.parse(dict(target.options)).group_id or ""
        committed: dict[str, dict[str, int]] = {}
        end: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.kafka.committed(group).items()):
            committed.setdefault(topic, {})[str(partition)] = offset
        for (topic, partition), offset in sorted(self.kafka.end.items()):
            end.setdefault(topic, {})[str(partition)] = offset
        self.views[key] = KafkaView(committed=committed, end=end, read_at=self.now())

    def forget(self, key: tuple[str, str]) -> None:
        self.views.pop(key, None)


def autoscaler(spec: dict[str, Any], arg: int) -> None:
    """spec.autoscaler toggled: on with quick windows (so that a history sees decisions),
    between 1 and 2 + arg % 3 executors."""
    enabled = not (spec.get("autoscaler") or {}).get("enabled", False)
    spec["autoscaler"] = {
        "enabled": enabled,
        "minExecutors": 1,
        "maxExecutors": 2 + arg % 3,
        "metricsWindowSeconds": 120,  # readings every kafkaPollSeconds (30 s): gaps < half
        "stabilizationSeconds": 30,
        "scaleDownDelaySeconds": 60,
        "catchUpSeconds": 60,
    }
