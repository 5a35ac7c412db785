"""Why a record's value (or key) cannot be decoded: the reasons every value format shares.

A format's decoder returns a `Poison` for a bad record and never raises for one: the caller
(`spark_app.formats.decoding.decode_value_column`) decides whether it goes to the dead-letter topic
or fails the query naming the record. The reasons are the dead-letter header
`streamingjob.error.reason`, so they are one vocabulary across formats. A `DeadRecord` is such a
record with where it came from, as the dead-letter topic (spark_app.sinks.dead_letter) gets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BAD_MAGIC_BYTE = "bad-magic-byte"
TRUNCATED = "truncated"
UNKNOWN_SCHEMA_ID = "unknown-schema-id"
UNRESOLVABLE_SCHEMA = "unresolvable-schema"
MALFORMED_PAYLOAD = "malformed-payload"
POISON_REASONS = (
    BAD_MAGIC_BYTE,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    MALFORMED_PAYLOAD,
)


@dataclass(frozen=True)
class Poison:
    """A record that cannot be decoded: `reason` is one of POISON_REASONS; `column` is the
    one that failed (value or key), set by the caller that decodes the columns."""

    reason: str
    message: str
    schema_id: int | None = None
    column: str | None = None


@dataclass(frozen=True)
class DeadRecord:
    """A source record the job cannot read, and why (a `spark_app.formats.decoding` poison
    reason)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    reason: str
    message: str
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    column: str | None = None  # the column that cannot be decoded: value or key
