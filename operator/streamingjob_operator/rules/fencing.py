"""Fencing (semantics rules 7 and 10): never two drivers for one job. A pod is gone only when
its kubelet says so or by the one lost-pod rule (its node silent past the grace), and every pod
of an earlier target is confirmed gone before the next launch."""

from __future__ import annotations

from datetime import datetime, timedelta

from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.rules.history import Event, end_told, record
from streamingjob_operator.rules.observed import PodInfo, parse_time
from streamingjob_operator.rules.step import NODE_SILENT_SECONDS, DecideConfig, Decision, Job


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
      termination grace period, counted from no earlier than the operator's view of the
      kubelets could have seen it confirmed (a new leader's start, the end of an outage:
      simulation seed 1080).
    None: no sign that the pod is lost."""
    delay = timedelta(seconds=grace)
    if pod.node_heard_at is not None:
        return pod.node_heard_at + max(delay, timedelta(seconds=silent))
    since = pod.ready_unknown_since or (unknown_since if pod.phase == "Unknown" else None)
    if since is not None:
        return since + delay
    if pod.deleting_since is not None:
        since = max(pod.deleting_since, pod.deletion_confirmable_since or pod.deleting_since)
        return since + timedelta(seconds=pod.termination_grace_seconds) + delay
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


def silent_since(pod: PodInfo, now: datetime, silent: float) -> datetime | None:
    """Since when the pod's node has been silent (None: it is heard from)."""
    if pod.node_heard_at is not None:
        quiet = now - pod.node_heard_at >= timedelta(seconds=silent)
        return pod.node_heard_at if quiet else None
    if pod.phase == "Unknown" or pod.ready_unknown_since is not None:
        return pod.ready_unknown_since or now
    return None


def off_lost_nodes(job: Job, avoided: list[str]) -> list[str]:
    """The nodes a driver about to be created is kept off: `avoided` and every node the
    operator counts lost now. The scheduler may still take such a node for Ready (the grace can
    end before the node lifecycle controller's, a node back from a freeze is Ready before its
    kubelet is heard), and a driver placed there would count as lost at once."""
    return sorted({*avoided, *job.observed.lost_nodes})


def not_launching(driver: str, pods: list[str]) -> str | None:
    """Why a launch must wait, from a direct list right before the create (rule 7): any
    other pod of the job. None: launch."""
    others = [pod for pod in pods if pod != driver]
    return f"not launching {driver}: pods still present: {', '.join(others)}" if others else None


def ended_by_its_deletion(pod: PodInfo) -> bool:
    """A deleted driver's end is the deletion's doing: the runner's graceful stop (0), its
    SIGTERM before the query ran (143) or the kubelet's SIGKILL after the grace (137, not an
    OOM kill). Any other exit is a failure of its own, told like any other (restarts.
    tell_failure_of), also when the pod went with its deletion before any list showed it."""
    term = pod.termination
    if term is None or term.exit_code in (0, 143):
        return True
    return term.exit_code == 137 and term.reason != "OOMKilled"


def has_ended(pod: PodInfo) -> bool:
    """The pod's process has exited. Its container's terminated state comes about a second
    before the terminal phase, which the kubelet sets only after cleaning up the pod."""
    return pod.phase in ("Succeeded", "Failed") or pod.termination is not None


def delete_pods(
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
    force = {p.name for p in drivers if lost(p) or has_ended(p)}
    for p in drivers:
        if p.name in force and not has_ended(p):
            _tell_lost(d, p, st, now, cfg)
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


def _tell_lost(
    d: Decision, pod: PodInfo, st: StreamingJobStatus, now: datetime, cfg: DecideConfig
) -> None:
    """A driver forced out because its node is lost is a failure told (a Warning and the
    history), also when the job was stopping it anyway (a suspend, a redeploy): found by the
    simulation. Once per pod: not when its end was told already, of this loss or of another
    cause (a start timeout, an exit: every such entry names "driver pod <name>"), before its
    node went silent (simulation seed 152: a driver never started on a dead node, timed out,
    then forced out)."""
    if end_told(st, pod.name):
        return
    where = f"node {pod.node}" if pod.node else "the node"
    told = f"NodeLost: {where} of driver pod {pod.name} is unreachable; forced out"
    d.events.append(Event("Warning", "DriverFailed", told))
    record(st, now, "DriverFailed", told, cfg.history_limit)
