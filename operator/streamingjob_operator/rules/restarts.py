"""Restarts (semantics rules 4, 6 and 13): why a driver stopped (`failure_of`), what follows
(`on_driver_gone`: completion, an automatic restart after backoff in the same epoch, phase
Failed past restartPolicy or a stale checkpoint, or phase Invalid when the runner refused the
job's input), and the move off a draining node (`move_off`: a restart that is no failure).
Every automatic restart restores the epoch's checkpoint."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from spark_app.api.exit_codes import EXIT_INVALID, REFUSED_MARK, RUNNER_EXIT_REASONS
from streamingjob_operator.api.policy_models import RestartPolicySpec
from streamingjob_operator.api.spec_models import StreamingJobSpec
from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.rules import standby
from streamingjob_operator.rules.epochs import checkpoint_too_old, next_attempt, set_target
from streamingjob_operator.rules.fencing import ended_by_its_deletion, has_ended
from streamingjob_operator.rules.history import Event, end_told, record
from streamingjob_operator.rules.observed import PodInfo, Termination, iso, parse_time
from streamingjob_operator.rules.step import Decision, Job, fail, mark_invalid


def backoff_delay(spec: StreamingJobSpec, consecutive_failures: int) -> float:
    """base * 2^(n-1), capped; n = consecutive failures including this one."""
    return spec.restart_policy.backoff.delay(consecutive_failures)


def failure_of(pod: PodInfo | None, lost: bool = False) -> tuple[str, str, bool]:
    """(reason, message, clean_exit) of a driver that is no longer running."""
    if pod is None:
        return ("DriverDeleted", "driver pod disappeared", False)
    # lost by its node's silence (not by a deletion its kubelet never confirmed)
    unreachable = (
        pod.node_heard_at is not None
        or pod.phase == "Unknown"
        or pod.ready_unknown_since is not None
    )
    if lost and unreachable:
        where = f"node {pod.node}" if pod.node else "the node"
        return ("NodeLost", f"{where} of driver pod {pod.name} is unreachable", False)
    if pod.deleting_since is not None:
        kind = "DriverEvicted" if pod.reason == "Evicted" else "DriverDeleted"
        return (kind, f"driver pod {pod.name} is being deleted", False)
    if pod.reason == "Evicted":
        return ("DriverEvicted", f"driver pod {pod.name} was evicted", False)
    if pod.phase == "Unknown" or pod.ready_unknown_since is not None:
        return ("NodeLost", f"node of driver pod {pod.name} is unreachable", False)
    term = pod.termination
    if term is None:
        return ("DriverExited", f"driver pod {pod.name} ended in phase {pod.phase}", False)
    if term.reason == "OOMKilled":
        return ("OOMKilled", f"driver pod {pod.name} was OOM-killed", False)
    if term.exit_code == 0:
        return ("DriverExited", f"driver pod {pod.name} exited 0: the stream stopped", True)
    if term.exit_code == EXIT_INVALID:
        return _exit_2(pod.name, term)
    if term.exit_code in RUNNER_EXIT_REASONS:  # the runner's own causes, before any read
        reason = RUNNER_EXIT_REASONS[term.exit_code]
        cause = term.message or _EXIT_CAUSES[reason]
        return (reason, f"driver pod {pod.name} exited {term.exit_code}: {cause}", False)
    return _driver_failed(pod.name, term)


def _driver_failed(pod: str, term: Termination, why: str = "") -> tuple[str, str, bool]:
    detail = f" ({term.reason})" if term.reason else ""
    cause = f": {term.message}" if term.message else ""  # the runner's: why the query failed
    return ("DriverFailed", f"driver pod {pod} exited {term.exit_code}{detail}{why}{cause}", False)


def _exit_2(pod: str, term: Termination) -> tuple[str, str, bool]:
    """InvalidSpec only for the runner's refusal (its mark leads the termination message):
    any program exits 2 (Python for a missing script, argparse for an option an older
    runner does not know), and holding the job for those would wait for a spec change that
    fixes nothing. Those restart with backoff, as any failure does."""
    if term.message.startswith(REFUSED_MARK):
        cause = term.message.removeprefix(REFUSED_MARK) or _EXIT_CAUSES["InvalidSpec"]
        return ("InvalidSpec", f"driver pod {pod} exited {term.exit_code}: {cause}", False)
    return _driver_failed(pod, term, ", not the runner's refusal of the spec")


_EXIT_CAUSES = {  # when the pod carries no termination message
    "KafkaAuthFailed": "Kafka refused the SASL credentials of spec.kafkaCredentials",
    "KafkaTLSFailed": "the broker's certificate did not verify against "
    "spec.kafkaCredentials.caSecret",
    "CatchUpFailed": "the previous epoch's last durable batch could not be committed to the "
    "group; nothing was read",
    "KafkaUnavailable": "Kafka did not answer or a subscribed topic does not exist; nothing "
    "was read",
    "InvalidSpec": "the runner refused spec.job (the driver's log says why); nothing was read",
}


def on_driver_gone(
    job: Job,
    d: Decision,
    pod: PodInfo | None,
    failure: tuple[str, str, bool] | None = None,
    lost: bool = False,
) -> Decision:
    """The current driver stopped, is being deleted, was evicted or is lost: an availableNow
    job that finished completes; otherwise the failure is counted and the next attempt
    follows after the backoff, unless restartPolicy allows no more (or the checkpoint is too
    old to restore): then phase Failed until a nonce is bumped."""
    reason, message, clean = failure or failure_of(pod, lost)
    spec, now, cfg = job.spec, job.now, job.cfg
    policy = spec.restart_policy
    if clean and spec.job.trigger.available_now and policy.type != "Always":
        return _complete(job, d)
    if reason == "InvalidSpec":
        return hold_invalid(job, d, message)
    told = f"{reason}: {message}"
    d.events.append(Event("Warning", "DriverFailed", told))
    failures = _count_failure(job, d.status, reason)
    if refused := _restart_refused(policy, failures, message):
        return fail(d, now, *refused, cfg)
    if stale := checkpoint_too_old(spec, d.status, now):
        return fail(d, now, "StaleCheckpoint", stale, cfg)
    if standby.current(d.status) is not None:
        # The failed driver stays the target until the standby's go: this entry is the mark
        # by which note_failure_left_behind knows it told and counted (found by the simulation)
        record(d.status, now, "DriverFailed", told, cfg.history_limit)
        # it saves the first delay; a crash loop's later failures still back off
        n = d.status.consecutive_failures
        delay = backoff_delay(spec, n - 1) if n > 1 else 0
        return standby.take_over(job, d, reason, message, delay)
    return _back_off(job, d, pod, reason, message)


def note_failure_left_behind(job: Job, d: Decision) -> None:
    """The current driver failed, and a suspend or an act by hand replaces it before any step
    followed the failure (both seen at once: by a new leader, or the act came first), or
    it failed while a warm hand-over's next driver waited to replace it. The
    failure is still told, and counted, as when a step had followed it: an Event, the
    history, Degraded naming the cause (found by the simulation). Told once: its history
    entry names the pod. A driver whose creation was not yet noted (launch state Pending:
    the operator that created it crashed before) counts as created."""
    st = d.status
    if st.launch_state not in ("Created", "Pending"):
        return
    pod = next((p for p in job.observed.pods if p.name == st.driver_pod), None)
    if pod is not None:
        tell_failure_of(job, d, pod)


def tell_failure_of(job: Job, d: Decision, pod: PodInfo, gone: bool = False) -> None:
    """`pod` ended by a failure nobody asked for (not deleted, not clean): told and counted
    once, also when a new target had replaced it before its end was seen (simulation seed
    243: a restart's old driver failed before the leader's delete reached it). `gone`: a
    deleted pod no list shows any more, as its watch event last showed it (`Observed.gone`,
    simulation seed 78 of stop 57: it failed as its deletion was sent); told when its end
    was not the deletion's doing."""
    st = d.status
    if pod.role != "driver" or not has_ended(pod):
        return
    if pod.deleting_since is not None:
        if not gone or ended_by_its_deletion(pod):
            return
        pod = replace(pod, deleting_since=None)  # what it exited with, not its deletion
    reason, message, clean = failure_of(pod)
    told = f"{reason}: {message}"
    if clean or end_told(st, pod.name):
        return
    d.events.append(Event("Warning", "DriverFailed", told))
    record(st, job.now, "DriverFailed", told, job.cfg.history_limit)
    if reason != "InvalidSpec":  # a refusal counts as no failure (hold_invalid)
        _count_failure(job, st, reason)


def hold_invalid(job: Job, d: Decision, message: str) -> Decision:
    """The runner refused the job's input (exit 2: spec.job.sql, spec.job.transform), which
    a restart would meet again: phase Invalid with the runner's message, nothing targeted (the
    ended driver is removed, none relaunched, no failure counted) until a spec change or a
    nonce sets a new target (epochs.manual_trigger)."""
    st = d.status
    st.launch_state = ""
    st.next_retry_time = ""
    held = f"{message}; fix the spec: nothing is relaunched until it changes"
    return mark_invalid(d, held, job.now, job.cfg)


def _complete(job: Job, d: Decision) -> Decision:
    st = d.status
    st.phase, st.message, st.launch_state = "Completed", "availableNow job finished", ""
    record(st, job.now, "Completed", st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", "Completed", st.message))
    return d


def _count_failure(job: Job, st: StreamingJobStatus, reason: str) -> int:
    """Counts a failure, consecutive (the backoff) and within restartPolicy.windowSeconds
    (maxRestarts); returns the failures within the window, this one included."""
    policy, now = job.spec.restart_policy, job.now
    st.consecutive_failures += 1
    window_start = now - timedelta(seconds=policy.window_seconds)
    recent = [t for t in st.recent_failures if (parse_time(t) or now) > window_start]
    st.recent_failures = [*recent, iso(now)][-(policy.max_restarts + 1) :]
    st.last_restart_reason, st.last_restart_time = reason, iso(now)
    return len(recent) + 1


_RESUME = (
    "To resume, bump spec.restartNonce (restore from the checkpoint) or "
    "spec.redeployNonce (fresh start from committed offsets)."
)


def _restart_refused(
    policy: RestartPolicySpec, failures: int, message: str
) -> tuple[str, str] | None:
    """(reason, message) of phase Failed when restartPolicy allows no automatic restart."""
    if policy.type == "Never":
        return ("DriverFailed", f"{message}; restartPolicy is Never. {_RESUME}")
    if failures > policy.max_restarts:
        return (
            "MaxRestartsExceeded",
            f"{message}; {failures} failures within {policy.window_seconds}s exceed "
            f"restartPolicy.maxRestarts={policy.max_restarts}. {_RESUME}",
        )
    return None


def _back_off(job: Job, d: Decision, pod: PodInfo | None, reason: str, message: str) -> Decision:
    """Targets the next attempt of the epoch (restore), launched once the backoff is over; a
    driver lost with its node keeps the next attempt off that node."""
    st, now = d.status, job.now
    delay = backoff_delay(job.spec, st.consecutive_failures)
    set_target(job, st, st.epoch, next_attempt(st))
    if reason == "NodeLost" and pod is not None and pod.node:
        st.avoid_nodes = [pod.node]
    st.restarts += 1
    st.next_retry_time = iso(now + timedelta(seconds=delay))
    st.phase = "Restarting"
    st.message = f"{message}; relaunching attempt {st.attempt} in {delay:g}s (restore)"
    record(st, now, "BackOff", st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", "BackOff", st.message))
    d.restart_reason = reason
    d.requeue_after = delay
    return d


def on_cordoned_node(pods: list[PodInfo]) -> PodInfo | None:
    """A pod of the current attempt on a cordoned node (a drain is coming or under way)."""
    return next((p for p in pods if p.node_cordoned), None)


def move_off(job: Job, d: Decision, pod: PodInfo, spare: list[PodInfo]) -> Decision:
    """A pod of the job runs on a cordoned node: restart in the same epoch now, before the
    drain's eviction comes. The driver stops between batches (its executors, which the job's
    PodDisruptionBudget keeps from eviction, finish the batch with it) and the next attempt,
    scheduled elsewhere, restores from the checkpoint. Not a failure: no backoff, no count
    towards maxRestarts. A standby (`spare`: its pods) on no cordoned node takes over
    instead."""
    st, now = d.status, job.now
    draining = f"node {pod.node} of {pod.role} pod {pod.name} is cordoned (draining)"
    if standby.current(st) is not None and not on_cordoned_node(spare):
        return standby.take_over(job, d, "NodeDrained", draining)
    standby.remove(st, job, draining)
    set_target(job, st, st.epoch, next_attempt(st))
    st.restarts += 1
    st.last_restart_reason, st.last_restart_time = "NodeDrained", iso(now)
    st.next_retry_time = ""
    st.phase = "Restarting"
    st.message = f"{draining}: relaunching as attempt {st.attempt} on another node (restore)"
    record(st, now, "NodeDrained", st.message, job.cfg.history_limit)
    d.events.append(Event("Normal", "NodeDrained", st.message))
    d.restart_reason = "NodeDrained"
    d.requeue_after = 0
    return d
