"""The autoscaler's acts (its model: rules/autoscaler.py; its windows: autoscaling.py): a
rescale is recorded in status first, then spec.executor.instances is written (the restart in
the same epoch follows from decide.py); a count someone else wrote is set back, recorded
first as a condition and a Warning Event naming who wrote what."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus
from streamingjob_operator.autoscaling import Autoscaling, Rescale
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.rules.decide import Decision, Event
from streamingjob_operator.rules.history import keep_warnings
from streamingjob_operator.rules.observed import Observed, iso
from streamingjob_operator.rules.status import KafkaView, set_conditions, status_body

log = logging.getLogger(__name__)


class Scaling:
    def __init__(self, api: KubeApi, metrics: Metrics, clock: Callable[[], datetime]) -> None:
        self.api, self.metrics, self.clock = api, metrics, clock
        self.autoscaling = Autoscaling()  # spec.autoscaler: the windows of readings

    def step(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        decision: Decision,
        kafka_view: KafkaView | None,
        observed: Observed,
    ) -> Rescale | None:
        """The autoscaler's step when nothing else is to be done, recorded in the decision's
        status (conditions again) and, for a rescale, its events."""
        if decision.action != "none":
            return None
        meta, now, new_status = job["metadata"], observed.now, decision.status
        rescale = self.autoscaling.step(
            (meta["namespace"], meta["name"]), spec, new_status, kafka_view, observed.report, now
        )
        set_conditions(new_status, int(meta.get("generation") or 0), now, kafka_view)
        if rescale is not None:
            decision.events.append(Event("Normal", rescale.event_reason, rescale.reason))
        return rescale

    def rescale(self, job: dict[str, Any], rescale: Rescale) -> None:
        meta = job["metadata"]
        log.info("autoscaler %s/%s: %s", meta["namespace"], meta["name"], rescale.reason)
        self.metrics.autoscaler_decisions.labels(rescale.event_reason).inc()
        self.api.set_executor_instances(job, rescale.to)

    def undo(
        self,
        job: dict[str, Any],
        status: StreamingJobStatus,
        owned: int,
        message: str,
        events: list[tuple[dict[str, Any], Event]],
    ) -> None:
        """Sets spec.executor.instances back to the autoscaler's count: recorded first, then
        written. An empty message: the autoscaler's own rescale was interrupted after its
        status write; completed."""
        meta = job["metadata"]
        if message:
            now = self.clock()
            st = status.model_copy(deep=True)
            assert st.autoscaler is not None
            st.autoscaler.conflict, st.autoscaler.conflict_time = message, iso(now)
            set_conditions(st, int(meta.get("generation") or 0), now)
            refused = Event("Warning", "ScaleRefused", message)
            keep_warnings(st, meta["name"], meta.get("uid", ""), [refused], now)
            job = self.api.replace_status(job, status_body(st))
            events.append((job, refused))
            self.metrics.autoscaler_decisions.labels("ScaleRefused").inc()
            log.warning("autoscaler %s/%s: %s", meta["namespace"], meta["name"], message)
        self.api.set_executor_instances(job, owned)

    def forget(self, key: tuple[str, str]) -> None:
        self.autoscaling.forget(key)
