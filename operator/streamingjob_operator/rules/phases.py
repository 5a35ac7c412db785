"""One function per phase of a job, each deciding one step: suspended, acted on by hand (a new
target), launching (backoff, then the launch), launched (follow the driver: a drain, a loss,
an end, silence, starting, running)."""

from __future__ import annotations

from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.rules import group_commits, handover, standby
from streamingjob_operator.rules.epochs import (
    checkpoint_too_old,
    job_hash,
    mark_deployed,
    next_attempt,
    next_epoch,
    pod_hash,
    set_target,
)
from streamingjob_operator.rules.fencing import (
    delete_pods,
    has_ended,
    is_lost,
    lost_at,
    off_lost_nodes,
    silent_since,
)
from streamingjob_operator.rules.history import Event, record
from streamingjob_operator.rules.observed import Observed, PodInfo, iso, parse_time
from streamingjob_operator.rules.restarts import move_off, on_cordoned_node, on_driver_gone
from streamingjob_operator.rules.step import Decision, Job, fail, mark_invalid


def suspend(job: Job, d: Decision) -> Decision:
    """Stop everything, keep the epoch (and the checkpoint)."""
    st, now, cfg = d.status, job.now, job.cfg
    handover.end_for_suspend(job, d)
    standby.remove(st, job, "suspended")
    if not st.suspended:
        st.suspended = True
        st.launch_state = ""
        st.next_retry_time = ""
        record(st, now, "Stopping", "suspend requested", cfg.history_limit)
    if job.observed.pods:
        return delete_pods(d, job.observed.pods, st, now, cfg, phase="Stopping", msg="suspending")
    if st.phase != "Suspended":
        st.phase, st.message = "Suspended", "suspended; the epoch and checkpoint are kept"
        record(st, now, "Suspended", st.message, cfg.history_limit)
        d.events.append(Event("Normal", "Suspended", st.message))
    return d


def act_by_hand(job: Job, d: Decision, kind: str, reason: str, message: str) -> Decision:
    """A new target: a new epoch (redeploy, first launch) or the next attempt (restore)."""
    spec, st, now, cfg = job.spec, d.status, job.now, job.cfg
    warm = handover.eligible(job, st)  # the running driver stays until the next is ready
    if kind == "restart" and handover.driver_runs(job, st) and _standby_fits(job, st):
        mark_deployed(spec, st)
        return standby.serve_restart(job, d, reason, message)
    standby.remove(st, job, message)  # of the spec (or epoch) it replaces
    if kind == "redeploy" or st.epoch == 0:
        epoch, attempt = next_epoch(st), 1
        path = "fresh start from committed offsets"
    else:
        if stale := checkpoint_too_old(spec, st, now):
            mark_deployed(spec, st)
            st.suspended = False
            return fail(d, now, "StaleCheckpoint", stale, cfg)
        epoch, attempt = st.epoch, next_attempt(st)
        st.restarts += 1
        st.last_restart_reason, st.last_restart_time = reason, iso(now)
        path = "restore from checkpoint"
    if warm:
        waiting = handover.start(job, st, epoch, attempt)
        path += f"; warm hand-over: {waiting.pod} starts waiting for the go"
    else:
        set_target(job, st, epoch, attempt)
        st.phase = "Launching"
    mark_deployed(spec, st)
    st.suspended = False
    st.next_retry_time = ""
    st.consecutive_failures = 0
    st.recent_failures = []
    st.message = f"{message}: epoch {epoch} attempt {attempt} ({path})"
    record(st, now, reason, st.message, cfg.history_limit)
    d.events.append(Event("Normal", reason, st.message))
    d.requeue_after = 0
    return d


def _standby_fits(job: Job, st: StreamingJobStatus) -> bool:
    """A standby can serve a restart by hand when it runs what would launch: only the
    restartNonce changed (no restart-class field), and its checkpoint is fresh enough."""
    spec = job.spec
    return (
        standby.current(st) is not None
        and st.deployed_job_hash == job_hash(spec)
        and st.deployed_pod_hash == pod_hash(spec)
        and not checkpoint_too_old(spec, st, job.now)
    )


def launching(job: Job, d: Decision, driver: PodInfo | None) -> Decision:
    """A target recorded, its driver maybe not created yet: wait out the backoff, launch,
    or note the created driver."""
    st, now, cfg = d.status, job.now, job.cfg
    retry_at = parse_time(st.next_retry_time)
    if retry_at and now < retry_at and driver is None:
        st.phase = "Restarting"
        d.action = "wait"
        d.requeue_after = max((retry_at - now).total_seconds(), 0.05)
        return d
    if job.observed.invalid is not None and driver is None:
        return mark_invalid(d, str(job.observed.invalid), now, cfg)
    if driver is not None:
        st.launch_state = "Created"
        st.launched_at = iso(now)
        st.next_retry_time = ""
        st.phase = "Pending"
        st.message = f"driver {st.driver_pod} created (epoch {st.epoch} attempt {st.attempt})"
        record(st, now, "Launched", st.message, cfg.history_limit)
        d.events.append(Event("Normal", "Launched", st.message))
        d.requeue_after = 0
        return d
    if st.phase != "Restarting":  # an automatic restart stays Restarting until created
        st.phase = "Launching"  # (one status write less per relaunch)
    st.avoid_nodes = off_lost_nodes(job, st.avoid_nodes)
    d.action = "launch"
    d.requeue_after = 0
    return d


def launched(
    job: Job, d: Decision, driver: PodInfo | None, current: list[PodInfo], spare: list[PodInfo]
) -> Decision:
    """The driver was created: follow it (moves off cordoned nodes, losses, failures,
    silence, running, starting) and, while it runs, its standby (`spare`: its pods)."""
    st, now, cfg = d.status, job.now, job.cfg
    apply_report(st, job.observed, d)
    grace, silent = cfg.node_lost_grace_seconds, cfg.node_silent_seconds
    unknown_since = parse_time(st.unknown_since)
    lost = driver is not None and is_lost(driver, now, grace, unknown_since, silent)
    # A drain's eviction may reach the driver before the operator moved the job: either way
    # the driver stops between batches and the job moves; that is no failure.
    if driver is not None and not lost and (moving := on_cordoned_node(current)):
        return move_off(job, d, moving, spare)
    if (
        driver is None
        or lost
        or has_ended(driver)
        or driver.deleting_since is not None
        or driver.reason == "Evicted"
    ):
        return on_driver_gone(job, d, driver, lost=lost)

    if quiet_since := silent_since(driver, now, silent):
        # Not heard from: wait out the grace (a partitioned driver may still be writing).
        st.unknown_since = st.unknown_since or iso(quiet_since)
        at = lost_at(driver, grace, parse_time(st.unknown_since), silent) or now
        d.requeue_after = max(min((at - now).total_seconds(), cfg.resync_seconds), 0.05)
        return d
    st.unknown_since = ""
    if driver.phase == "Running":
        return standby.keep(job, _running(job, d), spare)
    st.phase = "Pending"  # created, not running yet (scheduling, pulling the image)
    return _while_starting(job, d, driver)


def _running(job: Job, d: Decision) -> Decision:
    """Running: note it once, reset the failure counters after a stable run."""
    st, now, cfg = d.status, job.now, job.cfg
    if not st.running_since:
        st.running_since = iso(now)
        st.phase, st.message = "Running", f"driver {st.driver_pod} running"
        record(st, now, "Running", st.message, cfg.history_limit)
    st.phase = "Running"
    # launched with these: a change of spec.executor.instances restarts before it gets here
    st.executors = job.spec.executor.instances
    running_for = (now - (parse_time(st.running_since) or now)).total_seconds()
    stable = job.spec.restart_policy.stable_run_seconds
    if st.consecutive_failures or st.recent_failures:
        if running_for >= stable:
            st.consecutive_failures = 0
            st.recent_failures = []
            msg = f"driver ran {int(running_for)}s: failure counters reset"
            record(st, now, "StableRun", msg, cfg.history_limit)
            d.events.append(Event("Normal", "StableRun", msg))
        else:
            d.requeue_after = min(cfg.resync_seconds, max(stable - running_for, 0.05))
    return d


def _while_starting(job: Job, d: Decision, driver: PodInfo) -> Decision:
    """A created driver that is not running yet: say why it waits (once per attempt, in
    history and an Event; the status message follows the kubelet), and count it as a failed
    attempt after restartPolicy.startTimeoutSeconds, so no job waits forever."""
    st, now, cfg = d.status, job.now, job.cfg
    timeout = job.spec.restart_policy.start_timeout_seconds
    waited = (now - (parse_time(st.launched_at) or now)).total_seconds()
    if waited >= timeout:
        why = f": {driver.not_starting}" if driver.not_starting else ""
        message = (
            f"driver pod {driver.name} did not start within "
            f"restartPolicy.startTimeoutSeconds={timeout}{why}"
        )
        return on_driver_gone(job, d, driver, failure=("StartTimeout", message, False))
    if driver.not_starting:
        st.message = (
            f"driver {driver.name} cannot start: {driver.not_starting}; "
            f"{_start_hint(driver.not_starting)}"
        )
        last = st.history[-1] if st.history else None
        if last is None or (last.reason, last.attempt) != ("DriverNotStarting", st.attempt):
            # the Warning once per attempt, also when another entry came between two looks
            # (found by the simulation); the entry again: the Degraded condition reads the newest
            told = any(
                (h.reason, h.epoch, h.attempt) == ("DriverNotStarting", st.epoch, st.attempt)
                for h in st.history
            )
            record(st, now, "DriverNotStarting", st.message, cfg.history_limit)
            if not told:
                d.events.append(Event("Warning", "DriverNotStarting", st.message))
    d.requeue_after = max(min(cfg.resync_seconds, timeout - waited), 0.05)
    return d


_IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def _start_hint(not_starting: str) -> str:
    """Which spec fields to look at for the kubelet's or scheduler's reason."""
    reason = not_starting.split(":", 1)[0]
    if reason in _IMAGE_REASONS:
        return (
            "check spec.image and spec.imagePullPolicy (pull secrets go in "
            "spec.podTemplate.spec.imagePullSecrets)"
        )
    if reason == "CreateContainerConfigError":
        return (
            "a Secret or ConfigMap the pod references is missing: check "
            "spec.kafkaCredentials, spec.env and spec.volumes"
        )
    if reason == "Unschedulable":
        return (
            "no node fits: check spec.driver resources, spec.nodeSelector, spec.tolerations "
            "and spec.podTemplate"
        )
    return "kubectl describe pod shows the details"


def _record_dead_letters(st: StreamingJobStatus, counts: dict[str, int], d: Decision) -> None:
    """A Warning Event each time more records went to the dead-letter topic in this run."""
    more = sum(counts.values()) - sum(st.dead_letter_records.values())
    if more > 0:
        reasons = ", ".join(f"{reason} {n}" for reason, n in counts.items())
        d.events.append(
            Event(
                "Warning",
                "DeadLettered",
                f"{more} more records could not be decoded and went to the dead-letter topic "
                f"({reasons} in this run); each copy names its source record and why",
            )
        )
    st.dead_letter_records = dict(counts)


def _record_sink_transactions(st: StreamingJobStatus, counts: dict[str, int], d: Decision) -> None:
    """A Warning Event each time Spark aborted more of the exactly-once sink's batches in this
    run (the job restarts; its transactions were aborted, never read)."""
    more = counts.get("batchesAborted", 0) - st.sink_transactions.get("batchesAborted", 0)
    if more > 0:
        message = (
            f"Spark aborted {more} more batch(es) writing to the exactly-once Kafka sink "
            f"({counts['batchesAborted']} in this run): their transactions were aborted and "
            "no read_committed consumer sees them; the driver's log says why"
        )
        d.events.append(Event("Warning", "SinkBatchAborted", message))
    if counts:
        st.sink_transactions = dict(counts)


def apply_report(st: StreamingJobStatus, observed: Observed, d: Decision) -> None:
    report = observed.report
    if report is None or (report.epoch, report.attempt) != (st.epoch, st.attempt):
        return  # a stale report of an earlier run is ignored
    skipped = report.data_loss_skipped_offsets
    if skipped > st.data_loss_skipped_offsets:
        message = (
            f"{skipped - st.data_loss_skipped_offsets} more offsets skipped ({skipped} in this "
            "run): deleted or truncated before the job read them (failOnDataLoss=false); "
            f"the log of driver pod {st.driver_pod} names the partitions and ranges"
        )
        d.events.append(Event("Warning", "DataLossSkipped", message))
    st.data_loss_skipped_offsets = skipped
    _record_dead_letters(st, report.dead_letter_records, d)
    _record_sink_transactions(st, report.sink_transactions, d)
    d.events += group_commits.apply(st, report, observed.now)
    st.start_path = report.start_path
    if report.group_id:  # the checkpoint holds this group's reads from the run's start on
        st.checkpoint_group_id = report.group_id
    st.start_detail = report.start_detail
    st.restored_batch = report.restored_batch
    st.latest_batch = report.latest_batch
    if report.last_progress_time:
        st.last_progress_time = report.last_progress_time
