"""The job's story as users read it: the fixed vocabulary of Event reasons, the Event a step
posts, the bounded history in status (`status.history`, newest last), and the Warnings kept
in status until posted (`status.warnings`: announce.py posts them)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.api.status_records import HistoryEntry, WarningRecord
from streamingjob_operator.rules.observed import iso

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
    "DeadLettered",  # records that could not be decoded went to the dead-letter topic
    "SinkBatchAborted",  # Spark aborted a batch writing to the exactly-once Kafka sink
    "GroupCommitFailing",  # more offset commits to the group failed (group_commits.py)
    "GroupCommitsRecovered",  # ... and a commit succeeded again
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
    "HandoverReady",  # a warm hand-over's next driver is ready (handover.py)
    "HandedOver",  # ... the running one gone, the next has the go
    "WarmHandoverFailed",  # ... not ready in time or failed: the cold path
    "HandoverReplaced",  # ... the spec changed again before the next driver was created
    "StandbyReady",  # the standby driver can take over (standby.py)
    "StandbyFailed",  # ... it ended, was lost or not ready in time: a new one after a backoff
    "StandbyTakeover",  # ... the running driver was lost (or a restart asked): it takes over
    "ScaleRefused",  # a foreign change of spec.executor.instances undone (autoscaler on)
    "LeaderElected",  # on the operator's Lease, not a job (leadership.py)
    "LeaderLost",
    "LeaderReleased",
)


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    name: str = field(default="", compare=False)  # a kept warning's (status.warnings)

    def __post_init__(self) -> None:
        if self.reason not in REASONS:  # the documented vocabulary (docs/operator/status.md)
            raise ValueError(f"Event reason {self.reason!r} is not in decide.REASONS")


def record(st: StreamingJobStatus, now: datetime, reason: str, message: str, limit: int) -> None:
    """Appends one transition to status.history, keeping the newest `limit`."""
    st.history = [
        *st.history,
        HistoryEntry(
            time=iso(now), reason=reason, message=message, epoch=st.epoch, attempt=st.attempt
        ),
    ][-limit:]


def end_told(st: StreamingJobStatus, pod: str) -> bool:
    """Whether the history tells the end of driver `pod` already: every entry that tells a
    driver's failure or loss names it as "driver pod <name>" (restarts.failure_of)."""
    return any(f"driver pod {pod} " in h.message for h in st.history)


# More than one reconcile's Warnings (its steps each tell at most a few), so that none is
# dropped from status before a reconcile posted it
WARNINGS_KEPT = 12


def keep_warnings(
    st: StreamingJobStatus, job_name: str, uid: str, events: Iterable[Event], now: datetime
) -> None:
    """The Warnings among `events` into status.warnings (newest last, the newest
    WARNINGS_KEPT), each under the name its Event is posted with: a digest chained over the
    previous warning's name, so that two alike failures in the same second are two Events
    and the same warning posted twice is one."""
    for event in events:
        if event.type != "Warning":
            continue
        previous = st.warnings[-1].name if st.warnings else ""
        when = iso(now)
        digest = hashlib.sha256(
            "\x00".join((uid, previous, when, event.reason, event.message)).encode()
        ).hexdigest()[:16]
        name = f"{job_name[:200].rstrip('-.')}.{digest}"  # a DNS subdomain, as the job's
        kept = WarningRecord(name=name, time=when, reason=event.reason, message=event.message)
        st.warnings = [*st.warnings, kept][-WARNINGS_KEPT:]
