"""The autoscaler's memory and acts (its step: rules/autoscaling.py; its model:
rules/autoscaler.py): the window of readings of each job, kept between reconciles; a rescale
is recorded in status first, then spec.executor.instances is written (the restart in the same
epoch follows from decide.py); a count someone else wrote is set back, recorded first as a
condition and a Warning Event naming who wrote what."""

from __future__ import annotations

import logging
import threading
from typing import Any

from streamingjob_operator.api.job import Job
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.rules.autoscaling import Rescale, ScaleBack, Window
from streamingjob_operator.rules.history import Event
from streamingjob_operator.rules.status import status_body

log = logging.getLogger(__name__)

JobKey = tuple[str, str]


class Scaling:
    def __init__(self, api: KubeApi, metrics: Metrics) -> None:
        self.api, self.metrics = api, metrics
        # spec.autoscaler: the windows of readings (reconciles of different jobs run in
        # parallel; one job's, one at a time)
        self._windows: dict[JobKey, Window] = {}
        self._lock = threading.Lock()

    def window(self, key: JobKey) -> Window | None:
        with self._lock:
            return self._windows.get(key)

    def keep(self, key: JobKey, window: Window | None) -> None:
        with self._lock:
            if window is None:
                self._windows.pop(key, None)
            else:
                self._windows[key] = window

    def forget(self, key: JobKey) -> None:
        self.keep(key, None)

    def rescale(self, job: Job, rescale: Rescale) -> None:
        meta = job.meta
        log.info("autoscaler %s/%s: %s", meta.namespace, meta.name, rescale.reason)
        self.metrics.autoscaler_decisions.labels(rescale.event_reason).inc()
        self.api.set_executor_instances(job.body, rescale.to)

    def undo(self, job: Job, back: ScaleBack, events: list[tuple[dict[str, Any], Event]]) -> None:
        """Sets spec.executor.instances back to the autoscaler's count: recorded first, then
        written. No status to record: the autoscaler's own rescale was interrupted after its
        status write; completed."""
        body = job.body
        if back.status is not None and back.event is not None:
            body = self.api.replace_status(body, status_body(back.status))
            events.append((body, back.event))
            self.metrics.autoscaler_decisions.labels("ScaleRefused").inc()
            meta = job.meta
            log.warning("autoscaler %s/%s: %s", meta.namespace, meta.name, back.event.message)
        self.api.set_executor_instances(body, back.owned)
