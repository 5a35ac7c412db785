"""The batches a StreamingJob commits, with the moment the test saw each: what the broker
scenario measures a pause and a read rate with. A thread watches the runner's report
ConfigMap (<job>-report) and keeps one entry per new batch. A batch's end offsets are
cumulative, so the records read between two entries are the difference of their sums, even
when the watch coalesced several batches into one update.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from devbed.kind_cluster import Kube


@dataclass(frozen=True)
class Seen:
    at: float  # time.time() when the report showed the batch (it is committed by then)
    batch_id: int
    planned: float  # the batch's trigger time (the driver's clock: the same host's)
    offsets: int  # the sum of its end offsets over the topic's partitions
    lag: int  # records in the topic past its end when it was planned


@dataclass
class BatchTimeline:
    kube: Kube
    namespace: str
    job: str
    topic: str
    seen: list[Seen] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: BaseException | None = None

    def __enter__(self) -> BatchTimeline:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(30)

    def _watch(self) -> None:
        def accept(data: dict) -> bool | None:
            self._record(json.loads(data.get("report.json") or "{}"))
            return self._stop.is_set() or None

        try:
            self.kube.wait_configmap(
                f"{self.job}-report", self.namespace, accept, 3600, "the end of the timeline"
            )
        except BaseException as exc:  # seen by wait_until: a dead watch must fail the test
            self._error = exc

    def _record(self, report: dict) -> None:
        batch = report.get("latestBatch") or {}
        if batch.get("batchId") is None or not batch.get("timestamp"):
            return
        offsets = sum((batch.get("endOffsets") or {}).get(self.topic, {}).values())
        if self.seen and (self.seen[-1].batch_id, self.seen[-1].offsets) == (
            batch["batchId"],
            offsets,
        ):
            return
        planned = datetime.fromisoformat(batch["timestamp"].replace("Z", "+00:00")).timestamp()
        self.seen.append(Seen(time.time(), batch["batchId"], planned, offsets, batch["lag"]))

    def wait_until(self, what: str, accept, timeout: float) -> Seen:
        """The first entry that `accept(entry)` takes, waiting for it up to `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._error is not None:
                raise AssertionError(f"the report watch failed: {self._error}")
            for entry in list(self.seen):
                if accept(entry):
                    return entry
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; seen: {self.seen}")

    def last_before(self, moment: float) -> Seen:
        earlier = [e for e in self.seen if e.at <= moment]
        assert earlier, f"no batch seen before {moment}"
        return earlier[-1]

    def rate(self, start: float, end: float) -> float:
        """Records read per second between the last batches seen by `start` and by `end`."""
        first, last = self.last_before(start), self.last_before(end)
        return (last.offsets - first.offsets) / (end - start)
