"""The records the job's status keeps beside its launch fields: conditions, history, kept
warnings, reconcile failures, offsets actions, the autoscaler's state, the group's commits
(status_models.py assembles them into the status).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class StatusModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(StatusModel):
    """A condition in the Kubernetes style."""

    type: str = Field(description="Ready, Progressing, Degraded or OffsetsAction.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False, Unknown.")
    reason: str = Field(default="", description="One word, CamelCase.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: str = Field(default="", description="When status last changed.")
    observed_generation: int = Field(
        default=0, description="metadata.generation the condition was computed for."
    )


class HistoryEntry(StatusModel):
    """One transition of the job (bounded list, newest last)."""

    time: str = Field(description="When it happened (RFC 3339).")
    reason: str = Field(description="Event reason from the fixed vocabulary.")
    message: str = Field(default="", description="What happened.")
    epoch: int = Field(default=0, description="Deployment epoch at that time.")
    attempt: int = Field(default=0, description="Attempt within the epoch at that time.")


class WarningRecord(StatusModel):
    """A Warning Event the operator decided on, kept until a reconcile posted it."""

    name: str = Field(
        description="The Event's metadata.name: the job's name and a digest of its uid, the "
        "previous warning's name, this one's time, reason and message (the same name "
        "whichever operator replica posts it)."
    )
    time: str = Field(description="When it happened (RFC 3339).")
    reason: str = Field(description="Event reason from the fixed vocabulary.")
    message: str = Field(default="", description="What happened.")


class ReconcileFailure(StatusModel):
    """A reconcile that failed and is being retried with backoff; gone once one succeeds."""

    reason: str = Field(
        description="ApiRejected: the API server refused a request (forbidden, or an "
        "invalid object such as a pod built from a bad podTemplate). ReconcileError: any "
        "other error of the operator."
    )
    message: str = Field(default="", description="The error, with the server's message.")
    since: str = Field(default="", description="When this failure was first seen.")
    count: int = Field(default=0, description="Consecutive failed reconciles (the backoff).")


class OffsetsPartitionResult(StatusModel):
    """One partition of an offsets action's result."""

    topic: str = Field(description="Topic.")
    partition: int = Field(description="Partition.")
    before: int | None = Field(default=None, description="Committed offset before (absent: none).")
    after: int | None = Field(default=None, description="Committed offset after (absent: none).")
    log_start: int = Field(default=0, description="Log start offset.")
    log_end: int = Field(default=0, description="Log end offset (the LSO, read_committed).")


class OffsetsActionStatus(StatusModel):
    """The last offsets action: what was asked, by whom, and what happened."""

    nonce: int = Field(description="spec.offsetsAction.nonce acted on.")
    action: str = Field(default="", description="list, reset or alter (with its target).")
    result: str = Field(
        default="",
        description="Succeeded, Refused (nothing written: the job runs, out of range, ...) "
        "or Failed (Kafka did not answer).",
    )
    message: str = Field(default="", description="What happened, or why not.")
    requested_by: str = Field(
        default="",
        description="Who asked: the annotation sparkkafka.dev/offsets-requested-by if set, "
        "else the field manager that last wrote spec.offsetsAction.",
    )
    requested_at: str = Field(default="", description="When spec.offsetsAction was written.")
    time: str = Field(default="", description="When the action ran (or was refused).")
    partitions: list[OffsetsPartitionResult] = Field(
        default_factory=list,
        description="Per partition, before and after (the first 100; the ConfigMap "
        "<job>-offsets holds all of a list).",
    )
    config_map: str = Field(default="", description="ConfigMap with the full list result.")


class AutoscalerDecisionStatus(StatusModel):
    """A rescale the autoscaler made."""

    time: str = Field(description="When it was decided (RFC 3339).")
    action: str = Field(description="ScaledUp or ScaledDown.")
    from_executors: int = Field(default=0, description="The executor count before.")
    to_executors: int = Field(default=0, description="The executor count after.")
    reason: str = Field(default="", description="The rates and the rule that decided it.")


class AutoscalerStatus(StatusModel):
    """What the autoscaler measured and decided (spec.autoscaler.enabled)."""

    executors: int = Field(
        default=0,
        description="The executor count the autoscaler owns: spec.executor.instances is "
        "kept at it (a change by anyone else is undone, see AutoscalerConflict).",
    )
    recommendation: int = Field(
        default=0, description="The executor count the model recommends now."
    )
    pending: bool = Field(
        default=False,
        description="A rescale is recorded and spec.executor.instances not yet set to it "
        "(the operator completes it).",
    )
    action: str = Field(
        default="",
        description="Of the latest evaluation: none (no decision, see reason), hold, up, down.",
    )
    reason: str = Field(default="", description="Why, with the numbers.")
    evaluated_at: str = Field(default="", description="When the model last ran.")
    samples: int = Field(default=0, description="Readings in the operator's window.")
    input_rate: float | None = Field(
        default=None, description="Records/s appended to the job's partitions (window)."
    )
    processing_rate: float | None = Field(
        default=None,
        description="Records per executor per second of the executors' task time (Spark's "
        "addBatch where the runner reports no task time).",
    )
    rates: dict[str, float] = Field(
        default_factory=dict,
        description="The processing rate last measured at each executor count this epoch "
        "ran with: a rescale to such a count plans with its rate (a job's fixed work per "
        "task, and executors sharing cores, make the rate per executor depend on the count).",
    )
    rates_epoch: int = Field(default=0, description="The epoch those rates were measured in.")
    busy_fraction: float | None = Field(
        default=None, description="Seconds of batches per second (against the trigger)."
    )
    utilization: float | None = Field(
        default=None, description="The load over the executors' processing rate."
    )
    last_decision: AutoscalerDecisionStatus | None = Field(
        default=None, description="The last rescale."
    )
    conflict: str = Field(
        default="",
        description="The last change of spec.executor.instances by someone else (kubectl "
        "scale, an HPA or KEDA on /scale), undone.",
    )
    conflict_time: str = Field(default="", description="When it was undone.")


class GroupCommitsStatus(StatusModel):
    """The runner's commits of durable offsets to the consumer group (its report's
    `commits`): failing ones never fail the job (semantics rule 3); they show here, in
    condition GroupCommitFailing and in a Warning Event each time more fail."""

    group: str = Field(default="", description="The consumer group (spec.job.source.groupId).")
    failed: int = Field(default=0, description="Commits that failed in the current run.")
    succeeded: int = Field(default=0, description="Commits that succeeded in the current run.")
    failing: bool = Field(
        default=False,
        description="More commits failed and none succeeded since (a relaunch keeps it until "
        "a commit of the new run succeeds).",
    )
    since: str = Field(default="", description="When the commits started failing.")
