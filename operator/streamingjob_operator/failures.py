"""A reconcile that cannot go on never ends in a log line alone: recorded in status
(`reconcileFailure`, condition Degraded with reason ApiRejected for a request the API server
refused, ReconcileError otherwise, and the server's message), a Warning Event when the failure
is new, and a retry with backoff (the count lives in status, so a restarted operator keeps the
pace). Cleared by the next reconcile that goes through."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from streamingjob_operator.announce import Events
from streamingjob_operator.api.models import HistoryEntry, ReconcileFailure, parse_status
from streamingjob_operator.io.errors import ConflictError, FatalError, OperatorError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaMonitor
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.rules.decide import Event
from streamingjob_operator.rules.history import keep_warnings
from streamingjob_operator.rules.observed import iso
from streamingjob_operator.rules.status import set_conditions, status_body
from streamingjob_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


class Failures:
    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        metrics: Metrics,
        kafka: KafkaMonitor | None,
        clock: Callable[[], datetime],
    ) -> None:
        self.api, self.settings, self.metrics = api, settings, metrics
        self.kafka, self.clock = kafka, clock

    def record(self, namespace: str, name: str, exc: Exception, events: Events) -> float | None:
        """Records the failure (see top); returns when to retry (None: the job is gone)."""
        if isinstance(exc, FatalError):
            reason, message = "ApiRejected", str(exc)
            log.warning("reconcile %s/%s failed: %s", namespace, name, message)
        else:
            reason = "ReconcileError"
            message = str(exc) if isinstance(exc, OperatorError) else f"{type(exc).__name__}: {exc}"
            log.exception("reconcile %s/%s failed", namespace, name)
        previous: ReconcileFailure | None = None
        job: dict[str, Any] | None = {"metadata": {"namespace": namespace, "name": name}}
        try:
            job = self.api.get_job(namespace, name)
            if job is None or job["metadata"].get("deletionTimestamp"):
                return None
            previous = parse_status(job.get("status")).reconcile_failure
            job, same = self._write(job, reason, message)
        except Exception as write_error:  # the API may be what fails: the Event still goes
            log.warning("could not record the failure of %s/%s: %s", namespace, name, write_error)
            same = False
        if job is not None and not same:
            events.append((job, Event("Warning", reason, message)))
        return self.backoff(previous.count + 1 if previous is not None else 1)

    def _write(self, job: dict[str, Any], reason: str, message: str) -> tuple[dict[str, Any], bool]:
        """The failure into status; returns the job written and whether it is the same
        failure as the one recorded (no new history entry, no new Event)."""
        now = self.clock()
        st = parse_status(job.get("status"))
        previous = st.reconcile_failure
        same = previous is not None and (previous.reason, previous.message) == (reason, message)
        st.reconcile_failure = ReconcileFailure(
            reason=reason,
            message=message,
            since=previous.since if same and previous is not None else iso(now),
            count=(previous.count if previous is not None else 0) + 1,
        )
        if not same:
            entry = HistoryEntry(
                time=iso(now), reason=reason, message=message, epoch=st.epoch, attempt=st.attempt
            )
            st.history = [*st.history, entry][-self.settings.history_limit :]
            told = Event("Warning", reason, message)  # kept until posted (announce.py)
            keep_warnings(st, job["metadata"]["name"], job["metadata"].get("uid", ""), [told], now)
        set_conditions(st, int(job["metadata"].get("generation") or 0), now)
        meta = job["metadata"]
        self.metrics.jobs.update((meta["namespace"], meta["name"]), st, None)
        return self.api.replace_status(job, status_body(st)), same

    def backoff(self, count: int) -> float:
        base = self.settings.failure_backoff_base_seconds
        cap = self.settings.failure_backoff_cap_seconds
        return min(cap, base * 2 ** min(count - 1, 30))

    def clear(self, job: dict[str, Any]) -> None:
        """After a reconcile that went through: a recorded failure is over."""
        st = parse_status(job.get("status"))
        if st.reconcile_failure is None:
            return
        st.reconcile_failure = None
        meta = job["metadata"]
        kafka = self.kafka.view((meta["namespace"], meta["name"])) if self.kafka else None
        set_conditions(st, int(meta.get("generation") or 0), self.clock(), kafka)
        with contextlib.suppress(ConflictError):  # changed meanwhile: the next one clears it
            self.api.replace_status(job, status_body(st))
