"""`spec.job.deadLetter`: the topic records that cannot be decoded go to, exactly once, and the
rules that it needs a decoded value and a group. Pure (no pyspark): the operator imports it.
"""

from __future__ import annotations

from pydantic import Field

from spark_app.api.offsets import MAX_TOPIC
from spark_app.api.spec_base import (
    BOOTSTRAP,
    MAX_TEXT,
    TOPIC,
    SpecModel,
)


class DeadLetterSpec(SpecModel):
    """Where records that cannot be decoded go, exactly once, instead of failing the query
    (with source.value.format avro, json or protobuf only; needs source.groupId)."""

    topic: str = Field(
        min_length=1,
        max_length=MAX_TOPIC,
        pattern=TOPIC,
        description="The dead-letter topic. Each copy keeps the record's key, value and "
        "headers, plus headers naming its source topic, partition, offset and the reason.",
    )
    bootstrap_servers: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=BOOTSTRAP,
        description="The dead-letter topic's cluster, host:port[,host:port]. Unset: the "
        "source's. The source's credentials either way.",
    )


DEAD_LETTER_NEEDS_DECODED = (
    "deadLetter needs source.value.format avro, json or protobuf (only records that cannot be "
    "decoded go "
    "to the dead-letter topic): set spec.job.source.value.format or remove spec.job.deadLetter"
)
DEAD_LETTER_DECODED_RULE = (
    "!has(self.deadLetter) || (has(self.source.value) && has(self.source.value.format) && "
    "self.source.value.format != 'raw')"
)
DEAD_LETTER_NEEDS_GROUP = (
    "deadLetter needs source.groupId: the dead-letter topic's progress is kept for the group "
    "<groupId>.dead-letter"
)
DEAD_LETTER_GROUP_RULE = "!has(self.deadLetter) || has(self.source.groupId)"
