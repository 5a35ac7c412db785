"""spec.offsetsAction in the simulation: the operator's real `offsets_admin.run` (plan and
commit of a list, reset or alter) over the simulated Kafka instead of a Kafka client, and
the user's act that asks for one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_app import offsets_admin
from spark_app.offsets_admin import OffsetsRequest, OffsetsResult
from spark_app.options import SourceOptions
from streamingjob_operator.kafka import KafkaTarget

from .data import Kafka

if TYPE_CHECKING:
    from .history import History

TopicPartition = tuple[str, int]


class Metadata:
    """What offsets_admin.run asks of a `KafkaMetadata`, answered by the simulated Kafka;
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
        return offsets_admin.run(Metadata(kafka, options, moved), request)

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


def act(h: History, arg: int) -> None:
    """kubectl patch spec.offsetsAction (a new nonce): two times in three with a suspend in
    the same patch and a resume a while after it; else as the job is (refused while it
    runs: the nonce is consumed)."""
    from . import acts

    with_suspend = arg % 3 != 0

    def change(spec: dict[str, Any]) -> None:
        nonce = (spec.get("offsetsAction") or {}).get("nonce", 0) + 1
        spec["offsetsAction"] = {"nonce": nonce, **action(arg, h.world.kafka.partitions)}
        if with_suspend:
            spec["suspend"] = True

    if acts.edit(h, change) and with_suspend:
        h.world.at(h.world.delay(20, 120), "act", acts.later("resume", h.world.clock.t))
