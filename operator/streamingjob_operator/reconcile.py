"""One idempotent reconcile: observe → validate → decide → act → record, the loop alone: the
steps are observe.py (with validate.py), the pure rules/decide.py, act.py, and the status
write here; failures.py records what stops a reconcile; offsets_step.py and scaling.py act on
spec.offsetsAction and the autoscaler. Deletion is `finalizer.py`; what reconciles saw, for
the handlers, is `seen.py`.

`Reconciler.reconcile(namespace, name)` is the only entry point; handlers call nothing else.
It loops over single decision steps (each recorded in status before it is acted on) until a
step leaves nothing to do, and returns when to look again.

Within one reconcile a step does not read again what the previous step already knows first
hand: the job as the API server returned it from our own status write, and the job's pods as
listed, minus the pods our deletes removed at once, plus the pod our create returned. Anything
else (a conflict, a graceful deletion, a new reconcile) starts again from direct reads. The
fencing read right before a driver create is always a direct list.

Events are posted when the reconcile ends (in order, also when it fails): they are a record
for people, so the next action does not wait for them. A Warning is kept in status with the
decision it tells and posted by a later reconcile if this one ends before (announce.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from streamingjob_operator.act import Actor
from streamingjob_operator.announce import Announcer, Events
from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus, parse_status
from streamingjob_operator.autoscaling import foreign_scale, note_applied
from streamingjob_operator.children.validation import InvalidJobError, parse, summary
from streamingjob_operator.failures import Failures
from streamingjob_operator.io.errors import ConflictError, TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaMonitor
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.io.nodes import NodeTracker
from streamingjob_operator.observe import Known, Observer
from streamingjob_operator.offsets_step import OffsetsActions
from streamingjob_operator.rules.decide import DecideConfig, Decision, Event, decide, invalid
from streamingjob_operator.rules.history import keep_warnings
from streamingjob_operator.rules.status import KafkaView, apply_kafka, set_conditions, status_body
from streamingjob_operator.scaling import Scaling
from streamingjob_operator.seen import Seen
from streamingjob_operator.settings import OperatorSettings
from streamingjob_operator.validate import Validator

log = logging.getLogger(__name__)

MAX_STEPS = 8


class Reconciler:
    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        *,
        kafka: KafkaMonitor | None = None,
        metrics: Metrics | None = None,
        seen: Seen | None = None,
        nodes: NodeTracker | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.clock = clock  # the simulation's (simulation/) is virtual
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.seen = seen or Seen()
        self.cfg = DecideConfig(
            node_lost_grace_seconds=settings.node_lost_grace_seconds,
            node_silent_seconds=settings.node_silent_seconds,
            fencing_poll_seconds=settings.fencing_poll_seconds,
            resync_seconds=settings.resync_seconds,
            history_limit=settings.history_limit,
        )
        self.observer = Observer(api, self.seen, nodes, kafka, Validator(api))
        self.actor = Actor(api, settings, self.seen, self.metrics, clock)
        self.failures = Failures(api, settings, self.metrics, kafka, clock)
        self.offsets = OffsetsActions(api, settings, self.observer, clock)
        self.scaling = Scaling(api, self.metrics, clock)
        self.announcer = Announcer(api, clock)

    def reconcile(self, namespace: str, name: str) -> float | None:
        """The only entry point: returns seconds until the next look, or None when the job
        is gone."""
        started = time.monotonic()
        events: Events = []
        delay = self._reconcile(namespace, name, events)
        self.announcer.post(events)
        self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        return delay

    def _reconcile(self, namespace: str, name: str, events: Events) -> float | None:
        try:
            known = Known()
            delay: float | None = self.settings.fencing_poll_seconds
            for _ in range(MAX_STEPS):
                job = known.job or self.api.get_job(namespace, name)
                if job is None or job["metadata"].get("deletionTimestamp"):
                    self.metrics.jobs.forget((namespace, name))  # its series go with it
                    self.scaling.forget((namespace, name))
                    self.announcer.forget((namespace, name))
                    return None
                self.seen.saw_job(namespace, name, job)
                if known.job is None:  # read afresh: warnings kept but not posted yet
                    events.extend(self.announcer.unposted(job))
                try:
                    again, delay, known = self._step(job, known, events)
                except ConflictError:  # the job changed since it was read: read it again
                    known = Known()
                    continue
                if not again:
                    break
            if (last := known.job or job) is not None:
                self.failures.clear(last)
            self.metrics.reconciles.labels("ok").inc()
            return delay
        except TransientError as exc:
            self.metrics.reconciles.labels("retry").inc()
            self.metrics.errors.labels(type(exc).__name__).inc()
            log.info("reconcile %s/%s will retry: %s", namespace, name, exc)
            return float(getattr(exc, "delay", None) or self.settings.fencing_poll_seconds)
        except Exception as exc:
            self.metrics.reconciles.labels("error").inc()
            self.metrics.errors.labels(type(exc).__name__).inc()
            return self.failures.record(namespace, name, exc, events)

    def _step(
        self, job: dict[str, Any], known: Known, events: Events
    ) -> tuple[bool, float | None, Known]:
        """Observe, decide, record the decision in status (write-ahead), act. Returns whether
        to step again at once, when to look again, and what the next step knows first hand."""
        meta = job["metadata"]
        key = (meta["namespace"], meta["name"])
        now = self.clock()
        old_status = parse_status(job.get("status"))
        spec, problems = parse(job.get("spec") or {})
        if spec is None:  # the schema let it through (an older CRD): the same Invalid path
            return self._unparsable(job, old_status, problems, now, events)
        if foreign := foreign_scale(spec, old_status, meta.get("managedFields") or []):
            # before anything is decided on it: the autoscaler owns the count (no restart)
            self.scaling.undo(job, old_status, foreign.owned, foreign.message, events)
            return True, 0.0, Known()
        pods, report, observed = self.observer.observe(job, spec, old_status, known, now)
        decision = decide(
            spec,
            old_status,
            observed,
            namespace=key[0],
            name=key[1],
            cfg=self.cfg,
            uid=meta.get("uid", ""),
        )
        new_status = decision.status
        note_applied(spec, new_status)
        offsets_gate = self.offsets.gate(job, spec, decision, observed)
        kafka_view = self._apply_kafka_view(job, spec, old_status, decision, now)
        rescale = self.scaling.step(job, spec, decision, kafka_view, observed)

        keep_warnings(new_status, key[1], meta.get("uid", ""), decision.events, now)
        changed = status_body(new_status) != status_body(old_status)
        if changed:  # write-ahead: the decision is recorded before it is acted on
            job = self.api.replace_status(job, status_body(new_status))
        events.extend((job, event) for event in decision.events)
        if rescale is not None:  # recorded: now the restart in the same epoch (decide.py)
            self.scaling.rescale(job, rescale)
            self.metrics.jobs.update(key, new_status, kafka_view, observed.report)
            return True, 0.0, Known()
        if decision.restart_reason:
            self.metrics.restarts.labels(decision.restart_reason).inc()
            self.metrics.jobs.restarted(key, decision.restart_reason)
        self.metrics.jobs.update(key, new_status, kafka_view, observed.report)

        pods_after = self.actor.act(job, spec, decision, pods, old_status.spark_ui_service)
        if offsets_gate == "run" and decision.action == "none":
            job = self.offsets.run(job, spec, events)
        return self._next_step(decision, changed, Known(job=job, pods=pods_after, report=report))

    def _unparsable(
        self,
        job: dict[str, Any],
        old_status: StreamingJobStatus,
        problems: list[InvalidJobError],
        now: datetime,
        events: Events,
    ) -> tuple[bool, float | None, Known]:
        """A spec the models cannot read: Invalid, recorded, nothing else decided."""
        decision = invalid(old_status, summary(problems), now, self.cfg)
        set_conditions(decision.status, int(job["metadata"].get("generation") or 0), now)
        meta = job["metadata"]
        keep_warnings(decision.status, meta["name"], meta.get("uid", ""), decision.events, now)
        if status_body(decision.status) != status_body(old_status):
            job = self.api.replace_status(job, status_body(decision.status))
        events.extend((job, event) for event in decision.events)
        return False, decision.requeue_after, Known()

    def _apply_kafka_view(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        old_status: StreamingJobStatus,
        decision: Decision,
        now: datetime,
    ) -> KafkaView | None:
        """The operator's reading of the group, into the decision's status and conditions; a
        Warning Event when its problem is new."""
        kafka_view = self.observer.kafka_view(job, spec, now)
        apply_kafka(decision.status, kafka_view)
        set_conditions(
            decision.status, int(job["metadata"].get("generation") or 0), now, kafka_view
        )
        if kafka_view is not None and kafka_view.problem:
            previous = next((c for c in old_status.conditions if c.type == "Degraded"), None)
            if previous is None or previous.message != kafka_view.problem:
                decision.events.append(Event("Warning", "KafkaUnavailable", kafka_view.problem))
        return kafka_view

    @staticmethod
    def _next_step(
        decision: Decision, changed: bool, known: Known
    ) -> tuple[bool, float | None, Known]:
        # A launch, a deletion that completed at once, or a recorded transition that asks for
        # an immediate next step continues in this reconcile; deletions still under way are
        # given time (fencingPollSeconds) to complete.
        if decision.action in ("launch", "launch-waiting", "launch-standby"):
            return True, 0.0, known
        if decision.action == "go":  # read the ConfigMap again: the go is part of the state
            return True, 0.0, Known(job=known.job)
        if decision.action == "delete":
            return known.pods is not None, decision.requeue_after, known
        if decision.action == "none" and changed and decision.requeue_after == 0:
            return True, 0.0, known
        return False, decision.requeue_after, known
