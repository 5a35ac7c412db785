"""Every failure reaches status and an Event: each driver failure, refusal or node loss the
world caused (world.Failure) shows, within `BOUND` seconds of the operator being able to
see it, in status naming the cause (a condition's reason, or a condition's or a history
entry's message naming the pod: a redeploy starts the failure count, and with it
Degraded, afresh) and in a Warning Event on the job naming the pod. The bound counts from
when both the API server and a leading operator are there (an outage or a change of leader
delays every report). Also a failure whose operator process recorded it in status and ended
before posting its Event (a crash, a lost Lease): the next leader posts it (announce.py).

And each failure told once: no two Warning Events with the same reason name the same driver
pod (its epoch and attempt) of the job; a count that grows in a run (offsets skipped as
lost, batches aborted) is told once per growth, each Event naming the run's new total.
Events are counted as the API server keeps them: a Warning posted again under its name
(announce.py, after a crash) is the same Event (409), not a second one. Reasons of the
operator's own errors (a refused request) may repeat."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from .world import NAMESPACE, World

BOUND = 120.0  # the node-lost grace (40 s), a fencing poll and a backoff fit well inside
# a driver pod's name (naming.driver_pod_name): its epoch and attempt
POD = re.compile(r"\b([a-z0-9][a-z0-9.-]*-e\d+-a\d+-driver)\b")
# a reconcile that failed (reconcile.py): the operator's error, told each time it happens
REPEATABLE = frozenset({"ApiRejected", "ReconcileError"})
# the run's total a growing count's Event names ("3 more offsets skipped (6 in this run)")
TOTAL = re.compile(r"\((\d+) in this run\)")


class Reports:
    def __init__(self, world: World, name: str, available_since: Callable[[], float]) -> None:
        self.world, self.name, self.available_since = world, name, available_since
        self.events_read = 0
        # (job uid, reason, pod, the run's total a growing count's Event names)
        self.told: Counter[tuple[str, str, str, str]] = Counter()
        self.twice: list[str] = []  # found by _read_events, handed out by told_twice

    def told_twice(self) -> list[str]:
        """The failures told by a second Warning Event since the last call."""
        self._read_events()
        found, self.twice = self.twice, []
        return found

    def check(self) -> list[str]:
        """The failures past their bound, each once."""
        failures = self.world.failures
        if not failures:
            return []
        job = self.world.server.get("StreamingJob", NAMESPACE, self.name)
        live = job is not None and not job["metadata"].get("deletionTimestamp")
        uid = job["metadata"]["uid"] if live and job else ""
        self._read_events()
        self._read_status(job, uid)
        late, kept = [], []
        since = self.available_since()
        for failure in failures:
            if failure.uid != uid:
                continue  # its job is gone: nobody is left to tell
            if failure.status_seen and failure.event_seen:
                continue
            if self.world.clock.t - max(failure.at, since) <= BOUND:
                kept.append(failure)
                continue
            missing = [
                what
                for what, seen in (
                    ("a status condition", failure.status_seen),
                    ("an Event", failure.event_seen),
                )
                if not seen
            ]
            late.append(
                f"{failure.cause} of {failure.pod} at {failure.at:.1f}s: no "
                f"{' and no '.join(missing)} naming it after {BOUND:g} s"
            )
        self.world.failures = kept
        return late

    def _read_events(self) -> None:
        events = self.world.server.events
        for uid, type_, reason, message in events[self.events_read :]:
            if type_ == "Warning" and reason not in REPEATABLE and (pod := POD.search(message)):
                total = TOTAL.search(message)
                key = (uid, reason, pod.group(1), total.group(1) if total else "")
                self.told[key] += 1
                if self.told[key] == 2:
                    self.twice.append(f"{reason} of {key[2]} in two Warning Events: {message}")
            for failure in self.world.failures:
                if failure.uid == uid and type_ == "Warning" and failure.pod in message:
                    failure.event_seen = True
        self.events_read = len(events)

    def _read_status(self, job: dict[str, Any] | None, uid: str) -> None:
        if job is None:
            return
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        history = status.get("history") or []
        for failure in self.world.failures:
            if failure.uid == uid and not failure.status_seen:
                failure.status_seen = any(
                    _names(c, failure.cause, failure.pod) for c in conditions
                ) or any(_tells(h, failure.cause, failure.pod) for h in history[-5:])


def _names(condition: dict[str, Any], cause: str, pod: str) -> bool:
    telling = condition.get("status") == "True" or condition.get("type") == "Ready"
    return telling and (condition.get("reason") == cause or pod in (condition.get("message") or ""))


def _tells(entry: dict[str, Any], cause: str, pod: str) -> bool:
    """A history entry of the failure (not the pod's launch): it names the pod and the cause
    or it is the record of a failure."""
    message = entry.get("message") or ""
    failure = entry.get("reason") in (cause, "DriverFailed") or cause in message
    return failure and pod in message
