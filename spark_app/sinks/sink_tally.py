"""The exactly-once Kafka sink's counts for this run, for the runner's report (and from there
the job's status and metrics): transactions committed, replayed ranges skipped because their
output was committed already, records written, and batches Spark aborted.

The writer's driver side (`commit`/`abort`, after each batch's tasks) adds to a JSON file in
the run's work directory; the runner reads it (`Reporter`). Spark calls those one batch at a
time, possibly from a different Python process each time, so the file, replaced atomically,
is the count's only home. A count that cannot be written is lost, never a failed batch.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from spark_app.api.sink_rules import SINK_TALLY_KEYS as KEYS

log = logging.getLogger(__name__)


def read(path: Path | str) -> dict[str, int]:
    """The counts so far (every key, 0 when unknown); a missing or unreadable file is none."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        raw = {}
    if not isinstance(raw, dict):
        raw = {}
    return {k: v if isinstance(v := raw.get(k), int) and v >= 0 else 0 for k in KEYS}


def add(path: Path | str | None, **more: int) -> None:
    """Adds `more` (keys of KEYS) to the counts in `path`; no path: nothing is counted."""
    if not path:
        return
    counts = read(path)
    for key, n in more.items():
        counts[key] += n
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        Path(tmp).write_text(json.dumps(counts))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not count the sink's transactions in %s: %s", path, exc)
