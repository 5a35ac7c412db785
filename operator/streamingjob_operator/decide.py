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
| terminated (any exit code)       | same                        | attempt+1 after backoff      |
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

A new target makes every other pod of the job stale; stale drivers are deleted, their
executors removed once their driver is gone or finished, and the launch waits (requeue) until
all are gone: the old driver and its executors never overlap the new.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from spark_app.kafka_config import RUNNER_EXIT_REASONS
from spark_app.manifest import checkpoint_location

from .models import StreamingJobSpec, StreamingJobStatus
from .naming import driver_pod_name, executor_selector, ui_service_name
from .observed import Observed, PodInfo, iso, parse_time
from .timing import KUBELET_LEASE_RENEW_SECONDS, node_silent_seconds

# How each spec field is treated when it changes (tested to cover every field).
REDEPLOY = "redeploy"  # new epoch (stateless) or relaunch (last-state)
RESTART = "restart"  # relaunch in the same epoch, restoring
IGNORE = "ignore"  # read on demand, no relaunch
SEPARATE = "separate"  # has its own rule (nonces, suspend, checkpoint base)

FIELD_CLASSES: dict[str, str] = {
    "image": REDEPLOY,
    "job": REDEPLOY,
    "spark_conf": REDEPLOY,
    "checkpoint": SEPARATE,  # location → always a new epoch; the rest ignored
    "image_pull_policy": RESTART,
    "kafka_credentials": RESTART,
    "s3": RESTART,
    "driver": RESTART,
    "executor": RESTART,
    "env": RESTART,
    "volumes": RESTART,
    "volume_mounts": RESTART,
    "tolerations": RESTART,
    "node_selector": RESTART,
    "service_account_name": RESTART,
    "pod_template": RESTART,
    "spark_ui": RESTART,  # spark.ui.enabled is read when the driver starts
    "restart_policy": IGNORE,
    "upgrade_mode": IGNORE,
    "restart_nonce": SEPARATE,
    "redeploy_nonce": SEPARATE,
    "suspend": SEPARATE,
    "offsets_action": SEPARATE,  # runs while suspended (offsets_action.py), never relaunches
    "autoscaler": IGNORE,  # read at each reading; its rescales change executor.instances
}

# The fixed vocabulary of Event reasons (also used in status.history).
REASONS = (
    "Launching",
    "Launched",
    "DriverNotStarting",
    "DriverFailed",
    "BackOff",
    "Restarting",
    "Redeploying",
    "Suspended",
    "Resumed",
    "StableRun",
    "MaxRestartsExceeded",
    "NodeDrained",
    "StaleCheckpoint",
    "Completed",
    "InvalidSpec",
    "KafkaUnavailable",
    "KafkaAuthFailed",  # Kafka refused the job's SASL credentials (runner or lag reader)
    "KafkaTLSFailed",  # the broker's certificate did not verify against the job's CA
    "CatchUpFailed",  # a fresh epoch could not commit the previous epoch's durable offsets
    "DataLossSkipped",  # the run skipped deleted or truncated offsets (failOnDataLoss=false)
    "CheckpointKept",
    "CheckpointDeleted",
    "ApiRejected",  # a reconcile failed: the API server refused a request (reconcile.py)
    "ReconcileError",  # a reconcile failed otherwise (reconcile.py)
    "OffsetsListed",  # spec.offsetsAction (offsets_action.py)
    "OffsetsReset",
    "OffsetsAltered",
    "OffsetsRefused",
    "OffsetsFailed",
    "ScaledUp",  # the autoscaler (autoscaling.py)
    "ScaledDown",
    "ScaleRefused",  # a foreign change of spec.executor.instances undone (autoscaler on)
    "LeaderElected",  # on the operator's Lease, not a job (leadership.py)
    "LeaderLost",
    "LeaderReleased",
)

ActionKind = Literal["none", "delete", "launch", "wait"]

# A node is silent after two missed kubelet lease renewals (10 s each by default; the
# operator's setting: timing.node_silent_seconds).
NODE_SILENT_SECONDS = node_silent_seconds(KUBELET_LEASE_RENEW_SECONDS)


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str

    def __post_init__(self) -> None:
        if self.reason not in REASONS:  # the documented vocabulary (docs/operator.md)
            raise ValueError(f"Event reason {self.reason!r} is not in decide.REASONS")


@dataclass
class Decision:
    action: ActionKind
    status: StreamingJobStatus
    delete: tuple[str, ...] = ()
    force_delete: tuple[str, ...] = ()
    requeue_after: float | None = None
    events: list[Event] = field(default_factory=list)
    restart_reason: str | None = None  # set when an automatic restart was scheduled


@dataclass(frozen=True)
class DecideConfig:
    node_lost_grace_seconds: float = 40.0
    node_silent_seconds: float = NODE_SILENT_SECONDS  # timing.node_silent_seconds
    fencing_poll_seconds: float = 2.0
    resync_seconds: float = 30.0
    history_limit: int = 20


# Fields added after a release: hashed only when they differ from their default, so that the
# hashes of jobs deployed by the older operator stay the same (an upgrade restarts no job).
ADDED_SINCE_RELEASE = ("spark_ui",)


def _hash(spec: StreamingJobSpec, klass: str) -> str:
    data = spec.model_dump(mode="json", by_alias=True)
    names = sorted(name for name, k in FIELD_CLASSES.items() if k == klass)
    picked = {}
    for name in names:
        info = StreamingJobSpec.model_fields[name]
        alias = info.alias or name
        if name in ADDED_SINCE_RELEASE and getattr(spec, name) == info.get_default(
            call_default_factory=True
        ):
            continue
        picked[alias] = data.get(alias)
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def job_hash(spec: StreamingJobSpec) -> str:
    return _hash(spec, REDEPLOY)


def pod_hash(spec: StreamingJobSpec) -> str:
    return _hash(spec, RESTART)


def backoff_delay(spec: StreamingJobSpec, consecutive_failures: int) -> float:
    """base * 2^(n-1), capped; n = consecutive failures including this one."""
    backoff = spec.restart_policy.backoff
    exponent = max(consecutive_failures - 1, 0)
    if exponent > 60:
        return backoff.cap_seconds
    return min(backoff.cap_seconds, backoff.base_seconds * (1 << exponent))


def _record(st: StreamingJobStatus, now: datetime, reason: str, message: str, limit: int) -> None:
    from .models import HistoryEntry

    st.history = [
        *st.history,
        HistoryEntry(
            time=iso(now), reason=reason, message=message, epoch=st.epoch, attempt=st.attempt
        ),
    ][-limit:]


def _manual_trigger(spec: StreamingJobSpec, st: StreamingJobStatus) -> tuple[str, str, str] | None:
    """(kind, reason, message) of a manual act: 'redeploy' (new epoch) or 'restart'."""
    if st.epoch == 0:
        return ("redeploy", "Launching", "first launch")
    # A new epoch in every state, a resume included: a new redeployNonce or checkpoint base
    # never restores the old checkpoint.
    resumed = "resumed from suspend, " if st.suspended else ""
    if spec.redeploy_nonce != st.deployed_redeploy_nonce:
        reason = "Resumed" if st.suspended else "Redeploying"
        return ("redeploy", reason, f"{resumed}redeployNonce changed to {spec.redeploy_nonce}")
    if st.deployed_checkpoint_base and spec.checkpoint.location != st.deployed_checkpoint_base:
        reason = "Resumed" if st.suspended else "Redeploying"
        return ("redeploy", reason, f"{resumed}checkpoint.location changed")
    if st.suspended:
        if st.offsets_acted_since_launch:  # the user's new offsets win, also over last-state
            return (
                "redeploy",
                "Resumed",
                "resumed from suspend after an offsets action (new epoch from the group's offsets)",
            )
        if spec.upgrade_mode == "stateless":
            return ("redeploy", "Resumed", "resumed from suspend (stateless: new epoch)")
        return ("restart", "Resumed", "resumed from suspend (last-state: restore)")
    if st.deployed_job_hash and job_hash(spec) != st.deployed_job_hash:
        if spec.upgrade_mode == "stateless":
            return ("redeploy", "Redeploying", "job changed (upgradeMode stateless)")
        return ("restart", "Restarting", "job changed (upgradeMode last-state: restore)")
    if spec.restart_nonce != st.deployed_restart_nonce:
        return ("restart", "Restarting", f"restartNonce changed to {spec.restart_nonce}")
    if st.deployed_pod_hash and pod_hash(spec) != st.deployed_pod_hash:
        return ("restart", "Restarting", "pod settings changed (restore)")
    return None


def _set_target(
    spec: StreamingJobSpec,
    st: StreamingJobStatus,
    namespace: str,
    name: str,
    epoch: int,
    attempt: int,
) -> None:
    group = spec.job.source.group_id or ""
    if epoch != st.epoch:
        # A new epoch: the one before it is where its offsets catch up from, for the same
        # group only (a new group starts where the user asked: its own offsets or the reset
        # strategy). "": recorded by an operator that kept no group (treated as the same).
        same_group = st.checkpoint_group_id in ("", group)
        st.previous_checkpoint_location = st.checkpoint_location if same_group else ""
    st.checkpoint_group_id = group
    if st.offsets_acted_since_launch:
        # The user set the group's offsets after the last driver stopped: they win over the
        # previous epoch's checkpoint, for this launch and every later one of the epoch.
        st.previous_checkpoint_location = ""
        st.offsets_acted_since_launch = False
    st.epoch, st.attempt = epoch, attempt
    st.avoid_nodes = []  # a lost node is avoided by the attempt after the loss only
    st.driver_pod = driver_pod_name(name, epoch, attempt)
    st.spark_ui_service = ui_service_name(name) if spec.spark_ui.enabled else ""
    st.selector = executor_selector(name)
    st.checkpoint_location = checkpoint_location(spec.checkpoint.location, namespace, name, epoch)
    st.launch_state = "Pending"
    # unknown_since stays: the old driver may still be silent and is fenced by it (_delete)
    st.launched_at = st.running_since = ""
    st.start_path = st.start_detail = ""
    st.restored_batch = None
    st.data_loss_skipped_offsets = 0  # per run, as the driver counts them


def _checkpoint_too_old(
    spec: StreamingJobSpec, st: StreamingJobStatus, now: datetime
) -> str | None:
    max_age = spec.checkpoint.max_checkpoint_age_seconds
    if not max_age or spec.checkpoint.force:
        return None
    last = parse_time(st.last_progress_time) or parse_time(st.running_since)
    if last is None:
        return None
    age = (now - last).total_seconds()
    if age <= max_age:
        return None
    return (
        f"checkpoint {st.checkpoint_location} was last advanced at {iso(last)}, "
        f"{int(age)}s ago, more than checkpoint.maxCheckpointAgeSeconds={max_age}; "
        "set spec.checkpoint.force: true to restore it anyway, or bump spec.redeployNonce "
        "to start fresh from the group's committed offsets"
    )


def invalid(
    status: StreamingJobStatus, message: str, now: datetime, cfg: DecideConfig | None = None
) -> Decision:
    """The one Invalid path (validation.py found problems, or the spec does not parse):
    phase Invalid with the message naming each field and its fix, no launch; recorded in
    history with an InvalidSpec Event once per distinct message. Pods are not touched."""
    cfg = cfg or DecideConfig()
    d = Decision(
        action="none", status=status.model_copy(deep=True), requeue_after=cfg.resync_seconds
    )
    return _invalid(d, message, now, cfg)


def _invalid(d: Decision, message: str, now: datetime, cfg: DecideConfig) -> Decision:
    st = d.status
    if st.phase != "Invalid" or st.message != message:
        st.phase, st.message = "Invalid", message
        _record(st, now, "InvalidSpec", message, cfg.history_limit)
        d.events.append(Event("Warning", "InvalidSpec", message))
    d.action = "none"
    d.requeue_after = cfg.resync_seconds
    return d


def _fail(d: Decision, now: datetime, reason: str, message: str, cfg: DecideConfig) -> Decision:
    st = d.status
    st.phase, st.message = "Failed", message
    st.launch_state = ""
    st.next_retry_time = ""
    _record(st, now, reason, message, cfg.history_limit)
    d.events.append(Event("Warning", reason, message))
    return d


def lost_at(
    pod: PodInfo,
    grace: float,
    unknown_since: datetime | None = None,
    silent: float = NODE_SILENT_SECONDS,
) -> datetime | None:
    """When `pod` counts as lost: the one rule of every path that decides a driver or an
    executor is gone without its kubelet's word (restart, manual acts, suspend, deletion;
    semantics rule 10). A lost pod may still run on a partitioned node, so it is only
    declared lost `grace` seconds after the last sign of life of its node:
    - its node's lease renewal, as this operator saw it (the kubelet's heartbeat), and never
      before the node has been `silent` (missed two renewals): between renewals a healthy
      node's last renewal is up to one interval old;
    - without a view of the leases: the moment the API server marked the pod unreachable
      (phase or Ready Unknown; `unknown_since` for a phase without a timestamp);
    - a pod whose deletion its kubelet never confirms, seen no other way: after its own
      termination grace period.
    None: no sign that the pod is lost."""
    delay = timedelta(seconds=grace)
    if pod.node_heard_at is not None:
        return pod.node_heard_at + max(delay, timedelta(seconds=silent))
    since = pod.ready_unknown_since or (unknown_since if pod.phase == "Unknown" else None)
    if since is not None:
        return since + delay
    if pod.deleting_since is not None:
        return pod.deleting_since + timedelta(seconds=pod.termination_grace_seconds) + delay
    return None


def is_lost(
    pod: PodInfo,
    now: datetime,
    grace: float,
    unknown_since: datetime | None = None,
    silent: float = NODE_SILENT_SECONDS,
) -> bool:
    at = lost_at(pod, grace, unknown_since, silent)
    return at is not None and now >= at


def _silent_since(pod: PodInfo, now: datetime, silent: float) -> datetime | None:
    """Since when the pod's node has been silent (None: it is heard from)."""
    if pod.node_heard_at is not None:
        quiet = now - pod.node_heard_at >= timedelta(seconds=silent)
        return pod.node_heard_at if quiet else None
    if pod.phase == "Unknown" or pod.ready_unknown_since is not None:
        return pod.ready_unknown_since or now
    return None


def _on_cordoned_node(pods: list[PodInfo]) -> PodInfo | None:
    """A pod of the current attempt on a cordoned node (a drain is coming or under way)."""
    return next((p for p in pods if p.node_cordoned), None)


def _move_off(
    spec: StreamingJobSpec,
    d: Decision,
    namespace: str,
    name: str,
    pod: PodInfo,
    now: datetime,
    cfg: DecideConfig,
) -> Decision:
    """A pod of the job runs on a cordoned node: restart in the same epoch now, before the
    drain's eviction comes. The driver stops between batches (its executors, which the job's
    PodDisruptionBudget keeps from eviction, finish the batch with it) and the next attempt,
    scheduled elsewhere, restores from the checkpoint. Not a failure: no backoff, no count
    towards maxRestarts."""
    st = d.status
    _set_target(spec, st, namespace, name, st.epoch, st.attempt + 1)
    st.restarts += 1
    st.last_restart_reason, st.last_restart_time = "NodeDrained", iso(now)
    st.next_retry_time = ""
    st.phase = "Restarting"
    st.message = (
        f"node {pod.node} of {pod.role} pod {pod.name} is cordoned (draining): relaunching as "
        f"attempt {st.attempt} on another node (restore)"
    )
    _record(st, now, "NodeDrained", st.message, cfg.history_limit)
    d.events.append(Event("Normal", "NodeDrained", st.message))
    d.restart_reason = "NodeDrained"
    d.requeue_after = 0
    return d


def _has_ended(pod: PodInfo) -> bool:
    """The pod's process has exited. Its container's terminated state comes about a second
    before the terminal phase, which the kubelet sets only after cleaning up the pod."""
    return pod.phase in ("Succeeded", "Failed") or pod.termination is not None


def _failure_of(pod: PodInfo | None, lost: bool = False) -> tuple[str, str, bool]:
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
    if term.exit_code in RUNNER_EXIT_REASONS:  # the runner's own causes, before any read
        reason = RUNNER_EXIT_REASONS[term.exit_code]
        cause = term.message or _EXIT_CAUSES[reason]
        return (reason, f"driver pod {pod.name} exited {term.exit_code}: {cause}", False)
    detail = f" ({term.reason})" if term.reason else ""
    cause = f": {term.message}" if term.message else ""  # the runner's: why the query failed
    return ("DriverFailed", f"driver pod {pod.name} exited {term.exit_code}{detail}{cause}", False)


_EXIT_CAUSES = {  # when the pod carries no termination message
    "KafkaAuthFailed": "Kafka refused the SASL credentials of spec.kafkaCredentials",
    "KafkaTLSFailed": "the broker's certificate did not verify against "
    "spec.kafkaCredentials.caSecret",
    "CatchUpFailed": "the previous epoch's last durable batch could not be committed to the "
    "group; nothing was read",
}


def _on_driver_gone(
    spec: StreamingJobSpec,
    d: Decision,
    namespace: str,
    name: str,
    pod: PodInfo | None,
    now: datetime,
    cfg: DecideConfig,
    failure: tuple[str, str, bool] | None = None,
    lost: bool = False,
) -> Decision:
    st = d.status
    reason, message, clean = failure or _failure_of(pod, lost)
    policy = spec.restart_policy
    if clean and spec.job.trigger.available_now and policy.type != "Always":
        st.phase, st.message, st.launch_state = "Completed", "availableNow job finished", ""
        _record(st, now, "Completed", st.message, cfg.history_limit)
        d.events.append(Event("Normal", "Completed", st.message))
        return d
    d.events.append(Event("Warning", "DriverFailed", f"{reason}: {message}"))
    st.consecutive_failures += 1
    window_start = now - timedelta(seconds=policy.window_seconds)
    recent = [t for t in st.recent_failures if (parse_time(t) or now) > window_start]
    st.recent_failures = [*recent, iso(now)][-(policy.max_restarts + 1) :]
    st.last_restart_reason, st.last_restart_time = reason, iso(now)
    resume = (
        "To resume, bump spec.restartNonce (restore from the checkpoint) or "
        "spec.redeployNonce (fresh start from committed offsets)."
    )
    if policy.type == "Never":
        return _fail(d, now, "DriverFailed", f"{message}; restartPolicy is Never. {resume}", cfg)
    if len(recent) + 1 > policy.max_restarts:
        return _fail(
            d,
            now,
            "MaxRestartsExceeded",
            f"{message}; {len(recent) + 1} failures within {policy.window_seconds}s exceed "
            f"restartPolicy.maxRestarts={policy.max_restarts}. {resume}",
            cfg,
        )
    if stale := _checkpoint_too_old(spec, st, now):
        return _fail(d, now, "StaleCheckpoint", stale, cfg)
    delay = backoff_delay(spec, st.consecutive_failures)
    _set_target(spec, st, namespace, name, st.epoch, st.attempt + 1)
    if reason == "NodeLost" and pod is not None and pod.node:
        st.avoid_nodes = [pod.node]
    st.restarts += 1
    st.next_retry_time = iso(now + timedelta(seconds=delay))
    st.phase = "Restarting"
    st.message = f"{message}; relaunching attempt {st.attempt} in {delay:g}s (restore)"
    _record(st, now, "BackOff", st.message, cfg.history_limit)
    d.events.append(Event("Normal", "BackOff", st.message))
    d.restart_reason = reason
    d.requeue_after = delay
    return d


def _apply_report(st: StreamingJobStatus, observed: Observed, d: Decision) -> None:
    report = observed.report
    if report is None or (report.epoch, report.attempt) != (st.epoch, st.attempt):
        return  # a stale report of an earlier run is ignored
    skipped = report.data_loss_skipped_offsets
    if skipped > st.data_loss_skipped_offsets:
        message = (
            f"{skipped - st.data_loss_skipped_offsets} more offsets skipped ({skipped} in this "
            "run): deleted or truncated before the job read them (failOnDataLoss=false); the "
            "driver's log names the partitions and ranges"
        )
        d.events.append(Event("Warning", "DataLossSkipped", message))
    st.data_loss_skipped_offsets = skipped
    st.start_path = report.start_path
    st.start_detail = report.start_detail
    st.restored_batch = report.restored_batch
    st.latest_batch = report.latest_batch
    if report.last_progress_time:
        st.last_progress_time = report.last_progress_time


def decide(
    spec: StreamingJobSpec,
    status: StreamingJobStatus,
    observed: Observed,
    *,
    namespace: str,
    name: str,
    cfg: DecideConfig | None = None,
) -> Decision:
    """The one decision of a reconcile step, by what the job is doing: suspended, acted on by
    hand (first launch, resume, nonce, spec change), ended, launching, or launched."""
    d = _dispatch(spec, status, observed, namespace=namespace, name=name, cfg=cfg)
    if d.status.phase != "Running":
        d.status.executors = 0  # the scale's status replicas: only a running job has any
    return d


def _dispatch(
    spec: StreamingJobSpec,
    status: StreamingJobStatus,
    observed: Observed,
    *,
    namespace: str,
    name: str,
    cfg: DecideConfig | None,
) -> Decision:
    cfg = cfg or DecideConfig()
    st = status.model_copy(deep=True)
    d = Decision(action="none", status=st, requeue_after=cfg.resync_seconds)
    job = _Job(spec, namespace, name, observed, cfg)

    if spec.suspend:
        return _suspend(job, d)
    # A manual act sets a new target now, unless the spec it would launch is invalid: then
    # the running driver (if any) is left alone.
    if trigger := _manual_trigger(spec, st):
        if observed.invalid is not None:
            return _invalid(d, str(observed.invalid), observed.now, cfg)
        return _act_by_hand(job, d, *trigger)
    if st.phase in ("Failed", "Completed") and not st.launch_state:
        if observed.pods:
            return _delete(d, observed.pods, st, observed.now, cfg, phase=st.phase, msg=st.message)
        return d

    target = st.driver_pod if st.launch_state else ""
    current = [
        p
        for p in observed.pods
        if target and (p.name == target or (p.role == "executor" and p.driver_pod == target))
    ]
    leftover = [p for p in observed.pods if p not in current]
    if leftover:
        return _delete(d, leftover, st, observed.now, cfg, phase=None, msg=None)
    driver = next((p for p in current if p.name == target), None)
    if st.launch_state == "Pending":
        return _launching(job, d, driver)
    if st.launch_state != "Created":
        return d  # nothing targeted (only reachable with a hand-edited status)
    return _launched(job, d, driver, current)


@dataclass(frozen=True)
class _Job:
    """What every phase's decision reads besides the status it changes."""

    spec: StreamingJobSpec
    namespace: str
    name: str
    observed: Observed
    cfg: DecideConfig

    @property
    def now(self) -> datetime:
        return self.observed.now


def _suspend(job: _Job, d: Decision) -> Decision:
    """Stop everything, keep the epoch (and the checkpoint)."""
    st, now, cfg = d.status, job.now, job.cfg
    if not st.suspended:
        st.suspended = True
        st.launch_state = ""
        st.next_retry_time = ""
        _record(st, now, "Stopping", "suspend requested", cfg.history_limit)
    if job.observed.pods:
        return _delete(d, job.observed.pods, st, now, cfg, phase="Stopping", msg="suspending")
    if st.phase != "Suspended":
        st.phase, st.message = "Suspended", "suspended; the epoch and checkpoint are kept"
        _record(st, now, "Suspended", st.message, cfg.history_limit)
        d.events.append(Event("Normal", "Suspended", st.message))
    return d


def _act_by_hand(job: _Job, d: Decision, kind: str, reason: str, message: str) -> Decision:
    """A new target: a new epoch (redeploy, first launch) or the next attempt (restore)."""
    spec, st, now, cfg = job.spec, d.status, job.now, job.cfg
    if kind == "redeploy" or st.epoch == 0:
        _set_target(spec, st, job.namespace, job.name, st.epoch + 1, 1)
        path = "fresh start from committed offsets"
    else:
        if stale := _checkpoint_too_old(spec, st, now):
            _mark_deployed(spec, st)
            st.suspended = False
            return _fail(d, now, "StaleCheckpoint", stale, cfg)
        _set_target(spec, st, job.namespace, job.name, st.epoch, st.attempt + 1)
        st.restarts += 1
        st.last_restart_reason, st.last_restart_time = reason, iso(now)
        path = "restore from checkpoint"
    _mark_deployed(spec, st)
    st.suspended = False
    st.next_retry_time = ""
    st.consecutive_failures = 0
    st.recent_failures = []
    st.phase = "Launching"
    st.message = f"{message}: epoch {st.epoch} attempt {st.attempt} ({path})"
    _record(st, now, reason, st.message, cfg.history_limit)
    d.events.append(Event("Normal", reason, st.message))
    d.requeue_after = 0
    return d


def _launching(job: _Job, d: Decision, driver: PodInfo | None) -> Decision:
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
        return _invalid(d, str(job.observed.invalid), now, cfg)
    if driver is not None:
        st.launch_state = "Created"
        st.launched_at = iso(now)
        st.next_retry_time = ""
        st.phase = "Pending"
        st.message = f"driver {st.driver_pod} created (epoch {st.epoch} attempt {st.attempt})"
        _record(st, now, "Launched", st.message, cfg.history_limit)
        d.events.append(Event("Normal", "Launched", st.message))
        d.requeue_after = 0
        return d
    if st.phase != "Restarting":  # an automatic restart stays Restarting until created
        st.phase = "Launching"  # (one status write less per relaunch)
    d.action = "launch"
    d.requeue_after = 0
    return d


def _launched(job: _Job, d: Decision, driver: PodInfo | None, current: list[PodInfo]) -> Decision:
    """The driver was created: follow it (moves off cordoned nodes, losses, failures,
    silence, running, starting)."""
    spec, st, now, cfg = job.spec, d.status, job.now, job.cfg
    namespace, name = job.namespace, job.name
    _apply_report(st, job.observed, d)
    grace, silent = cfg.node_lost_grace_seconds, cfg.node_silent_seconds
    unknown_since = parse_time(st.unknown_since)
    lost = driver is not None and is_lost(driver, now, grace, unknown_since, silent)
    # A drain's eviction may reach the driver before the operator moved the job: either way
    # the driver stops between batches and the job moves; that is no failure.
    if driver is not None and not lost and (moving := _on_cordoned_node(current)):
        return _move_off(spec, d, namespace, name, moving, now, cfg)
    if (
        driver is None
        or lost
        or _has_ended(driver)
        or driver.deleting_since is not None
        or driver.reason == "Evicted"
    ):
        return _on_driver_gone(spec, d, namespace, name, driver, now, cfg, lost=lost)

    if silent_since := _silent_since(driver, now, silent):
        # Not heard from: wait out the grace (a partitioned driver may still be writing).
        st.unknown_since = st.unknown_since or iso(silent_since)
        at = lost_at(driver, grace, parse_time(st.unknown_since), silent) or now
        d.requeue_after = max(min((at - now).total_seconds(), cfg.resync_seconds), 0.05)
        return d
    st.unknown_since = ""
    if driver.phase == "Running":
        return _running(job, d)
    st.phase = "Pending"  # created, not running yet (scheduling, pulling the image)
    return _while_starting(spec, d, namespace, name, driver, now, cfg)


def _running(job: _Job, d: Decision) -> Decision:
    """Running: note it once, reset the failure counters after a stable run."""
    st, now, cfg = d.status, job.now, job.cfg
    if not st.running_since:
        st.running_since = iso(now)
        st.phase, st.message = "Running", f"driver {st.driver_pod} running"
        _record(st, now, "Running", st.message, cfg.history_limit)
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
            _record(st, now, "StableRun", msg, cfg.history_limit)
            d.events.append(Event("Normal", "StableRun", msg))
        else:
            d.requeue_after = min(cfg.resync_seconds, max(stable - running_for, 0.05))
    return d


def _while_starting(
    spec: StreamingJobSpec,
    d: Decision,
    namespace: str,
    name: str,
    driver: PodInfo,
    now: datetime,
    cfg: DecideConfig,
) -> Decision:
    """A created driver that is not running yet: say why it waits (once per attempt, in
    history and an Event; the status message follows the kubelet), and count it as a failed
    attempt after restartPolicy.startTimeoutSeconds, so no job waits forever."""
    st = d.status
    timeout = spec.restart_policy.start_timeout_seconds
    waited = (now - (parse_time(st.launched_at) or now)).total_seconds()
    if waited >= timeout:
        why = f": {driver.not_starting}" if driver.not_starting else ""
        message = (
            f"driver pod {driver.name} did not start within "
            f"restartPolicy.startTimeoutSeconds={timeout}{why}"
        )
        return _on_driver_gone(
            spec, d, namespace, name, driver, now, cfg, failure=("StartTimeout", message, False)
        )
    if driver.not_starting:
        st.message = (
            f"driver {driver.name} cannot start: {driver.not_starting}; "
            f"{_start_hint(driver.not_starting)}"
        )
        last = st.history[-1] if st.history else None
        if last is None or (last.reason, last.attempt) != ("DriverNotStarting", st.attempt):
            _record(st, now, "DriverNotStarting", st.message, cfg.history_limit)
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


def _mark_deployed(spec: StreamingJobSpec, st: StreamingJobStatus) -> None:
    st.deployed_job_hash = job_hash(spec)
    st.deployed_pod_hash = pod_hash(spec)
    st.deployed_checkpoint_base = spec.checkpoint.location
    st.deployed_restart_nonce = spec.restart_nonce
    st.deployed_redeploy_nonce = spec.redeploy_nonce


def _delete(
    d: Decision,
    pods: list[PodInfo] | tuple[PodInfo, ...],
    st: StreamingJobStatus,
    now: datetime,
    cfg: DecideConfig,
    *,
    phase: str | None,
    msg: str | None,
) -> Decision:
    """Delete pods that must be gone before anything new starts; wait while they go.

    A running driver is deleted gracefully (its runner stops between batches); one whose
    process has ended is removed at once, as is a lost one (`is_lost`: its node silent past
    the grace). Executors go with their driver, which may still need them to finish a batch; once
    the driver is gone or has ended they are removed at once: nothing can use them any more,
    and waiting out their termination (or a replacement that a dying driver still requested)
    would only delay the next launch."""

    def lost(p: PodInfo) -> bool:
        return is_lost(
            p,
            now,
            cfg.node_lost_grace_seconds,
            parse_time(st.unknown_since),
            cfg.node_silent_seconds,
        )

    drivers = [p for p in pods if p.role == "driver"]
    force = {p.name for p in drivers if lost(p) or _has_ended(p)}
    live_drivers = {p.name for p in drivers} - force
    force |= {
        p.name
        for p in pods
        if p.role == "executor" and (lost(p) or p.driver_pod not in live_drivers)
    }
    d.action = "delete"
    d.delete = tuple(
        p.name
        for p in pods
        if p.role == "driver" and p.name not in force and p.deleting_since is None
    )
    d.force_delete = tuple(p.name for p in pods if p.name in force)
    if phase is not None:
        st.phase = phase
    elif st.launch_state == "Pending" and st.phase not in ("Restarting",):
        st.phase = "Stopping"
    if msg is not None:
        st.message = msg
    d.requeue_after = cfg.fencing_poll_seconds
    return d


def summarize(decision: Decision) -> dict[str, Any]:
    """For logs and tests: the decision without the status body."""
    return {
        "action": decision.action,
        "delete": list(decision.delete),
        "force_delete": list(decision.force_delete),
        "requeue_after": decision.requeue_after,
        "events": [e.reason for e in decision.events],
    }
