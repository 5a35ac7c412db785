"""A reconcile step's whole decision, pure: decide()'s one action and status, and what the
step records and does beside it: a recorded rescale seen applied, a pending
spec.offsetsAction gated on the decision (refused while the job runs), the operator's reading
of the group in Kafka (lag, the Degraded condition, a Warning Event when its problem is new),
and, when nothing else is to be done, the autoscaler's step (autoscaling.py); its Warnings
kept in status (history.keep_warnings) so that any later process posts them. The reconciler
(reconcile.py) records the plan's status, then acts on it; it decides nothing itself, not
even whether to step again (`next_step`) or what an unreadable spec makes of the job
(`unparsable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from streamingjob_operator.api.job import Job
from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.rules import autoscaling, offsets_action
from streamingjob_operator.rules.autoscaling import Rescale, Window, note_applied
from streamingjob_operator.rules.decide import DecideConfig, Decision, Event, decide, invalid
from streamingjob_operator.rules.history import keep_warnings
from streamingjob_operator.rules.observed import Observed
from streamingjob_operator.rules.status import KafkaView, apply_kafka, set_conditions

# What the next step of the same reconcile may take first hand (reconcile.py's Known): the
# job, its pods and report as this step left them, or the job alone (its pods listed again)
Reuse = Literal["all", "job"]


@dataclass
class Plan:
    decision: Decision
    run_offsets: bool  # run spec.offsetsAction once the decision is acted on (offsets_step.py)
    rescale: Rescale | None  # set spec.executor.instances once the status is recorded
    window: Window | None  # the autoscaler's readings to keep (None: none)


def plan(
    job: Job,
    observed: Observed,
    kafka: KafkaView | None,
    window: Window | None,
    cfg: DecideConfig,
) -> Plan:
    """The step: `kafka` is the operator's last reading of the job's group, `window` the
    autoscaler's readings kept since the last step."""
    meta, spec = job.meta, job.spec
    decision = decide(job, observed, cfg)
    note_applied(spec, decision.status)
    gate = offsets_gate(job, decision, observed, cfg.history_limit)
    _kafka(job, decision, kafka, observed.now)
    rescale = None
    if decision.action == "none":
        st = decision.status
        rescale, window = autoscaling.step(spec, st, kafka, observed.report, window, observed.now)
        set_conditions(st, meta.generation, observed.now, kafka)
        if rescale is not None:
            decision.events.append(Event("Normal", rescale.event_reason, rescale.reason))
    # the step's Warnings kept with the status that records them (announce.py posts them)
    keep_warnings(decision.status, meta.name, meta.uid, decision.events, observed.now)
    return Plan(decision, gate == "run" and decision.action == "none", rescale, window)


def offsets_gate(
    job: Job, decision: Decision, observed: Observed, history_limit: int
) -> offsets_action.Gate | None:
    """What this step does with a pending spec.offsetsAction (offsets_action.gate); a
    refusal is recorded in the decision's status and events."""
    spec = job.spec
    pods_left = bool(observed.pods) or decision.action != "none"
    gate = offsets_action.gate(spec, decision.status, pods_left)
    if gate == "refuse" and spec.offsets_action is not None:
        decision.events.append(
            offsets_action.record(
                decision.status,
                spec.offsets_action,
                "Refused",
                offsets_action.RUNNING_REFUSAL,
                who=offsets_action.requested_by(job.meta),
                now=observed.now,
                history_limit=history_limit,
            )
        )
    return gate


def _kafka(job: Job, decision: Decision, kafka: KafkaView | None, now: datetime) -> None:
    """The operator's reading of the group, into the decision's status and conditions; a
    Warning Event when its problem is new."""
    apply_kafka(decision.status, kafka)
    set_conditions(decision.status, job.meta.generation, now, kafka)
    if kafka is not None and kafka.problem:
        previous = next((c for c in job.status.conditions if c.type == "Degraded"), None)
        if previous is None or previous.message != kafka.problem:
            decision.events.append(Event("Warning", "KafkaUnavailable", kafka.problem))


def unparsable(
    status: StreamingJobStatus, message: str, generation: int, now: datetime, cfg: DecideConfig
) -> Decision:
    """A spec the models cannot read: Invalid (the message names each field), recorded,
    nothing else decided."""
    decision = invalid(status, message, now, cfg)
    set_conditions(decision.status, generation, now)
    return decision


def next_step(
    decision: Decision, changed: bool, pods_known: bool
) -> tuple[bool, float | None, Reuse]:
    """After acting: whether the reconcile steps again at once, when to look again, and what
    the next step may reuse. A launch, a deletion that completed at once (`pods_known`), or
    a recorded transition that asks for an immediate next step continues in this reconcile;
    deletions still under way are given time (fencingPollSeconds) to complete."""
    if decision.action in ("launch", "launch-waiting", "launch-standby"):
        return True, 0.0, "all"
    if decision.action == "go":  # read the ConfigMap again: the go is part of the state
        return True, 0.0, "job"
    if decision.action == "delete":
        return pods_known, decision.requeue_after, "all"
    if decision.action == "none" and changed and decision.requeue_after == 0:
        return True, 0.0, "all"
    return False, decision.requeue_after, "all"
