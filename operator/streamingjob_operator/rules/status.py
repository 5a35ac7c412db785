"""Status as an API: conditions derived from the phase, offsets and lag, the patch body."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streamingjob_operator.api.models import Condition, StreamingJobStatus
from streamingjob_operator.rules import group_commits
from streamingjob_operator.rules.observed import iso

PROGRESSING_PHASES = ("Pending", "Launching", "Restarting", "Stopping")


@dataclass(frozen=True)
class KafkaView:
    """The operator's own reading of the consumer group (None fields: not read yet)."""

    committed: dict[str, dict[str, int]] | None = None
    end: dict[str, dict[str, int]] | None = None
    read_at: datetime | None = None
    problem: str | None = None  # "<field>: <message>"
    reason: str = "KafkaUnavailable"  # of the problem: KafkaAuthFailed, KafkaTLSFailed too


def compute_lag(committed: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> int:
    """Sum of end - committed per partition; a partition without a commit counts whole."""
    total = 0
    for topic, partitions in end.items():
        for partition, end_offset in partitions.items():
            done = committed.get(topic, {}).get(partition)
            total += max(end_offset - (done if done is not None and done >= 0 else 0), 0)
    return total


def apply_kafka(st: StreamingJobStatus, kafka: KafkaView | None) -> None:
    if kafka is None or kafka.read_at is None or kafka.committed is None:
        return
    st.committed_offsets = kafka.committed
    if kafka.end is not None:
        st.lag = compute_lag(kafka.committed, kafka.end)
    st.offsets_time = iso(kafka.read_at)


def _condition(
    previous: dict[str, Condition],
    kind: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> Condition:
    value = "True" if ok else "False"
    old = previous.get(kind)
    changed = old is None or old.status != value
    return Condition(
        type=kind,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=iso(now) if old is None or changed else old.last_transition_time,
        observed_generation=generation,
    )


def set_conditions(
    st: StreamingJobStatus, generation: int, now: datetime, kafka: KafkaView | None = None
) -> None:
    prev = {c.type: c for c in st.conditions}
    phase = st.phase
    ready = phase == "Running"
    progressing = phase in PROGRESSING_PHASES
    degraded, d_reason = _degraded(st, kafka)
    d_message = _degraded_message(st, kafka, degraded, d_reason)
    st.conditions = [
        _condition(prev, "Ready", ready, phase, st.message if ready else "", generation, now),
        _condition(prev, "Progressing", progressing, phase, st.message, generation, now),
        _condition(prev, "Degraded", degraded, d_reason, d_message, generation, now),
        *_optional_conditions(st, prev, generation, now),
    ]
    st.observed_generation = generation


def _degraded(st: StreamingJobStatus, kafka: KafkaView | None) -> tuple[bool, str]:
    """Condition Degraded's status and reason: the most urgent problem first."""
    phase = st.phase
    if st.reconcile_failure is not None:  # the operator cannot act: the most urgent thing to show
        return True, st.reconcile_failure.reason
    if phase == "Invalid":
        return True, "InvalidSpec"
    if phase == "Failed":
        return True, st.history[-1].reason if st.history else "Failed"
    # the job's own driver that cannot start (its image, its Secrets) before the operator's
    # reading of Kafka: the one the user must fix for the job to run at all
    if phase == "Pending" and st.history and st.history[-1].reason == "DriverNotStarting":
        return True, "DriverNotStarting"
    if kafka is not None and kafka.problem:
        return True, kafka.reason
    if st.consecutive_failures:
        return True, st.last_restart_reason or "DriverFailed"
    return False, "AsExpected"


def _degraded_message(
    st: StreamingJobStatus, kafka: KafkaView | None, degraded: bool, reason: str
) -> str:
    """Condition Degraded's message: the reason's details (the failures and their cause)."""
    failure = st.reconcile_failure
    if failure is not None:
        return (
            f"{failure.message} (failed {failure.count} time(s) since {failure.since}; "
            "retrying with backoff)"
        )
    if degraded and kafka is not None and kafka.problem and reason == kafka.reason:
        return kafka.problem
    if degraded and st.phase not in ("Invalid", "Failed") and reason != "DriverNotStarting":
        message = f"{st.consecutive_failures} consecutive failure(s), last: " + (
            st.last_restart_reason or "?"
        )
        # why (a deleted topic, which Secret or checkpoint): the backoff's record of it
        backoff = next((h for h in reversed(st.history) if h.reason == "BackOff"), None)
        return message + (f" ({backoff.message})" if backoff else "")
    return st.message if degraded else ""


# (type, status, reason, message) of one optional condition, or None: nothing to say yet
Shown = tuple[str, bool, str, str] | None


def _optional_conditions(
    st: StreamingJobStatus, prev: dict[str, Condition], generation: int, now: datetime
) -> list[Condition]:
    """The conditions shown once there is something to say: OffsetsAction, DataLoss,
    GroupCommitFailing, HandoverFallback, StandbyReady, AutoscalerConflict."""
    shown = [c for c in (said(st, prev) for said in _OPTIONAL) if c is not None]
    return [_condition(prev, *c, generation, now) for c in shown]


def _offsets_action(st: StreamingJobStatus, prev: dict[str, Condition]) -> Shown:
    """The last offsets action: True when it went through."""
    if (done := st.offsets_action) is None:
        return None
    message = f"{done.action} (nonce {done.nonce}): {done.message}"
    return "OffsetsAction", done.result == "Succeeded", done.result, message


def _data_loss(st: StreamingJobStatus, prev: dict[str, Condition]) -> Shown:
    """Offsets skipped (failOnDataLoss=false); once shown, it stays (False)."""
    skipped = st.data_loss_skipped_offsets
    if not skipped and "DataLoss" not in prev:
        return None
    if not skipped:
        return "DataLoss", False, "NoneSkipped", ""
    message = (
        f"this run skipped {skipped} offsets deleted or truncated before it read them "
        "(failOnDataLoss=false); the driver's log names the partitions and ranges"
    )
    return "DataLoss", True, "OffsetsSkipped", message


def _group_commits(st: StreamingJobStatus, prev: dict[str, Condition]) -> Shown:
    """Failing commits to the group; once shown, it stays (False) like DataLoss."""
    gc = st.group_commits
    if gc is None or not (gc.failing or "GroupCommitFailing" in prev):
        return None
    if not gc.failing:
        return "GroupCommitFailing", False, "CommitsSucceeded", ""
    return "GroupCommitFailing", True, "GroupCommitFailing", group_commits.failing_message(gc)


def _handover(st: StreamingJobStatus, prev: dict[str, Condition]) -> Shown:
    """True when the last warm hand-over fell back to cold."""
    if (handover := st.handover) is None:
        return None
    if handover.phase != "FellBack":
        return "HandoverFallback", False, handover.phase, ""
    message = f"warm hand-over to {handover.pod}: {handover.message}"
    return "HandoverFallback", True, handover.reason, message


def _standby(st: StreamingJobStatus, prev: dict[str, Condition]) -> Shown:
    """True while a standby can take over at once."""
    if (standby := st.standby) is None:
        return None
    message = f"{standby.pod}: {standby.message}" if standby.message else standby.pod
    return "StandbyReady", standby.state == "Ready", standby.state, message


def _autoscaler(st: StreamingJobStatus, prev: dict[str, Condition]) -> Shown:
    """True while a foreign scale undone is recent."""
    if st.autoscaler is None:
        return None
    conflict = st.autoscaler.conflict
    return (
        "AutoscalerConflict",
        bool(conflict),
        "ForeignScale" if conflict else "AsExpected",
        conflict,
    )


_OPTIONAL = (_offsets_action, _data_loss, _group_commits, _handover, _standby, _autoscaler)


MAX_STATUS_MESSAGE = 2048


def _clip(text: str) -> str:
    return text if len(text) <= MAX_STATUS_MESSAGE else text[: MAX_STATUS_MESSAGE - 3] + "..."


def status_body(st: StreamingJobStatus) -> dict[str, Any]:
    """The whole status as a merge-patch body: every list/map is ours and replaced whole.
    Messages are clipped: they may quote what users and kubelets wrote, and a status that
    outgrows the object's size limit would make every later write fail."""
    body = st.model_dump(mode="json", by_alias=True)
    body["message"] = _clip(body["message"])
    for item in [*body["conditions"], *body["history"]]:
        item["message"] = _clip(item["message"])
    if body.get("reconcileFailure") is None:
        body.pop("reconcileFailure", None)  # a PUT without it clears it
    else:
        body["reconcileFailure"]["message"] = _clip(body["reconcileFailure"]["message"])
    if body.get("offsetsAction") is None:
        body.pop("offsetsAction", None)
    else:
        body["offsetsAction"]["message"] = _clip(body["offsetsAction"]["message"])
    if body.get("autoscaler") is None:
        body.pop("autoscaler", None)
    else:
        body["autoscaler"] = {k: v for k, v in body["autoscaler"].items() if v is not None}
    if body.get("groupCommits") is None:
        body.pop("groupCommits", None)
    if body.get("handover") is None:
        body.pop("handover", None)
    else:
        body["handover"]["message"] = _clip(body["handover"]["message"])
    if body.get("restoredBatch") is None:
        body["restoredBatch"] = None  # explicit null clears it in a merge patch
    return body
