"""spec.offsetsAction: when an offsets action runs, and how its outcome is recorded. Pure.

The rule (semantics: offsets actions): an action runs once per nonce, and only while the job
is suspended (spec.suspend and phase Suspended) with no driver or executor pod left: decide()
removed them by its usual fencing rules (a lost pod counts as gone only after the node-lost
grace), so no run of the job can commit over the new offsets. While spec.suspend is false the
request is refused at once (recorded, nonce consumed: bump it again once suspended); while the
job is still stopping it waits. Kafka's answer is recorded as Succeeded, Refused (out of range,
unknown partition, live group members: nothing written) or Failed (Kafka did not answer).

A reset or alter sets status.offsetsActedSinceLaunch: the next resume starts a new epoch fresh
from the group's offsets (epochs.manual_trigger), even under upgradeMode last-state, whose
restored checkpoint would otherwise ignore them, and without the catch-up from the previous
epoch's checkpoint (epochs.set_target clears previousCheckpointLocation and the flag).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from spark_app.api.offsets_admin import OffsetsRequest, OffsetsResult, request_of
from streamingjob_operator.api.job import JobMeta
from streamingjob_operator.api.models import (
    API_GROUP,
    HistoryEntry,
    OffsetsActionSpec,
    OffsetsActionStatus,
    OffsetsPartitionResult,
    StreamingJobSpec,
    StreamingJobStatus,
)
from streamingjob_operator.rules.history import Event
from streamingjob_operator.rules.observed import iso

REQUESTED_BY_ANNOTATION = f"{API_GROUP}/offsets-requested-by"
MAX_STATUS_PARTITIONS = 100
Outcome = Literal["Succeeded", "Refused", "Failed"]
Gate = Literal["run", "wait", "refuse"]

_DONE_REASONS = {"list": "OffsetsListed", "reset": "OffsetsReset", "alter": "OffsetsAltered"}
_NOT_DONE_REASONS = {"Refused": "OffsetsRefused", "Failed": "OffsetsFailed"}


def pending(spec: StreamingJobSpec, st: StreamingJobStatus) -> bool:
    """A requested action not acted on yet (its nonce is not the recorded one)."""
    action = spec.offsets_action
    return action is not None and (
        st.offsets_action is None or st.offsets_action.nonce != action.nonce
    )


def gate(spec: StreamingJobSpec, st: StreamingJobStatus, pods_left: bool) -> Gate | None:
    """What to do with a pending action now; `st` is the status decide() returned for this
    step, `pods_left` whether any pod of the job exists. None: nothing pending."""
    if not pending(spec, st):
        return None
    if not spec.suspend:
        return "refuse"
    if pods_left or not st.suspended or st.phase != "Suspended":
        return "wait"
    return "run"


RUNNING_REFUSAL = (
    "the job is not suspended: offsets can only change while nothing reads or commits them; "
    "set spec.suspend: true, wait for phase Suspended, then change spec.offsetsAction.nonce"
)


def request(action: OffsetsActionSpec) -> OffsetsRequest:
    parts = [(p.topic, p.partition, p.offset) for p in action.partitions or ()]
    return request_of(action.action, action.to, action.timestamp, parts or None)


def requested_by(meta: JobMeta) -> tuple[str, str]:
    """(who, when): the annotation if the user set one, else the field manager that last
    wrote spec.offsetsAction (kubectl-patch, kubectl-client-side-apply, a GitOps
    controller...) and when. The API server records managers, not user names: the audit
    log has those."""
    owner, when = "", ""
    for entry in meta.managed_fields:
        fields = ((entry.get("fieldsV1") or {}).get("f:spec") or {}).get("f:offsetsAction")
        if fields is not None and str(entry.get("time") or "") >= when:
            owner, when = str(entry.get("manager") or ""), str(entry.get("time") or "")
    annotated = meta.annotations.get(REQUESTED_BY_ANNOTATION)
    return (str(annotated)[:253] if annotated else owner), when


def record(
    st: StreamingJobStatus,
    action: OffsetsActionSpec,
    outcome: Outcome,
    message: str,
    *,
    who: tuple[str, str],
    now: datetime,
    history_limit: int,
    result: OffsetsResult | None = None,
    config_map: str = "",
) -> Event:
    """Records the outcome in status (and history); returns the Event to post."""
    described = (
        request(action).describe() if outcome != "Refused" or _valid(action) else action.action
    )
    rows = list(result.partitions) if result is not None else []
    st.offsets_action = OffsetsActionStatus(
        nonce=action.nonce,
        action=described,
        result=outcome,
        message=message,
        requested_by=who[0],
        requested_at=who[1],
        time=iso(now),
        partitions=[
            OffsetsPartitionResult(
                topic=p.topic,
                partition=p.partition,
                before=p.before,
                after=p.after,
                log_start=p.log_start,
                log_end=p.log_end,
            )
            for p in rows[:MAX_STATUS_PARTITIONS]
        ],
        config_map=config_map,
    )
    if outcome == "Succeeded" and action.action != "list":
        st.offsets_acted_since_launch = True
    done = outcome == "Succeeded"
    reason = _DONE_REASONS[action.action] if done else _NOT_DONE_REASONS[outcome]
    by = f" (requested by {who[0]})" if who[0] else ""
    text = f"offsets {described} (nonce {action.nonce}){by}: {message}"
    st.history = [
        *st.history,
        HistoryEntry(
            time=iso(now), reason=reason, message=text, epoch=st.epoch, attempt=st.attempt
        ),
    ][-history_limit:]
    return Event("Normal" if outcome == "Succeeded" else "Warning", reason, text)


def _valid(action: OffsetsActionSpec) -> bool:
    try:
        request(action)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class Listing:
    """The full result of an action, for the ConfigMap <job>-offsets."""

    data: dict[str, str]


def listing(result: OffsetsResult, now: datetime) -> Listing:
    import json

    body = {
        "group": result.group,
        "action": result.request.describe(),
        "time": iso(now),
        "partitions": [p.as_json() for p in result.partitions],
    }
    return Listing({"offsets.json": json.dumps(body, indent=1, sort_keys=True)})
