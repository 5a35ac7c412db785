"""What one decision step is made of: the Decision it returns (the status to record and at
most one action), what it reads besides the status (the Job, the DecideConfig), and the two
phases that end in no launch (Failed, Invalid)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from streamingjob_operator.api.spec_models import StreamingJobSpec
from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.rules.history import Event, record
from streamingjob_operator.rules.observed import Observed
from streamingjob_operator.rules.timing import KUBELET_LEASE_RENEW_SECONDS, node_silent_seconds

# launch-waiting: create the next driver of a warm hand-over; go: write its go (handover.py);
# launch-standby: create the standby (standby.py)
ActionKind = Literal["none", "delete", "launch", "wait", "launch-waiting", "launch-standby", "go"]

# A node is silent after two missed kubelet lease renewals (10 s each by default; the
# operator's setting: timing.node_silent_seconds).
NODE_SILENT_SECONDS = node_silent_seconds(KUBELET_LEASE_RENEW_SECONDS)


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


@dataclass(frozen=True)
class Job:
    """What every phase's decision reads besides the status it changes."""

    spec: StreamingJobSpec
    namespace: str
    name: str
    observed: Observed
    cfg: DecideConfig
    uid: str = ""  # metadata.uid: this job's own checkpoints (manifest.job_checkpoints)

    @property
    def now(self) -> datetime:
        return self.observed.now


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
    return mark_invalid(d, message, now, cfg)


def mark_invalid(d: Decision, message: str, now: datetime, cfg: DecideConfig) -> Decision:
    st = d.status
    if st.phase != "Invalid" or st.message != message:
        st.phase, st.message = "Invalid", message
        record(st, now, "InvalidSpec", message, cfg.history_limit)
        d.events.append(Event("Warning", "InvalidSpec", message))
    d.action = "none"
    d.requeue_after = cfg.resync_seconds
    return d


def fail(d: Decision, now: datetime, reason: str, message: str, cfg: DecideConfig) -> Decision:
    st = d.status
    st.phase, st.message = "Failed", message
    st.launch_state = ""
    st.next_retry_time = ""
    record(st, now, reason, message, cfg.history_limit)
    d.events.append(Event("Warning", reason, message))
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
