"""One idempotent reconcile: observe → validate → decide → act → record, the loop alone: the
steps are observe.py (the job read once into its typed object, api/job.py; validate.py), the
pure rules/plan.py (decide.py's step and what goes with it: the offsets gate, the Kafka
reading, the autoscaler) and rules/autoscaling.py's scale_back, act.py, and the status write
here; failures.py records what stops a reconcile; offsets_step.py and scaling.py act on
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

from streamingjob_operator.act import Actor
from streamingjob_operator.announce import Announcer, Events
from streamingjob_operator.api.job import Job
from streamingjob_operator.children.validation import summary
from streamingjob_operator.failures import Failures
from streamingjob_operator.io.errors import ConflictError, TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaMonitor
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.io.nodes import NodeTracker
from streamingjob_operator.observe import Known, Observer, Unparsable, read_job
from streamingjob_operator.offsets_step import OffsetsActions
from streamingjob_operator.rules.autoscaling import scale_back
from streamingjob_operator.rules.decide import DecideConfig
from streamingjob_operator.rules.history import keep_warnings
from streamingjob_operator.rules.plan import next_step, plan, unparsable
from streamingjob_operator.rules.status import status_body
from streamingjob_operator.scaling import Scaling
from streamingjob_operator.seen import Seen
from streamingjob_operator.settings import OperatorSettings
from streamingjob_operator.validate import Validator

log = logging.getLogger(__name__)

MAX_STEPS = 8

Step = tuple[bool, float | None, Known]  # step again at once, when to look again, what is known


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
        self.scaling = Scaling(api, self.metrics)
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
                body = known.job or self.api.get_job(namespace, name)
                job = read_job(body) if body is not None else None
                if job is None or job.meta.deleting:
                    self.metrics.jobs.forget((namespace, name))  # its series go with it
                    self.scaling.forget((namespace, name))
                    self.announcer.forget((namespace, name))
                    return None
                self.seen.saw_job(job.meta)
                if known.job is None:  # read afresh: warnings kept but not posted yet
                    events.extend(self.announcer.unposted(job.body))
                try:
                    again, delay, known = self._step(job, known, events)
                except ConflictError:  # the job changed since it was read: read it again
                    known = Known()
                    continue
                if not again:
                    break
            if (last := known.job or body) is not None:
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

    def _step(self, job: Job | Unparsable, known: Known, events: Events) -> Step:
        """Observe, decide, record the decision in status (write-ahead), act. Returns whether
        to step again at once, when to look again, and what the next step knows first hand."""
        now = self.clock()
        if isinstance(job, Unparsable):
            return self._unparsable(job, now, events)
        meta, spec = job.meta, job.spec
        if back := scale_back(spec, job.status, meta, now):
            # before anything is decided on it: the autoscaler owns the count (no restart)
            self.scaling.undo(job, back, events)
            return True, 0.0, Known()
        pods, report, observed = self.observer.observe(job, known, now)
        kafka_view = self.observer.kafka_view(job, now)
        step = plan(job, observed, kafka_view, self.scaling.window(meta.key), self.cfg)
        self.scaling.keep(meta.key, step.window)
        decision, new_status = step.decision, step.decision.status

        changed = status_body(new_status) != status_body(job.status)
        written = job
        if changed:  # write-ahead: the decision is recorded before it is acted on
            answer = self.api.replace_status(job.body, status_body(new_status))
            written = job.written(answer, new_status)
        events.extend((written.body, event) for event in decision.events)
        if step.rescale is not None:  # recorded: now the restart in the same epoch (decide.py)
            self.scaling.rescale(written, step.rescale)
            self.metrics.jobs.update(meta.key, new_status, kafka_view, observed.report)
            return True, 0.0, Known()
        if decision.restart_reason:
            self.metrics.restarts.labels(decision.restart_reason).inc()
            self.metrics.jobs.restarted(meta.key, decision.restart_reason)
        self.metrics.jobs.update(meta.key, new_status, kafka_view, observed.report)

        pods_after = self.actor.act(written, decision, pods, job.status.spark_ui_service)
        body = self.offsets.run(written, events) if step.run_offsets else written.body
        again, delay, reuse = next_step(decision, changed, pods_after is not None)
        if reuse == "job":
            return again, delay, Known(job=body)
        return again, delay, Known(job=body, pods=pods_after, report=report)

    def _unparsable(self, job: Unparsable, now: datetime, events: Events) -> Step:
        decision = unparsable(job.status, summary(job.problems), job.meta.generation, now, self.cfg)
        meta = job.meta
        keep_warnings(decision.status, meta.name, meta.uid, decision.events, now)
        body = job.body
        if status_body(decision.status) != status_body(job.status):
            body = self.api.replace_status(body, status_body(decision.status))
        events.extend((body, event) for event in decision.events)
        return False, decision.requeue_after, Known()
