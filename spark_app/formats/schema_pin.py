"""The reader schema's version, pinned per epoch: an automatic restart must not change what
the job writes.

A decoded column (valueFormat / keyFormat avro, json, protobuf) whose version is `latest`
(spec.job.source.value.version unset) is resolved once, when the epoch starts fresh, and that
version is kept in the epoch's checkpoint (`PIN_FILE`, written before the query starts); a
restore (same epoch, same checkpoint) reads it back and asks the registry for that version,
whatever the subject's latest is by then. A new epoch (a redeploy: a new, empty checkpoint)
resolves `latest` again. A version the spec names is used as it is.

The rule (`versions`) and the file's text (`to_json`, `from_json`) are pure; the runner reads
and writes the file through the session's Hadoop FileSystem (`spark_app.runner.checkpoint_log`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

PIN_FILE = "reader-schemas.json"  # in the epoch's checkpoint location, beside offsets/
# How a pinned version came about (the report's readerSchemas.<column>.pinned).
FROM_SPEC, FROM_CHECKPOINT, RESOLVED = "spec", "checkpoint", "resolved"


class PinUnreadable(ValueError):
    """The epoch's pin file is there but is not a pin file: never guessed over."""


@dataclass(frozen=True)
class Pin:
    """One decoded column's reader schema version for this epoch."""

    column: str  # value or key
    subject: str
    version: int
    how: str  # FROM_SPEC, FROM_CHECKPOINT or RESOLVED

    def report(self) -> dict[str, object]:
        return {"subject": self.subject, "version": self.version, "pinned": self.how}


def versions(
    requested: Mapping[str, tuple[str, int | str]],
    stored: Mapping[str, tuple[str, int]] | None,
) -> dict[str, tuple[int | None, str]]:
    """Per decoded column (`requested`: column -> (subject, version or "latest")), the
    version this run reads and how it came about; version None: resolve `latest` now and pin
    it. `stored`: the epoch's pins (None: the epoch has none, it starts fresh). A pin counts
    only for the subject it was made for."""
    chosen: dict[str, tuple[int | None, str]] = {}
    for column, (subject, version) in requested.items():
        if version != "latest":
            chosen[column] = (int(version), FROM_SPEC)
        elif stored and column in stored and stored[column][0] == subject:
            chosen[column] = (stored[column][1], FROM_CHECKPOINT)
        else:
            chosen[column] = (None, RESOLVED)
    return chosen


def needs_writing(pins: Mapping[str, Pin]) -> bool:
    """A pin resolved by this run is kept in the checkpoint before the query starts."""
    return any(pin.how == RESOLVED for pin in pins.values())


def to_json(pins: Mapping[str, Pin]) -> str:
    """The pin file: {"v": 1, "columns": {column: {"subject", "version"}}}."""
    columns = {
        column: {"subject": pin.subject, "version": pin.version}
        for column, pin in sorted(pins.items())
        if pin.how != FROM_SPEC
    }
    return json.dumps({"v": 1, "columns": columns}, sort_keys=True)


def from_json(text: str) -> dict[str, tuple[str, int]]:
    """The pins a pin file holds (column -> (subject, version)); PinUnreadable otherwise."""
    try:
        document = json.loads(text)
        columns = document["columns"]
        if document.get("v") != 1 or not isinstance(columns, dict):
            raise ValueError("not version 1")
        pinned = {}
        for column, pin in columns.items():
            subject, version = pin["subject"], pin["version"]
            if not isinstance(subject, str) or isinstance(version, bool):
                raise ValueError(f"{column}: not a subject and a version")
            if not isinstance(version, int) or version < 1:
                raise ValueError(f"{column}: version {version!r}")
            pinned[str(column)] = (subject, version)
        return pinned
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PinUnreadable(f"{PIN_FILE} is not a pin file ({exc})") from None
