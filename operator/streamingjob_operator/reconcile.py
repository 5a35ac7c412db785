"""One idempotent reconcile: observe → validate → decide → act → record. Deletion is
`finalizer.py`; what reconciles saw, for the handlers, is `seen.py`.

`Reconciler.reconcile(namespace, name)` is the only entry point; handlers call nothing else.
It loops over single decision steps (each recorded in status before it is acted on) until a
step leaves nothing to do, and returns when to look again.

Within one reconcile a step does not read again what the previous step already knows first
hand: the job as the API server returned it from our own status write, and the job's pods as
listed, minus the pods our deletes removed at once, plus the pod our create returned. Anything
else (a conflict, a graceful deletion, a new reconcile) starts again from direct reads. The
fencing read right before a driver create is always a direct list.

Events are posted when the reconcile ends (in order, also when it fails): they are a record
for people, so the next action does not wait for them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spark_app.kafka_config import (
    ENV_SASL_MECHANISM,
    ENV_SASL_PASSWORD,
    ENV_SASL_USERNAME,
    ENV_SECURITY_PROTOCOL,
    ENV_SSL_CA_PEM,
)
from spark_app.kafka_metadata import KafkaUnavailable, UnknownTopic
from spark_app.offsets_admin import OffsetsRefused, OffsetsResult
from spark_app.options import OptionError
from streamingjob_operator.api.models import (
    HistoryEntry,
    OffsetsActionSpec,
    ReconcileFailure,
    StreamingJobSpec,
    StreamingJobStatus,
    parse_status,
)
from streamingjob_operator.api.naming import LABEL_DRIVER, go_configmap_name, report_configmap_name
from streamingjob_operator.autoscaling import Autoscaling, Rescale, foreign_scale, note_applied
from streamingjob_operator.children.builders import (
    build_disruption_budget,
    build_driver_pod,
    build_go_configmap,
    build_job_configmap,
    build_offsets_configmap,
    build_report_configmap,
    build_role,
    build_role_binding,
    build_service,
    build_service_account,
    build_ui_service,
)
from streamingjob_operator.children.validation import (
    InvalidJobError,
    check_secrets,
    check_size,
    check_spec,
    dry_run_pods,
    parse,
    rejection_problems,
    summary,
)
from streamingjob_operator.io.errors import ConflictError, FatalError, OperatorError, TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaMonitor, KafkaTarget, run_offsets_action
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.io.nodes import NodeTracker, with_node_view
from streamingjob_operator.rules import handover, offsets_action, standby
from streamingjob_operator.rules.decide import DecideConfig, Decision, Event, decide, invalid
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.observed import (
    GO_KEY,
    HANDOVER_KEY,
    Observed,
    PodInfo,
    iso,
    parse_report,
    parse_signal,
)
from streamingjob_operator.rules.status import KafkaView, apply_kafka, set_conditions, status_body
from streamingjob_operator.seen import Seen, resource_version
from streamingjob_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

MAX_STEPS = 8


@dataclass
class _Known:
    """What the next step of this reconcile may use without reading it again (see top)."""

    job: dict[str, Any] | None = None
    pods: list[dict[str, Any]] | None = None
    report: dict[str, Any] | None = None


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
        self.nodes = nodes
        self.settings = settings
        self.kafka = kafka
        self.metrics = metrics or Metrics()
        self.seen = seen or Seen()
        self.cfg = DecideConfig(
            node_lost_grace_seconds=settings.node_lost_grace_seconds,
            node_silent_seconds=settings.node_silent_seconds,
            fencing_poll_seconds=settings.fencing_poll_seconds,
            resync_seconds=settings.resync_seconds,
            history_limit=settings.history_limit,
        )
        # (uid, generation) whose spec passed the checks without Secrets (validation.py)
        self._valid: set[tuple[str, int]] = set()
        self.offsets_runner = run_offsets_action  # spec.offsetsAction's Kafka side
        self.autoscaling = Autoscaling()  # spec.autoscaler: the windows of readings

    # --- entry point -------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Returns seconds until the next look, or None when the job is gone."""
        started = time.monotonic()
        events: list[tuple[dict[str, Any], Event]] = []
        delay = self._reconcile(namespace, name, events)
        for job, event in events:
            self.api.post_event(job, event.type, event.reason, event.message)
        self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        return delay

    def _reconcile(
        self, namespace: str, name: str, events: list[tuple[dict[str, Any], Event]]
    ) -> float | None:
        try:
            known = _Known()
            delay: float | None = self.settings.fencing_poll_seconds
            for _ in range(MAX_STEPS):
                job = known.job or self.api.get_job(namespace, name)
                if job is None or job["metadata"].get("deletionTimestamp"):
                    self.metrics.jobs.forget((namespace, name))  # its series go with it
                    self.autoscaling.forget((namespace, name))
                    return None
                self.seen.saw_job(namespace, name, job)
                try:
                    again, delay, known = self._step(job, known, events)
                except ConflictError:  # the job changed since it was read: read it again
                    known = _Known()
                    continue
                if not again:
                    break
            if (last := known.job or job) is not None:
                self._clear_failure(last)
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
            return self._record_failure(namespace, name, exc, events)

    # --- failures ----------------------------------------------------------------------

    def _record_failure(
        self,
        namespace: str,
        name: str,
        exc: Exception,
        events: list[tuple[dict[str, Any], Event]],
    ) -> float | None:
        """A reconcile that cannot go on never ends in a log line alone: it is recorded in
        status (`reconcileFailure`, condition Degraded with reason ApiRejected for a request
        the API server refused, ReconcileError otherwise, and the server's message), a
        Warning Event says so when the failure is new, and the job is retried with backoff
        (the count lives in status, so a restarted operator keeps the pace)."""
        if isinstance(exc, FatalError):
            reason, message = "ApiRejected", str(exc)
            log.warning("reconcile %s/%s failed: %s", namespace, name, message)
        else:
            reason = "ReconcileError"
            message = str(exc) if isinstance(exc, OperatorError) else f"{type(exc).__name__}: {exc}"
            log.exception("reconcile %s/%s failed", namespace, name)
        now = self.clock()
        previous: ReconcileFailure | None = None
        job: dict[str, Any] | None = {"metadata": {"namespace": namespace, "name": name}}
        try:
            job = self.api.get_job(namespace, name)
            if job is None or job["metadata"].get("deletionTimestamp"):
                return None
            st = parse_status(job.get("status"))
            previous = st.reconcile_failure
            same = previous is not None and (previous.reason, previous.message) == (
                reason,
                message,
            )
            st.reconcile_failure = ReconcileFailure(
                reason=reason,
                message=message,
                since=previous.since if same and previous is not None else iso(now),
                count=(previous.count if previous is not None else 0) + 1,
            )
            if not same:
                st.history = [
                    *st.history,
                    HistoryEntry(
                        time=iso(now),
                        reason=reason,
                        message=message,
                        epoch=st.epoch,
                        attempt=st.attempt,
                    ),
                ][-self.settings.history_limit :]
            set_conditions(st, int(job["metadata"].get("generation") or 0), now)
            self.metrics.jobs.update((namespace, name), st, None)
            job = self.api.replace_status(job, status_body(st))
        except Exception as write_error:  # the API may be what fails: the Event still goes
            log.warning("could not record the failure of %s/%s: %s", namespace, name, write_error)
            same = False
        if job is not None and not same:
            events.append((job, _warning(reason, message)))
        count = previous.count + 1 if previous is not None else 1
        return self._failure_backoff(count)

    def _failure_backoff(self, count: int) -> float:
        base = self.settings.failure_backoff_base_seconds
        cap = self.settings.failure_backoff_cap_seconds
        return min(cap, base * 2 ** min(count - 1, 30))

    def _clear_failure(self, job: dict[str, Any]) -> None:
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

    # --- one step ----------------------------------------------------------------------

    def _step(
        self, job: dict[str, Any], known: _Known, events: list[tuple[dict[str, Any], Event]]
    ) -> tuple[bool, float | None, _Known]:
        """Observe, decide, record the decision in status (write-ahead), act. Returns whether
        to step again at once, when to look again, and what the next step knows first hand."""
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        now = self.clock()
        old_status = parse_status(job.get("status"))
        spec, problems = parse(job.get("spec") or {})
        if spec is None:  # the schema let it through (an older CRD): the same Invalid path
            return self._unparsable(job, old_status, problems, now, events)
        if foreign := foreign_scale(spec, old_status, meta.get("managedFields") or []):
            # before anything is decided on it: the autoscaler owns the count (no restart)
            self._undo_scale(job, old_status, foreign.owned, foreign.message, events)
            return True, 0.0, _Known()
        pods, report, observed = self._observe(job, spec, old_status, known, now)
        decision = decide(
            spec,
            old_status,
            observed,
            namespace=namespace,
            name=name,
            cfg=self.cfg,
            uid=meta.get("uid", ""),
        )
        new_status = decision.status
        note_applied(spec, new_status)
        offsets_gate = self._gate_offsets_action(job, spec, decision, observed)
        kafka_view = self._apply_kafka_view(job, spec, old_status, decision, now)
        rescale = self._autoscale(job, spec, decision, kafka_view, observed)

        changed = status_body(new_status) != status_body(old_status)
        if changed:  # write-ahead: the decision is recorded before it is acted on
            job = self.api.replace_status(job, status_body(new_status))
        events.extend((job, event) for event in decision.events)
        if rescale is not None:  # recorded: now the restart in the same epoch (decide.py)
            self._rescale(job, rescale)
            self.metrics.jobs.update((namespace, name), new_status, kafka_view, observed.report)
            return True, 0.0, _Known()
        if decision.restart_reason:
            self.metrics.restarts.labels(decision.restart_reason).inc()
            self.metrics.jobs.restarted((namespace, name), decision.restart_reason)
        self.metrics.jobs.update((namespace, name), new_status, kafka_view, observed.report)

        pods_after = self._act(job, spec, decision, pods, old_status.spark_ui_service)
        if offsets_gate == "run" and decision.action == "none":
            job = self._offsets_action(job, spec, events)
        return self._next_step(decision, changed, _Known(job=job, pods=pods_after, report=report))

    def _unparsable(
        self,
        job: dict[str, Any],
        old_status: StreamingJobStatus,
        problems: list[InvalidJobError],
        now: datetime,
        events: list[tuple[dict[str, Any], Event]],
    ) -> tuple[bool, float | None, _Known]:
        """A spec the models cannot read: Invalid, recorded, nothing else decided."""
        decision = invalid(old_status, summary(problems), now, self.cfg)
        set_conditions(decision.status, int(job["metadata"].get("generation") or 0), now)
        if status_body(decision.status) != status_body(old_status):
            job = self.api.replace_status(job, status_body(decision.status))
        events.extend((job, event) for event in decision.events)
        return False, decision.requeue_after, _Known()

    def _observe(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        old_status: StreamingJobStatus,
        known: _Known,
        now: datetime,
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, Observed]:
        """The job's pods and report (read, or known first hand), and decide()'s view of them."""
        meta = job["metadata"]
        pods, report = self._observe_pods(job, old_status, known)
        observed = Observed(
            now=now,
            pods=self._with_node_view(meta["namespace"], meta["name"], pods),
            report=parse_report(report),
            invalid=self._invalid(job, spec, old_status),
            handover=parse_signal(report, HANDOVER_KEY),
            go=parse_signal(self._go_configmap(job, old_status), GO_KEY),
        )
        return pods, report, observed

    def _go_configmap(self, job: dict[str, Any], status: StreamingJobStatus) -> Any:
        """The go ConfigMap, read only while a warm hand-over is under way (only then does
        its go.json decide anything); read afresh: the go step before wrote it."""
        if handover.active(status) is None:
            return None
        meta = job["metadata"]
        return self.api.get_configmap(meta["namespace"], go_configmap_name(meta["name"]))

    def _gate_offsets_action(
        self, job: dict[str, Any], spec: StreamingJobSpec, decision: Decision, observed: Observed
    ) -> offsets_action.Gate | None:
        """What this step does with a pending spec.offsetsAction (offsets_action.gate); a
        refusal is recorded in the decision's status and events."""
        pods_left = bool(observed.pods) or decision.action != "none"
        gate = offsets_action.gate(spec, decision.status, pods_left)
        if gate == "refuse" and spec.offsets_action is not None:
            decision.events.append(
                offsets_action.record(
                    decision.status,
                    spec.offsets_action,
                    "Refused",
                    offsets_action.RUNNING_REFUSAL,
                    who=offsets_action.requested_by(job["metadata"]),
                    now=observed.now,
                    history_limit=self.cfg.history_limit,
                )
            )
        return gate

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
        kafka_view = self._kafka_view(job, spec, old_status, now)
        apply_kafka(decision.status, kafka_view)
        set_conditions(
            decision.status, int(job["metadata"].get("generation") or 0), now, kafka_view
        )
        if kafka_view is not None and kafka_view.problem:
            previous = next((c for c in old_status.conditions if c.type == "Degraded"), None)
            if previous is None or previous.message != kafka_view.problem:
                decision.events.append(_warning("KafkaUnavailable", kafka_view.problem))
        return kafka_view

    def _autoscale(
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

    @staticmethod
    def _next_step(
        decision: Decision, changed: bool, known: _Known
    ) -> tuple[bool, float | None, _Known]:
        # A launch, a deletion that completed at once, or a recorded transition that asks for
        # an immediate next step continues in this reconcile; deletions still under way are
        # given time (fencingPollSeconds) to complete.
        if decision.action in ("launch", "launch-waiting", "launch-standby"):
            return True, 0.0, known
        if decision.action == "go":  # read the ConfigMap again: the go is part of the state
            return True, 0.0, _Known(job=known.job)
        if decision.action == "delete":
            return known.pods is not None, decision.requeue_after, known
        if decision.action == "none" and changed and decision.requeue_after == 0:
            return True, 0.0, known
        return False, decision.requeue_after, known

    # --- the autoscaler (autoscaling.py) --------------------------------------------------

    def _rescale(self, job: dict[str, Any], rescale: Rescale) -> None:
        meta = job["metadata"]
        log.info("autoscaler %s/%s: %s", meta["namespace"], meta["name"], rescale.reason)
        self.metrics.autoscaler_decisions.labels(rescale.event_reason).inc()
        self.api.set_executor_instances(job, rescale.to)

    def _undo_scale(
        self,
        job: dict[str, Any],
        status: StreamingJobStatus,
        owned: int,
        message: str,
        events: list[tuple[dict[str, Any], Event]],
    ) -> None:
        """Sets spec.executor.instances back to the autoscaler's count: recorded first (a
        condition and a Warning Event name who wrote what), then written. An empty message:
        the autoscaler's own rescale was interrupted after its status write; completed."""
        meta = job["metadata"]
        if message:
            now = self.clock()
            st = status.model_copy(deep=True)
            assert st.autoscaler is not None
            st.autoscaler.conflict, st.autoscaler.conflict_time = message, iso(now)
            set_conditions(st, int(meta.get("generation") or 0), now)
            job = self.api.replace_status(job, status_body(st))
            events.append((job, _warning("ScaleRefused", message)))
            self.metrics.autoscaler_decisions.labels("ScaleRefused").inc()
            log.warning("autoscaler %s/%s: %s", meta["namespace"], meta["name"], message)
        self.api.set_executor_instances(job, owned)

    # --- offsets actions (offsets_action.py) ----------------------------------------------

    def _offsets_action(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        events: list[tuple[dict[str, Any], Event]],
    ) -> dict[str, Any]:
        """Runs spec.offsetsAction (the job is suspended, no pod left: offsets_action.gate)
        and records the outcome. Kafka is asked in this reconcile's thread, each request
        retried through a leader change within kafkaDeadlineSeconds. Should recording it fail
        (the API server down), the next reconcile runs the action again: every action is
        idempotent except a reset to latest, which then takes the log end of that moment."""
        action = spec.offsets_action
        assert action is not None
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        outcome, message, result, config_map = self._ask_kafka(job, spec, action)
        # Kafka has answered: record it even if the job changed meanwhile (a resume right
        # after the request must still see offsetsActedSinceLaunch), on the job as it is now.
        for _ in range(5):
            now = self.clock()
            st = parse_status(job.get("status"))
            event = offsets_action.record(
                st,
                action,
                outcome,
                message,
                who=offsets_action.requested_by(meta),
                now=now,
                history_limit=self.cfg.history_limit,
                result=result,
                config_map=config_map,
            )
            set_conditions(st, int(job["metadata"].get("generation") or 0), now)
            try:
                job = self.api.replace_status(job, status_body(st))
                break
            except ConflictError:
                fresh = self.api.get_job(namespace, name)
                if fresh is None:
                    return job
                job = fresh
        else:
            raise TransientError(f"offsets action of {namespace}/{name}: status kept changing")
        log.info("offsets action of %s/%s: %s", namespace, name, event.message)
        events.append((job, event))
        return job

    def _ask_kafka(
        self, job: dict[str, Any], spec: StreamingJobSpec, action: OffsetsActionSpec
    ) -> tuple[offsets_action.Outcome, str, OffsetsResult | None, str]:
        """The offsets action's Kafka side: (outcome, message, result, the listing
        ConfigMap's name); a success's listing is applied here."""
        result = None
        try:
            target = self._kafka_target(job["metadata"]["namespace"], spec)
            if target is None:
                raise OffsetsRefused("the Secret of spec.kafkaCredentials is missing")
            request = offsets_action.request(action)
            settings = self.settings
            result = self.offsets_runner(
                target, request, settings.kafka_timeout_seconds, settings.kafka_deadline_seconds
            )
            message = result.summary()
            listing = offsets_action.listing(result, self.clock())
            child = build_offsets_configmap(job, listing.data)
            self.api.apply(child)
            return "Succeeded", message, result, child["metadata"]["name"]
        except OffsetsRefused as exc:
            return "Refused", f"nothing written: {exc}", result, ""
        except (KafkaUnavailable, UnknownTopic, OptionError) as exc:
            return "Failed", f"nothing written: {exc}", result, ""

    # --- observe & validate -------------------------------------------------------------

    def _observe_pods(
        self, job: dict[str, Any], status: Any, known: _Known
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The job's pods (direct list) and, once a driver was created, the runner's report
        ConfigMap; what this reconcile already knows first hand is not read again."""
        if known.pods is not None:
            return known.pods, known.report
        if status.epoch == 0:
            # Never launched: a driver is created only after status records its target
            # (write-ahead), so none of ours exists, and fencing lists right before any create.
            # One list less per new job, each a quorum read of every pod in the namespace.
            return [], None
        meta = job["metadata"]
        pods = self.api.list_job_pods(meta["namespace"], meta["name"])
        self.seen.saw_pods(meta["namespace"], meta["name"], pods)
        report = None
        if status.launch_state == "Created":
            report = self.api.get_configmap(meta["namespace"], report_configmap_name(meta["name"]))
        return pods, report

    def _with_node_view(
        self, namespace: str, name: str, pods: list[dict[str, Any]]
    ) -> tuple[PodInfo, ...]:
        """The pods as decide() sees them; the tracker learns which nodes to wake this job
        for."""
        infos = with_node_view(pods, self.nodes)
        if self.nodes is not None:
            self.nodes.track((namespace, name), {p.node for p in infos if p.node})
        return infos

    def _invalid(self, job: dict[str, Any], spec: StreamingJobSpec, status: Any) -> str | None:
        """The validation problems (validation.py) of a spec that may be launched next: before
        a launch, on a new generation (a manual act would relaunch), and while Invalid (to see
        it fixed). None: nothing in the way."""
        generation = int(job["metadata"].get("generation") or 0)
        if (
            status.launch_state == "Created"
            and status.phase != "Invalid"
            and generation == status.observed_generation
        ):
            return None
        problems = self._validate(job, spec, status)
        return summary(problems) if problems else None

    def _validate(
        self, job: dict[str, Any], spec: StreamingJobSpec, status: Any
    ) -> list[InvalidJobError]:
        """Every check of validation.py: the rules without I/O and the dry runs are done once
        per generation when they pass; the Secrets are read every time (they may go)."""
        meta = job["metadata"]
        namespace = meta["namespace"]
        problems = check_secrets(spec, namespace, self.api.secret_data)
        key = (meta.get("uid", ""), int(meta.get("generation") or 0))
        if key in self._valid:
            return problems
        problems += check_spec(spec) + check_size(job, spec)
        if not problems:
            for dry in dry_run_pods(job, spec, status):
                if dry.template_only and problems:
                    continue  # the template's fields were named already
                rejection = self.api.dry_run_create(dry.obj)
                if rejection is not None:
                    problems += rejection_problems(dry, spec, rejection)
        if not problems:
            if len(self._valid) > 10_000:
                self._valid.clear()
            self._valid.add(key)
        return problems

    def _kafka_view(self, job: dict[str, Any], spec: StreamingJobSpec, status: Any, now):
        if self.kafka is None or spec.suspend:
            return None
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if self.kafka.is_due(key, now):
            target = self._kafka_target(key[0], spec)
            if target is not None:
                self.kafka.refresh(key, target)
        return self.kafka.view(key)

    def _kafka_target(self, namespace: str, spec: StreamingJobSpec) -> KafkaTarget | None:
        """The job's source as its driver connects to it (credentials as the pod gets them)."""
        credentials: dict[str, str] = {}
        creds = spec.kafka_credentials
        if creds is None:
            return KafkaTarget.of(spec.job.source, credentials)
        data = self.api.secret_data(namespace, creds.secret_name)
        if data is None:
            return None  # reported as InvalidSpec by validation
        credentials = {
            ENV_SECURITY_PROTOCOL: creds.security_protocol,
            ENV_SASL_MECHANISM: creds.sasl_mechanism,
            ENV_SASL_USERNAME: data.get(creds.username_key) or "",
            ENV_SASL_PASSWORD: data.get(creds.password_key) or "",
        }
        ca_field = "spec.kafkaCredentials.caSecret (none: the system's CA bundle)"
        if creds.ca_secret is not None:
            ca = self.api.secret_data(namespace, creds.ca_secret.name)
            if ca is None:
                return None  # reported as InvalidSpec by validation
            credentials[ENV_SSL_CA_PEM] = ca.get(creds.ca_secret.key) or ""
            ca_field = (
                f"spec.kafkaCredentials.caSecret (Secret {creds.ca_secret.name!r}, key "
                f"{creds.ca_secret.key!r})"
            )
        sasl_field = f"spec.kafkaCredentials.secretName (Secret {creds.secret_name!r})"
        return KafkaTarget.of(spec.job.source, credentials, (sasl_field, ca_field))

    # --- act ---------------------------------------------------------------------------

    def _act(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        decision: Decision,
        pods: list[dict[str, Any]],
        previous_ui_service: str = "",
    ) -> list[dict[str, Any]] | None:
        """Acts; returns the job's pods afterwards when that is known first hand (None: a
        deletion is still under way, list again)."""
        if previous_ui_service and previous_ui_service != decision.status.spark_ui_service:
            # sparkUI switched off: status named the Service until this step's write; one
            # delete, once. A crash right before it leaves a Service selecting a driver without
            # a UI; the job's deletion removes it (finalizer.py, owner reference).
            meta = job["metadata"]
            self.api.delete("Service", meta["namespace"], previous_ui_service)
        if decision.action == "delete":
            gone = [self._delete_pod(job, pod, force=True) for pod in decision.force_delete]
            gone += [self._delete_pod(job, pod) for pod in decision.delete]
            if not gone or not all(gone):
                return None
            removed = {*decision.force_delete, *decision.delete}
            return [p for p in pods if p["metadata"]["name"] not in removed]
        if decision.action == "launch":
            return self._launch(job, spec, decision)
        if decision.action in ("launch-waiting", "launch-standby"):
            return self._launch_waiting(job, spec, decision, pods)
        if decision.action == "go":
            self._go(job, spec, decision)
        return pods

    def _delete_pod(self, job: dict[str, Any], pod: str, *, force: bool = False) -> bool:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        log.info("deleting pod %s/%s%s", namespace, pod, " (force)" if force else "")
        self.seen.mark(namespace, name, pod, Seen.DELETING)
        gone = False
        try:
            gone = self.api.delete_pod(namespace, pod, force=force)
        finally:
            self.seen.mark(namespace, name, pod, None if gone else "")
        return gone

    def _still_wanted(self, meta: dict[str, Any]) -> bool:
        """The job (this very object, by uid) exists and is not being deleted."""
        current = self.api.get_job(meta["namespace"], meta["name"])
        if current is None:
            return False
        now = current["metadata"]
        return not now.get("deletionTimestamp") and now.get("uid") == meta.get("uid")

    def _apply_children(
        self, job: dict[str, Any], spec: StreamingJobSpec, st: StreamingJobStatus
    ) -> None:
        """The launch's children besides the driver, each one server-side apply: one call
        whether it exists or not, no write where nothing changed."""
        children = [build_service(job), build_report_configmap(job)]
        children.append(self._disruption_budget(job, spec, st))
        if spec.service_account_name is None:
            children += [build_service_account(job), self._role(job, spec, st)]
            children.append(build_role_binding(job))
        if spec.spark_ui.enabled:
            children.append(build_ui_service(job))
        children.append(build_job_configmap(job, spec, st.avoid_nodes))  # this launch's
        for child in children:
            self.api.apply(child)

    @staticmethod
    def _disruption_budget(
        job: dict[str, Any], spec: StreamingJobSpec, st: StreamingJobStatus
    ) -> dict[str, Any]:
        """The budget of the job's driver: st.driver_pod, the running one while another
        waits beside it (launched with st.executors of them: more than the spec's after a
        scale-down that hands over warm), else the one launched now (st.executors is 0)."""
        executors = max(spec.executor.instances, st.executors)
        return build_disruption_budget(job, st.driver_pod, executors)

    @staticmethod
    def _role(
        job: dict[str, Any], spec: StreamingJobSpec, st: StreamingJobStatus
    ) -> dict[str, Any]:
        """The driver Role: this driver's executors, and during a warm hand-over or beside a
        standby also the waiting driver's (the running one was launched with st.executors
        of them)."""
        waiting = handover.active(st) or standby.current(st)
        if waiting is None:
            return build_role(job, st.driver_pod, spec.executor.instances)
        instances = max(spec.executor.instances, st.executors)
        return build_role(job, st.driver_pod, instances, handing_over_to=waiting.pod)

    def _launch_waiting(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        decision: Decision,
        pods: list[dict[str, Any]],
    ) -> list[dict[str, Any]] | None:
        """A warm hand-over's next driver or the standby, started beside the running one: it
        waits for the go (handover.py), so no fencing list precedes it; the go has its own."""
        st, meta = decision.status, job["metadata"]
        self._apply_children(job, spec, st)
        self.api.apply(build_go_configmap(job))  # where its go will be (only a waiting one's)
        settings = self.settings
        of = Launch.standby if decision.action == "launch-standby" else Launch.waiting
        launch = of(st, entrypoint=settings.driver_entrypoint, spark_submit=settings.spark_submit)
        created = self._create_driver(job, build_driver_pod(job, spec, launch))
        if created is None:
            return None  # it exists already: the next step lists again and adopts it
        log.info("started %s/%s waiting for the go", meta["namespace"], launch.driver_pod)
        return [*pods, created]

    def _go(self, job: dict[str, Any], spec: StreamingJobSpec, decision: Decision) -> None:
        """The go of a warm hand-over, after the fencing read: only the next driver and its
        executors are left of the job's pods (decide saw the running driver gone; this
        direct list confirms it right before the write)."""
        st, meta = decision.status, job["metadata"]
        waiting = handover.active(st)
        assert waiting is not None
        pods = self.api.list_job_pods(meta["namespace"], meta["name"])
        self.seen.saw_pods(meta["namespace"], meta["name"], pods)
        others = [
            p["metadata"]["name"]
            for p in pods
            if waiting.pod not in (p["metadata"]["name"], _driver_of(p))
        ]
        if others:
            raise TransientError(
                f"no go for {waiting.pod}: pods still present: {', '.join(others)}",
                delay=self.settings.fencing_poll_seconds,
            )
        # the budget moves to the next driver before its go (none of the old one's pods is
        # left): a crash after the go cannot leave the running driver's executors uncovered
        self.api.apply(build_disruption_budget(job, waiting.pod, spec.executor.instances))
        go = {
            "pod": waiting.pod,
            "epoch": waiting.epoch,
            "attempt": waiting.attempt,
            "time": iso(self.clock()),
        }
        # its own ConfigMap, which no driver may write (builders.build_role); applied again
        # for a hand-over an older operator started, before that ConfigMap existed
        self.api.apply(build_go_configmap(job))
        name = go_configmap_name(meta["name"])
        self.api.set_configmap_key(meta["namespace"], name, GO_KEY, json.dumps(go))
        log.info("go written for %s/%s", meta["namespace"], waiting.pod)
        if spec.service_account_name is None:  # the Role names the one driver left
            self.api.apply(build_role(job, waiting.pod, spec.executor.instances))

    def _create_driver(self, job: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any] | None:
        """Creates a driver pod (None: it exists already); one of a job deleted meanwhile is
        removed again."""
        meta, driver = job["metadata"], pod["metadata"]["name"]
        self.seen.mark(meta["namespace"], meta["name"], driver, Seen.CREATING)
        created = None
        try:
            created = self.api.create_pod(pod)
        finally:
            state = resource_version(created) if created is not None else None
            self.seen.mark(meta["namespace"], meta["name"], driver, state)
        if created is None:
            return None
        if not self._still_wanted(meta):
            # Deleted while launching: its finalizer may have looked for pods before this
            # one existed, and nothing but the garbage collector would remove it. A deletion
            # that starts after this look finds the pod itself (the finalizer lists after it).
            self.api.delete_pod(meta["namespace"], driver)
            raise TransientError(
                f"{meta['namespace']}/{meta['name']} was deleted while launching: {driver} removed"
            )
        return created

    def _launch(
        self, job: dict[str, Any], spec: StreamingJobSpec, decision: Decision
    ) -> list[dict[str, Any]] | None:
        st = decision.status
        meta = job["metadata"]
        self._apply_children(job, spec, st)
        # Fencing, checked again right before the create: no other pod of the job exists.
        pods = self.api.list_job_pods(meta["namespace"], meta["name"])
        self.seen.saw_pods(meta["namespace"], meta["name"], pods)
        others = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != st.driver_pod]
        if others:
            raise TransientError(
                f"not launching {st.driver_pod}: pods still present: {', '.join(others)}",
                delay=self.settings.fencing_poll_seconds,
            )
        settings = self.settings
        launch = Launch.of(
            st, entrypoint=settings.driver_entrypoint, spark_submit=settings.spark_submit
        )
        created = self._create_driver(job, build_driver_pod(job, spec, launch))
        if created is None:
            return None  # it exists already: the next step lists again and adopts it
        self.metrics.launches.labels("fresh" if st.attempt == 1 else "restore").inc()
        log.info(
            "launched %s/%s epoch %d attempt %d at %s",
            meta["namespace"],
            st.driver_pod,
            st.epoch,
            st.attempt,
            iso(self.clock()),
        )
        return [*pods, created]


def _driver_of(pod: dict[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_DRIVER, "")


def _warning(reason: str, message: str) -> Event:
    return Event("Warning", reason, message)
