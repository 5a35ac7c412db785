"""The dead-letter options (deadLetterTopic, ...): where records that cannot be decoded go, the
producer's connection (the source's own) and the progress group and transactional ids that
make each dead record written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_app.api.decoding_options import DECODED_USE
from spark_app.api.option_values import OptionError, int_option


@dataclass(frozen=True)
class DeadLetterTarget:
    """deadLetterTopic: where records that cannot be decoded go (spark_app/sinks/dead_letter.py):
    the topic, its client settings (bootstrap servers, credentials), the job and epoch the
    copies name, and the group whose name keys the writers (unique per job, as its offsets)."""

    topic: str
    client: Mapping[str, str] = field(repr=False)  # credentials: never printed
    job: str
    epoch: int
    group: str

    @property
    def progress_group(self) -> str:
        return f"{self.group}.dead-letter"

    def transactional_id(self, topic: str, partition: int) -> str:
        return f"streamingjob.{self.group}.dead-letter.{topic}.{partition}"


# client properties a dead-letter producer shares with the source: how to reach and log in
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "client.dns.", "broker.address.family")


def dead_letter_target(
    options: Mapping[str, str], source: tuple[str, str | None, dict[str, str]], decoded: bool
) -> DeadLetterTarget | None:
    """deadLetterTopic: where records that cannot be decoded go (spark_app/sinks/dead_letter.py),
    on the source's cluster and credentials unless deadLetterBootstrapServers names another."""
    topic = options.get("deadlettertopic", "").strip()
    if not topic:
        return None
    bootstrap, group_id, client = source
    if not decoded:
        raise OptionError(f"option deadLetterTopic is used only with {DECODED_USE}")
    if not group_id:
        raise OptionError(
            "option deadLetterTopic needs kafka.group.id: its progress is kept for the group "
            "<group>.dead-letter"
        )
    connection = {k: v for k, v in client.items() if k.startswith(_CONNECTION_PREFIXES)}
    bootstrap = options.get("deadletterbootstrapservers", "").strip() or bootstrap
    return DeadLetterTarget(
        topic=topic,
        client={"bootstrap.servers": bootstrap, **connection},
        job=options.get("jobname", "").strip() or group_id,
        epoch=int_option(options, "jobEpoch", 0, 0) or 0,
        group=group_id,
    )
