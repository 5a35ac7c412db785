"""The standby (spec.standby.enabled; docs/operator/handover.md, "Standby"): one more driver of the
running epoch, started waiting for its go like a warm hand-over's next driver and kept beside
the running one, so that a lost driver is replaced without a cold start. A pure decision per
step, like the rest of decide.py.

| observed                                              | → step                              |
|-------------------------------------------------------|-------------------------------------|
| the driver Running, no standby                        | record one: the next attempt        |
| recorded, its pod not created                         | create it (launch-standby)          |
| its handover.json says ready                          | Ready (Event StandbyReady)          |
| it ended, is deleted, lost, failed, or not ready in   | Failed (Event StandbyFailed); its   |
| spec.handover.readyTimeoutSeconds                     | pods go; the next after a backoff   |
| spec.standby off, a redeploy, a suspend, a cold start | Removed: its pods go as stale ones  |
| the running driver lost, a restartNonce, a drain      | takeover: a hand-over (handover.py) |

The takeover is the warm hand-over's second half, with its fencing: the running driver's pods
are deleted (at once when it ended or is lost by the one lost-pod rule, between batches
otherwise) and the go is written only once none is left. The standby then restores from the
checkpoint, as any restart in the epoch does.
"""

from __future__ import annotations

from datetime import timedelta

from streamingjob_operator.api.naming import driver_pod_name
from streamingjob_operator.api.status_models import (
    HandoverStatus,
    StandbyStatus,
    StreamingJobStatus,
)
from streamingjob_operator.rules.epochs import next_attempt
from streamingjob_operator.rules.fencing import off_lost_nodes
from streamingjob_operator.rules.handover import (
    not_ready,
    own_signal,
    past_deadline,
    waited,
    waiting_failed,
)
from streamingjob_operator.rules.history import Event, record
from streamingjob_operator.rules.observed import PodInfo, iso, of_driver, parse_time
from streamingjob_operator.rules.step import Decision, Job


def current(st: StreamingJobStatus) -> StandbyStatus | None:
    """The standby whose pod is wanted (Warming or Ready), None: none."""
    standby = st.standby
    if standby is None or standby.state not in ("Warming", "Ready") or standby.epoch != st.epoch:
        return None
    return standby


def split(st: StreamingJobStatus, pods: tuple[PodInfo, ...]) -> tuple[list[PodInfo], list[PodInfo]]:
    """The standby's pods (its driver and executors), and the others."""
    standby = current(st)
    return of_driver(standby.pod if standby is not None else "", pods)


def remove(st: StreamingJobStatus, job: Job, why: str) -> None:
    """No standby wanted any more: its pods are stale from now on (deleted first)."""
    if (standby := current(st)) is not None:
        standby.state, standby.since, standby.message = "Removed", iso(job.now), why


def keep(job: Job, d: Decision, pods: list[PodInfo]) -> Decision:
    """One step of keeping a standby beside a running driver (the table's first rows)."""
    st = d.status
    if not job.spec.standby.enabled:
        remove(st, job, "spec.standby.enabled is false")
        return d
    standby = current(st)
    if standby is None:
        return _record(job, d)
    pod = next((p for p in pods if p.name == standby.pod), None)
    if standby.launch_state == "Pending":
        if pod is None:
            if past_deadline(job, standby):  # its creation kept failing
                return _failed(job, d, standby, not_ready(job, standby))
            standby.avoid_nodes = off_lost_nodes(job, standby.avoid_nodes)
            d.action, d.requeue_after = "launch-standby", 0
            return d
        standby.launch_state = "Created"
    if why := waiting_failed(job, standby, pod):
        return _failed(job, d, standby, why)
    if standby.state == "Ready":
        return d
    signal = own_signal(job.observed.handover, standby)
    if signal is not None and signal.state == "ready":
        standby.state, standby.since, standby.failures = "Ready", iso(job.now), 0
        message = f"standby {standby.pod} is ready to take over from {st.driver_pod}"
        record(st, job.now, "StandbyReady", message, job.cfg.history_limit)
        d.events.append(Event("Normal", "StandbyReady", message))
        return d
    if past_deadline(job, standby):
        return _failed(job, d, standby, not_ready(job, standby))
    left = job.spec.handover.ready_timeout_seconds - waited(job, standby.since)
    d.requeue_after = max(min(job.cfg.fencing_poll_seconds, left, d.requeue_after or left), 0.05)
    return d


def _record(job: Job, d: Decision) -> Decision:
    """A new standby: the epoch's next attempt, restoring the running driver's checkpoint;
    after failed ones, once the restart backoff of their count has passed."""
    st, now = d.status, job.now
    last = st.standby
    failures = last.failures if last is not None and last.state == "Failed" else 0
    if last is not None and failures:
        since = parse_time(last.since) or now
        retry_at = since + timedelta(seconds=job.spec.restart_policy.backoff.delay(failures))
        if now < retry_at:
            left = (retry_at - now).total_seconds()
            d.requeue_after = max(min(left, d.requeue_after or left), 0.05)
            return d
    attempt = next_attempt(st)
    st.standby = StandbyStatus(
        pod=driver_pod_name(job.name, st.epoch, attempt),
        epoch=st.epoch,
        attempt=attempt,
        since=iso(now),
        checkpoint_location=st.checkpoint_location,
        failures=failures,
        avoid_nodes=off_lost_nodes(job, []),
    )
    d.action, d.requeue_after = "launch-standby", 0
    return d


def _failed(job: Job, d: Decision, standby: StandbyStatus, why: str) -> Decision:
    """The standby cannot take over: its pods go (as stale ones, next step) and another
    follows after the restart backoff of the failures in a row."""
    st = d.status
    standby.state, standby.since, standby.message = "Failed", iso(job.now), why
    standby.failures += 1
    delay = job.spec.restart_policy.backoff.delay(standby.failures)
    message = f"standby failed: {why}; another one in {delay:g}s"
    record(st, job.now, "StandbyFailed", message, job.cfg.history_limit)
    d.events.append(Event("Warning", "StandbyFailed", message))
    d.requeue_after = 0
    return d


def promote(job: Job, st: StreamingJobStatus) -> HandoverStatus:
    """The standby becomes the next driver of a hand-over (handover.follow): the running
    driver is stopped and fenced, then the standby gets the go. A ready one is past its
    warm-up (phase Stopping); one still warming keeps its deadline (phase Warming)."""
    standby = current(st)
    assert standby is not None
    ready = standby.state == "Ready"
    st.handover = HandoverStatus(
        pod=standby.pod,
        epoch=standby.epoch,
        attempt=standby.attempt,
        phase="Stopping" if ready else "Warming",
        since=iso(job.now) if ready else standby.since,
        launch_state=standby.launch_state,
        checkpoint_location=standby.checkpoint_location,
        previous_checkpoint_location=st.previous_checkpoint_location,
        older_checkpoint_locations=list(st.older_checkpoint_locations),
        checkpoint_group_id=st.checkpoint_group_id,
    )
    st.standby = None
    return st.handover


def take_over(job: Job, d: Decision, reason: str, message: str, delay: float = 0) -> Decision:
    """The running driver was lost (or its node drains): the standby takes over, after
    `delay` (a crash loop's backoff), restoring from the checkpoint."""
    st, now = d.status, job.now
    handover = _promote_as_restart(job, st, reason)
    st.next_retry_time = iso(now + timedelta(seconds=delay)) if delay else ""
    st.phase = "Restarting"
    after = f" in {delay:g}s" if delay else ""
    st.message = (
        f"{message}; standby {handover.pod} takes over{after} as attempt {handover.attempt} "
        "(restore)"
    )
    record(st, now, "StandbyTakeover", st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", "StandbyTakeover", st.message))
    d.restart_reason = reason
    d.requeue_after = 0
    return d


def serve_restart(job: Job, d: Decision, reason: str, message: str) -> Decision:
    """A restartNonce the standby can serve: it takes over as the epoch's next attempt
    (restore), the running driver stopped between batches."""
    st = d.status
    st.next_retry_time = ""
    st.consecutive_failures = 0
    st.recent_failures = []
    waiting = _promote_as_restart(job, st, reason)
    st.message = (
        f"{message}: epoch {waiting.epoch} attempt {waiting.attempt} (restore from checkpoint; "
        f"standby {waiting.pod} takes over)"
    )
    record(st, job.now, reason, st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", reason, st.message))
    d.requeue_after = 0
    return d


def _promote_as_restart(job: Job, st: StreamingJobStatus, reason: str) -> HandoverStatus:
    """The standby is the hand-over's next driver; the job counts one restart."""
    handover = promote(job, st)
    st.restarts += 1
    st.last_restart_reason, st.last_restart_time = reason, iso(job.now)
    return handover
