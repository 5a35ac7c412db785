"""The warm hand-over (spec.handover.mode warm; docs/operator/handover.md, "Warm hand-over"): a pure
decision per step, like the rest of decide.py.

A redeploy or a restart by hand that finds a running driver starts the next driver first,
waiting for the go (`--wait-for-go`), and keeps following the running one (status.epoch,
attempt and driverPod stay its own). status.handover is the write-ahead record of the rest:

| handover phase | observed                                   | → step                          |
|----------------|--------------------------------------------|---------------------------------|
| Warming        | next pod not created                       | create it (launch-waiting)      |
| Warming        | handover.json ready for it                 | Stopping: stop the running one  |
| Warming        | deadline passed                            | FellBack (NotReadyInTime)       |
| Warming/Stopping | next pod ended, deleted, lost, or failed | FellBack (WaitingDriverFailed)  |
| Stopping       | a pod of the running driver still present  | delete it (fencing.delete_pods) |
| Stopping       | none left (the fencing rule)               | write go.json (go)              |
| Warming/Stopping | go.json names the next pod              | Started: it is the job's driver |

A standby (standby.py) enters this table when it takes over: at Stopping when it is ready,
at Warming (keeping its deadline) while it still warms up.

FellBack deletes the waiting pod and records the cold path's target: the next attempt after
the waiting one (its name is never reused), launched once every other pod is gone, as today.
The go is written only when no pod of the running driver is left: the decision says so from
the pods observed, and the reconciler lists them again right before writing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from streamingjob_operator.api.status_models import (
    HandoverStatus,
    StreamingJobStatus,
    WaitingDriver,
)
from streamingjob_operator.rules.epochs import deployed, put_deployed, set_target
from streamingjob_operator.rules.fencing import delete_pods, has_ended, is_lost, off_lost_nodes
from streamingjob_operator.rules.history import Event, record
from streamingjob_operator.rules.observed import PodInfo, Signal, iso, parse_time
from streamingjob_operator.rules.step import Decision, Job

ACTIVE = ("Warming", "Stopping")


def active(st: StreamingJobStatus) -> HandoverStatus | None:
    """The hand-over under way (None: none, or the last one has ended)."""
    return st.handover if st.handover is not None and st.handover.phase in ACTIVE else None


def eligible(job: Job, st: StreamingJobStatus) -> bool:
    """Whether a redeploy or restart now may hand over warm: asked for, and a driver of
    the job runs."""
    return job.spec.handover.mode == "warm" and driver_runs(job, st)


def driver_runs(job: Job, st: StreamingJobStatus) -> bool:
    """A driver of the job runs: created, running, not stopping, its node heard from."""
    if st.launch_state != "Created" or st.unknown_since:
        return False
    driver = next((p for p in job.observed.pods if p.name == st.driver_pod), None)
    return (
        driver is not None
        and driver.phase == "Running"
        and not has_ended(driver)
        and driver.deleting_since is None
        and not _lost(job, st, driver)
    )


def start(job: Job, st: StreamingJobStatus, epoch: int, attempt: int) -> HandoverStatus:
    """Records the next driver's target in status.handover; the running driver stays the
    job's driver (epoch, attempt, driverPod) until the go."""
    target = st.model_copy(deep=True)
    set_target(job, target, epoch, attempt)
    st.handover = HandoverStatus(
        pod=target.driver_pod,
        epoch=epoch,
        attempt=attempt,
        phase="Warming",
        since=iso(job.now),
        launch_state="Pending",
        checkpoint_location=target.checkpoint_location,
        previous_checkpoint_location=target.previous_checkpoint_location,
        older_checkpoint_locations=list(target.older_checkpoint_locations),
        checkpoint_group_id=target.checkpoint_group_id,
        running_spec=deployed(st),
    )
    return st.handover


def unlaunched(st: StreamingJobStatus, pods: Iterable[PodInfo]) -> HandoverStatus | None:
    """The hand-over under way whose next driver is not created yet (nothing runs the spec
    it was targeted for), else None. (None too for one an operator before this rule began:
    it kept no running_spec to put back.)"""
    moving = active(st)
    if moving is None or moving.launch_state != "Pending" or moving.running_spec is None:
        return None
    if any(p.owner == moving.pod for p in pods):  # created, Created not yet recorded
        return None
    return moving


def undo(job: Job, d: Decision) -> None:
    """The spec changed again before the next driver was created (unlaunched): the
    hand-over ends (Cancelled, its name and epoch never handed out again) and the running
    driver's deployed markers are put back, so that the act is decided anew against what
    runs: none if the spec is back to it, else one act for every change since (waiting for
    the hand-over's end, the driver built from the newer spec would be restarted for it)."""
    st, now = d.status, job.now
    handover = active(st)
    assert handover is not None and handover.running_spec is not None
    handover.phase, handover.since = "Cancelled", iso(now)
    handover.reason = "Replaced"
    handover.message = "the spec changed again before its driver was created"
    put_deployed(st, handover.running_spec)
    st.message = f"warm hand-over to {handover.pod} replaced: {handover.message}"
    record(st, now, "HandoverReplaced", st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", "HandoverReplaced", st.message))


def split(
    st: StreamingJobStatus, pods: tuple[PodInfo, ...]
) -> tuple[list[PodInfo], list[PodInfo], list[PodInfo]]:
    """The running driver's pods, the waiting driver's pods, and any other (stale) pod."""
    handover = active(st)
    waiting_pod = handover.pod if handover is not None else ""
    running: list[PodInfo] = []
    waiting: list[PodInfo] = []
    stale: list[PodInfo] = []
    for p in pods:
        if p.owner and p.owner == waiting_pod:
            waiting.append(p)
        elif p.owner and p.owner == st.driver_pod and st.launch_state:
            running.append(p)
        else:
            stale.append(p)
    return running, waiting, stale


def follow(job: Job, d: Decision, running: list[PodInfo], waiting: list[PodInfo]) -> Decision:
    """One step of the hand-over under way (the table at the top)."""
    st, now = d.status, job.now
    handover = active(st)
    assert handover is not None
    go = job.observed.go
    if go is not None and go.names(handover.pod, handover.epoch, handover.attempt):
        return _started(job, d, handover)
    next_driver = next((p for p in waiting if p.name == handover.pod), None)
    if handover.launch_state == "Pending":
        if next_driver is None:
            if past_deadline(job, handover):  # its creation kept failing
                return _not_ready(job, d, handover, waiting)
            handover.avoid_nodes = off_lost_nodes(job, handover.avoid_nodes)
            d.action = "launch-waiting"
            d.requeue_after = 0
            return d
        handover.launch_state = "Created"
    if why := waiting_failed(job, handover, next_driver):
        return fall_back(job, d, "WaitingDriverFailed", why, waiting)
    if handover.phase == "Warming":
        ready = own_signal(job.observed.handover, handover)
        if ready is None or ready.state != "ready":
            return _warming(job, d, handover, waiting)
        handover.phase, handover.since = "Stopping", iso(now)
        st.message = (
            f"warm hand-over: {handover.pod} is ready; stopping {st.driver_pod} between batches"
        )
        record(st, now, "HandoverReady", st.message, job.cfg.history_limit)
        d.events.append(Event("Normal", "HandoverReady", st.message))
    if running:  # today's stop and fencing: graceful, force once ended or lost
        return delete_pods(d, running, st, now, job.cfg, phase=None, msg=None)
    retry_at = parse_time(st.next_retry_time)  # a standby's takeover in a crash loop
    if retry_at is not None and now < retry_at:
        d.action = "wait"
        d.requeue_after = max((retry_at - now).total_seconds(), 0.05)
        return d
    d.action = "go"
    d.requeue_after = 0
    return d


def _warming(job: Job, d: Decision, handover: HandoverStatus, waiting: list[PodInfo]) -> Decision:
    """Not ready yet: wait until the deadline (then fall back)."""
    if past_deadline(job, handover):
        return _not_ready(job, d, handover, waiting)
    left = job.spec.handover.ready_timeout_seconds - waited(job, handover.since)
    d.requeue_after = max(min(job.cfg.fencing_poll_seconds, left), 0.05)
    return d


def waited(job: Job, since: str) -> float:
    """Seconds since `since` (RFC 3339; 0 when unset)."""
    return (job.now - (parse_time(since) or job.now)).total_seconds()


def past_deadline(job: Job, waiting: WaitingDriver) -> bool:
    """Its warm-up (since its phase began) took spec.handover.readyTimeoutSeconds."""
    return waited(job, waiting.since) >= job.spec.handover.ready_timeout_seconds


def not_ready(job: Job, waiting: WaitingDriver) -> str:
    timeout = job.spec.handover.ready_timeout_seconds
    return f"{waiting.pod} did not report ready within spec.handover.readyTimeoutSeconds={timeout}"


def _not_ready(job: Job, d: Decision, handover: HandoverStatus, waiting: list[PodInfo]) -> Decision:
    return fall_back(job, d, "NotReadyInTime", not_ready(job, handover), waiting)


def fall_back(job: Job, d: Decision, reason: str, why: str, waiting: list[PodInfo]) -> Decision:
    """The waiting driver goes (at once: it read nothing) and the cold path takes over: the
    next attempt after it, launched once every other pod is gone (decide's launch)."""
    st, now = d.status, job.now
    handover = st.handover
    assert handover is not None
    handover.phase, handover.since = "FellBack", iso(now)
    handover.reason, handover.message = reason, why
    set_target(job, st, handover.epoch, handover.attempt + 1)
    _adopt_locations(st, handover)
    st.phase = "Launching"
    st.message = f"warm hand-over failed ({why}): cold path, epoch {st.epoch} attempt {st.attempt}"
    record(st, now, "WarmHandoverFailed", st.message, job.cfg.history_limit)
    d.events.append(Event("Warning", "WarmHandoverFailed", st.message))
    d.requeue_after = 0
    if waiting:
        d.action = "delete"
        d.force_delete = tuple(p.name for p in waiting)
    return d


def _adopt_locations(st: StreamingJobStatus, handover: HandoverStatus) -> None:
    """The hand-over's checkpoint, catch-up chain and group (the spec its driver was launched
    with, which a change waiting for the hand-over's end may have changed since) are the
    job's from now on."""
    st.checkpoint_location = handover.checkpoint_location
    st.previous_checkpoint_location = handover.previous_checkpoint_location
    st.older_checkpoint_locations = list(handover.older_checkpoint_locations)
    if handover.checkpoint_group_id:  # "": recorded by an operator that kept none
        st.checkpoint_group_id = handover.checkpoint_group_id


def end_for_suspend(job: Job, d: Decision) -> None:
    """A suspend ends a hand-over under way. Once the go names the next driver, it may have
    read and committed: it is the job's driver (its epoch and checkpoint are what a resume
    restores), as after any go. Before the go it read nothing: Cancelled, its pod goes with
    the job's others, its record kept so that its name and epoch are never handed out again."""
    handover = active(d.status)
    if handover is None:
        return
    go = job.observed.go
    if go is not None and go.names(handover.pod, handover.epoch, handover.attempt):
        _started(job, d, handover)
        return
    handover.phase, handover.since = "Cancelled", iso(job.now)


def _started(job: Job, d: Decision, handover: HandoverStatus) -> Decision:
    """The go was written: the next driver is the job's driver, as after a launch."""
    st, now = d.status, job.now
    old = st.driver_pod
    set_target(job, st, handover.epoch, handover.attempt)
    _adopt_locations(st, handover)
    st.launch_state = "Created"
    st.launched_at = iso(now)
    st.next_retry_time = ""
    st.phase = "Pending"
    handover.phase, handover.since = "Started", iso(now)
    st.message = (
        f"warm hand-over: {old} is gone, {st.driver_pod} has the go "
        f"(epoch {st.epoch} attempt {st.attempt})"
    )
    record(st, now, "HandedOver", st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", "HandedOver", st.message))
    d.requeue_after = 0
    return d


def waiting_failed(job: Job, waiting: WaitingDriver, pod: PodInfo | None) -> str:
    """Why the waiting driver cannot take over ("": it still can)."""
    if pod is None:
        return f"{waiting.pod} is gone"
    if has_ended(pod):
        code = pod.termination.exit_code if pod.termination else None
        return f"{pod.name} ended (exit code {code})" if code is not None else f"{pod.name} ended"
    if pod.deleting_since is not None or pod.reason == "Evicted":
        return f"{pod.name} is being deleted"
    if _lost(job, None, pod):
        return f"{pod.name} is lost (its node silent)"
    signal = own_signal(job.observed.handover, waiting)
    if signal is not None and signal.state == "failed":
        return f"{pod.name} failed to warm up: {signal.error or 'no error given'}"
    return ""


def own_signal(signal: Signal | None, waiting: WaitingDriver) -> Signal | None:
    """The waiting driver's own handover.json (another pod's is ignored)."""
    if signal is None or not signal.names(waiting.pod, waiting.epoch, waiting.attempt):
        return None
    return signal


def _lost(job: Job, st: StreamingJobStatus | None, pod: PodInfo) -> bool:
    """The lost-pod rule (fencing.is_lost); `st` gives the running driver's unknownSince."""
    cfg = job.cfg
    unknown_since = parse_time(st.unknown_since) if st is not None else None
    return is_lost(
        pod, job.now, cfg.node_lost_grace_seconds, unknown_since, cfg.node_silent_seconds
    )


def no_go(waiting: WaitingDriver, pods: Iterable[tuple[str, str]]) -> str | None:
    """Why the go must wait, from a direct list right before writing it (pod name, the
    driver it belongs to): any pod but the next driver and its executors. None: go."""
    others = [name for name, driver in pods if waiting.pod not in (name, driver)]
    return f"no go for {waiting.pod}: pods still present: {', '.join(others)}" if others else None


def go_signal(waiting: WaitingDriver, now: datetime) -> dict[str, str | int]:
    """The go the next driver waits for (go.json): its pod and target, and when."""
    return {
        "pod": waiting.pod,
        "epoch": waiting.epoch,
        "attempt": waiting.attempt,
        "time": iso(now),
    }
