"""Warning Events that outlive the operator process (rules/history.keep_warnings keeps each
one in status, in the same write as the decision it tells, under a fixed name).

The reconcile posts its Events when it ends. A Warning kept in status that no Event of this
process stands for yet (the process that decided it ended before posting: a crash, a lost
Lease; or the API server refused the post) is posted again by every reconcile, of any
replica, until it went through: a name that exists already (409) counts as posted, so it is
one Event whoever posts it. Warnings older than the Events' time to live are not posted again
(an Event that expired would come back)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from streamingjob_operator.api.models import WarningRecord
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.rules.history import Event
from streamingjob_operator.rules.observed import parse_time

log = logging.getLogger(__name__)

Events = list[tuple[dict[str, Any], Event]]
# The API server's default --event-ttl is 1 h: a warning older than this is not posted again
REPOST_WITHIN = timedelta(minutes=50)


class Announcer:
    def __init__(self, api: KubeApi, clock: Callable[[], datetime]) -> None:
        self.api, self.clock = api, clock
        # by job: its uid and the warnings this process posted
        self.posted: dict[tuple[str, str], tuple[str, set[str]]] = {}

    def _posted(self, meta: dict[str, Any]) -> set[str]:
        key, uid = (meta["namespace"], meta["name"]), meta.get("uid", "")
        if key not in self.posted or self.posted[key][0] != uid:
            self.posted[key] = (uid, set())  # a job created again under the name
        return self.posted[key][1]

    def unposted(self, job: dict[str, Any]) -> Events:
        """The job's kept warnings this process has not posted, within the Events' TTL."""
        kept = _warnings(job)
        if not kept:
            return []
        posted = self._posted(job["metadata"])
        posted &= {w.name for w in kept}  # the rest dropped out of status: bounded memory
        since = self.clock() - REPOST_WITHIN
        return [
            (job, Event("Warning", w.reason, w.message, name=w.name))
            for w in kept
            if w.name not in posted and (parse_time(w.time) or since) >= since
        ]

    def post(self, events: Events) -> None:
        """Each Event once, in order: a Warning under the name status keeps it by (the job
        as written with it), any other with a generated name."""
        done: set[str] = set()
        for job, event in events:
            posted = self._posted(job["metadata"])
            kept = _kept(job, event, done | posted) if event.type == "Warning" else None
            if kept is None:  # not kept (e.g. status could not be written): best effort
                self.api.post_event(job, event.type, event.reason, event.message)
                continue
            name, at = kept
            if not name:
                continue  # posted already (this reconcile or before)
            done.add(name)
            if self.api.post_event(job, event.type, event.reason, event.message, name=name, at=at):
                posted.add(name)

    def forget(self, key: tuple[str, str]) -> None:
        self.posted.pop(key, None)


def _warnings(job: dict[str, Any]) -> list[WarningRecord]:
    """status.warnings alone (the rest of status is not parsed: this runs on every read)."""
    return [
        WarningRecord.model_validate(w) for w in (job.get("status") or {}).get("warnings") or []
    ]


def _kept(job: dict[str, Any], event: Event, done: set[str]) -> tuple[str, str] | None:
    """The kept warning this Event stands for, by its name, else the newest alike one not
    posted yet: its name and time ("" when all alike ones are posted); None: not kept."""
    told = (event.reason, event.message)
    alike = [
        w
        for w in _warnings(job)
        if (w.name == event.name if event.name else (w.reason, w.message) == told)
    ]
    if not alike:
        return None
    fresh = [w for w in alike if w.name not in done]
    return (fresh[-1].name, fresh[-1].time) if fresh else ("", "")
