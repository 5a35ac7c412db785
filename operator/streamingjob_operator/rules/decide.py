"""The decision: a pure function (spec, status, observed) -> one step.

Each call returns the status to record (always written before acting: status is a write-ahead
log) and at most one action. The reconciler applies the step, observes again and calls this
again until nothing is left to do, so a crash between any two steps resumes correctly.

The state that matters lives in status: the target launch (epoch, attempt, driverPod,
checkpointLocation, launchState) and the deployed markers (hashes of the spec fields that
were deployed, the nonces acted on). The table of the architecture sketch, as implemented:

| observed driver                  | spec vs deployed            | → step                       |
|----------------------------------|-----------------------------|------------------------------|
| none, never launched (epoch 0)    | -                           | target epoch 1 (fresh)       |
| running                          | same                        | nothing (stable-run reset)   |
| terminated (but refused, below)  | same                        | attempt+1 after backoff      |
| exit 2, the runner's refusal     | same                        | Invalid until a spec change  |
| deleted / evicted / node lost    | same                        | attempt+1 after backoff      |
| any                              | restartNonce changed        | attempt+1 now (restore)      |
| any                              | restart-class field changed | attempt+1 now (restore)      |
| any                              | job changed, stateless      | epoch+1 now (fresh)          |
| any                              | job changed, last-state     | attempt+1 now (restore)      |
| any, a resume included           | redeployNonce / ckpt base   | epoch+1 now (fresh)          |
| any                              | suspend: true               | delete pods, keep epoch      |
| none (suspended)                 | resume, stateless           | epoch+1 (fresh)              |
| none (suspended)                 | resume, last-state          | attempt+1 (restore)          |
| none (suspended)                 | resume after offsets reset  | epoch+1 (fresh, any mode)    |
| failed past maxRestarts           | -                           | Failed until a nonce/spec    |
| running, spec.handover warm      | a manual act (not suspend)  | warm hand-over (handover.py) |
| running, spec.standby on         | same                        | keep a standby (standby.py)  |
| lost, restartNonce, drain        | a standby is kept           | it takes over (standby.py)   |

A new target makes every other pod of the job stale; stale drivers are deleted, their
executors removed once their driver is gone or finished, and the launch waits (requeue) until
all are gone: the old driver and its executors never overlap the new.

This module composes the rules, each in a short module of its own: `epochs.py` (what makes a
new epoch and what a restart: field classes, hashes, manual acts, the launch target),
`fencing.py` (the lost-pod rule, deleting what must be gone before a launch), `handover.py`
(the warm hand-over: the next driver first, the go once the running one is gone), `standby.py`
(a warm driver kept beside the running one, taking over when it is lost), `restarts.py`
(failure classification, backoff, restartPolicy, drains), `phases.py` (one function per
phase), `history.py` (the Event vocabulary, status.history) and `step.py` (the Decision,
its config, the Failed and Invalid endings). The names other modules and tests use are
re-exported here.
"""

from __future__ import annotations

from streamingjob_operator.api import job as api
from streamingjob_operator.rules import handover, standby
from streamingjob_operator.rules.epochs import (
    ADDED_SINCE_RELEASE,
    FIELD_CLASSES,
    IGNORE,
    REDEPLOY,
    RESTART,
    SEPARATE,
    job_hash,
    manual_trigger,
    pod_hash,
)
from streamingjob_operator.rules.fencing import delete_pods, is_lost, lost_at
from streamingjob_operator.rules.history import REASONS, Event
from streamingjob_operator.rules.observed import Observed, of_driver
from streamingjob_operator.rules.phases import (
    act_by_hand,
    apply_report,
    launched,
    launching,
    suspend,
)
from streamingjob_operator.rules.restarts import (
    backoff_delay,
    note_failure_left_behind,
    tell_failure_of,
)
from streamingjob_operator.rules.step import (
    NODE_SILENT_SECONDS,
    ActionKind,
    DecideConfig,
    Decision,
    Job,
    invalid,
    mark_invalid,
    summarize,
)

# phases in which nothing runs until the user acts (a refused spec held Invalid: rule 6): no
# driver, no standby (simulation seed 2307: a standby left Warming for a job held Invalid)
HELD = ("Failed", "Completed", "Invalid")

__all__ = [
    "ADDED_SINCE_RELEASE",
    "FIELD_CLASSES",
    "IGNORE",
    "NODE_SILENT_SECONDS",
    "REASONS",
    "REDEPLOY",
    "RESTART",
    "SEPARATE",
    "ActionKind",
    "DecideConfig",
    "Decision",
    "Event",
    "backoff_delay",
    "decide",
    "invalid",
    "is_lost",
    "job_hash",
    "lost_at",
    "pod_hash",
    "summarize",
]


def _leave_behind(job: Job, d: Decision) -> None:
    """What the run a suspend or an act by hand replaces has to tell first: its report since
    the last look (offsets skipped as lost, dead letters, failing commits: found by the
    simulation, seed 110 of stop 57, a count told nowhere when a change came within a
    resync), and its failure if it failed."""
    apply_report(d.status, job.observed, d)  # only the replaced run's (its epoch, attempt)
    note_failure_left_behind(job, d)


def _tell_replaced_failures(job: Job, d: Decision) -> None:
    """A driver a suspend finds ended by a failure of its own, replaced by a new target or
    being stopped before its stop arrived (the leftover pods' rule below, which a suspended
    job never reaches: simulation seed 219 of stop 59, a leader crashed before its delete):
    told once. A standby's or a waiting driver's end is their own rules' to tell."""
    st = d.status
    waiting = handover.active(st)
    _, others = standby.split(st, job.observed.pods)
    for pod in others:
        if waiting is None or pod.name != waiting.pod:
            tell_failure_of(job, d, pod)


def decide(job: api.Job, observed: Observed, cfg: DecideConfig | None = None) -> Decision:
    """The one decision of a reconcile step, by what the job is doing: suspended, acted on by
    hand (first launch, resume, nonce, spec change), ended, launching, or launched."""
    d = _dispatch(job, observed, cfg or DecideConfig())
    if d.status.phase != "Running":
        d.status.executors = 0  # the scale's status replicas: only a running job has any
    return d


def _dispatch(of: api.Job, observed: Observed, cfg: DecideConfig) -> Decision:
    spec, meta = of.spec, of.meta
    st = of.status.model_copy(deep=True)
    d = Decision(action="none", status=st, requeue_after=cfg.resync_seconds)
    job = Job(spec, meta.namespace, meta.name, observed, cfg, meta.uid)
    for pod in observed.gone:
        tell_failure_of(job, d, pod, gone=True)

    if spec.suspend:
        _leave_behind(job, d)
        _tell_replaced_failures(job, d)
        return suspend(job, d)
    # A manual act sets a new target now, unless the spec it would launch is invalid: then
    # the running driver (if any) is left alone. One during a warm hand-over waits for its
    # end, unless the next driver is not created yet: then the hand-over is undone and the
    # act decided anew against what runs.
    if handover.unlaunched(st, observed.pods) and manual_trigger(spec, st):
        handover.undo(job, d)
    if handover.active(st) is None and (trigger := manual_trigger(spec, st)):
        if observed.invalid is not None:
            return mark_invalid(d, str(observed.invalid), observed.now, cfg)
        _leave_behind(job, d)
        return act_by_hand(job, d, *trigger)
    if st.phase in HELD and not st.launch_state:
        standby.remove(st, job, f"the job is {st.phase}")
        if observed.pods:
            return delete_pods(
                d, observed.pods, st, observed.now, cfg, phase=st.phase, msg=st.message
            )
        return d

    if handover.active(st) is not None:
        running, waiting, stale = handover.split(st, observed.pods)
        if stale:
            return delete_pods(d, stale, st, observed.now, cfg, phase=None, msg=None)
        apply_report(st, observed, d)  # the running driver's, until the go
        note_failure_left_behind(job, d)  # the running driver failed before its stop
        return handover.follow(job, d, running, waiting)
    target = st.driver_pod if st.launch_state else ""
    spare, others = standby.split(st, observed.pods)
    current, leftover = of_driver(target, others)  # the rest is stale
    if leftover:
        for pod in leftover:  # a replaced driver that failed before it was stopped
            tell_failure_of(job, d, pod)
        return delete_pods(d, leftover, st, observed.now, cfg, phase=None, msg=None)
    driver = next((p for p in current if p.name == target), None)
    if st.launch_state == "Pending":
        return launching(job, d, driver)
    if st.launch_state != "Created":
        return d  # nothing targeted (only reachable with a hand-edited status)
    return launched(job, d, driver, current, spare)
