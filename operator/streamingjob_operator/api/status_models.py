"""The StreamingJob status: what the operator observed and recorded (the CRD's status schema).

The launch fields are a write-ahead log: written before the driver pod is created, so that a
restarted operator knows what it was doing (decide.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from streamingjob_operator.api.status_records import (
    AutoscalerStatus,
    Condition,
    GroupCommitsStatus,
    HistoryEntry,
    OffsetsActionStatus,
    ReconcileFailure,
    StatusModel,
    WarningRecord,
)


class WaitingDriver(StatusModel):
    """A driver started waiting for its go beside the running one (handover.py, standby.py).
    Recorded before its pod is created, so a restarted operator adopts it."""

    pod: str = Field(description="The waiting driver pod.")
    epoch: int = Field(default=0, description="Its epoch.")
    attempt: int = Field(default=0, description="Its attempt.")
    since: str = Field(default="", description="When its phase or state began (RFC 3339).")
    launch_state: str = Field(
        default="Pending",
        description="Pending: recorded, its pod may not exist yet. Created: it was created.",
    )
    checkpoint_location: str = Field(default="", description="Its checkpoint.")
    avoid_nodes: list[str] = Field(
        default_factory=list,
        description="Nodes the operator counted lost when it created the pod: kept off them "
        "(placed there, it would count as lost at once, and its successor too).",
    )


class DeployedSpec(StatusModel):
    """What a driver was launched for: the deployed* fields of status (epochs.mark_deployed)."""

    job_hash: str = Field(default="", description="deployedJobHash.")
    pod_hash: str = Field(default="", description="deployedPodHash.")
    checkpoint_base: str = Field(default="", description="deployedCheckpointBase.")
    sink: str = Field(default="", description="sink.")
    restart_nonce: int = Field(default=0, description="deployedRestartNonce.")
    redeploy_nonce: int = Field(default=0, description="deployedRedeployNonce.")


class HandoverStatus(WaitingDriver):
    """The warm hand-over under way, or the last one (spec.handover.mode warm; handover.py):
    the next driver. Written before each of its steps, so a restarted operator continues it."""

    phase: Literal["Warming", "Stopping", "Started", "FellBack", "Cancelled"] = Field(
        default="Warming",
        description="Warming: the next driver is started and warms up. Stopping: it reported "
        "ready; the running driver is stopped between batches. Started: the running driver "
        "was gone, the go was written; the next driver is the job's driver. FellBack: the "
        "next driver was not ready in time or failed; it was deleted and the cold path taken. "
        "Cancelled: a suspend came before the go (the next driver was deleted), or the spec "
        "changed again before the next driver was created (reason Replaced); its name and "
        "epoch are not handed out again.",
    )
    previous_checkpoint_location: str = Field(
        default="", description="The checkpoint the next driver catches up from (a new epoch)."
    )
    older_checkpoint_locations: list[str] = Field(
        default_factory=list,
        description="Earlier epochs' checkpoints, newest first, caught up from when the "
        "newer ones never started a query.",
    )
    checkpoint_group_id: str = Field(
        default="",
        description="The consumer group whose reads the next driver's checkpoint holds (a new "
        "epoch: its spec's; a restore: the running one's, until the next driver's report).",
    )
    reason: str = Field(
        default="",
        description="FellBack: NotReadyInTime or WaitingDriverFailed. Cancelled: Replaced.",
    )
    message: str = Field(default="", description="FellBack or Replaced: why.")
    running_spec: DeployedSpec | None = Field(
        default=None,
        description="What the running driver was launched for, when the hand-over began: "
        "put back if the spec changes again before the next driver is created (Replaced).",
    )


class StandbyStatus(WaitingDriver):
    """The standby driver (spec.standby.enabled; standby.py): the running epoch's next
    attempt, restoring the running driver's checkpoint when it takes over."""

    state: Literal["Warming", "Ready", "Failed", "Removed"] = Field(
        default="Warming",
        description="Warming: started, warming up. Ready: it can take over at once. Failed: it "
        "ended, was lost or not ready in time (message says why); a new one follows after the "
        "restart backoff. Removed: no longer wanted (spec.standby off, a redeploy, a suspend); "
        "its pod is deleted.",
    )
    failures: int = Field(default=0, description="Standbys failed in a row (the backoff).")
    message: str = Field(default="", description="Failed: why.")


class StreamingJobStatus(StatusModel):
    """Observed state of the job. The launch fields are written before the driver pod is
    created (a write-ahead log), so a restarted operator knows what it was doing."""

    phase: str = Field(
        default="Pending",
        description="Pending, Launching, Running, Restarting (backing off), Stopping, "
        "Suspended, Failed, Completed or Invalid.",
    )
    message: str = Field(default="", description="Why the job is in this phase.")
    observed_generation: int = Field(default=0, description="Last reconciled generation.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Progressing, Degraded; OffsetsAction once an offsets action "
        "ran (True: it went through).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    epoch: int = Field(default=0, description="Deployment epoch (a new one = fresh start).")
    attempt: int = Field(default=0, description="Attempt within the epoch (restores).")
    driver_pod: str = Field(default="", description="Name of the current driver pod.")
    spark_ui_service: str = Field(
        default="",
        alias="sparkUIService",
        description="The Service of the current driver's Spark UI (spec.sparkUI.enabled); "
        "empty: none.",
    )
    executors: int = Field(
        default=0,
        description="Executors of the current run (spec.executor.instances it was launched "
        "with) once its driver runs; 0 otherwise. The scale subresource's status replicas.",
    )
    selector: str = Field(
        default="",
        description="Label selector of the job's executor pods (the scale subresource's, for "
        "the HorizontalPodAutoscaler).",
    )
    checkpoint_location: str = Field(default="", description="Checkpoint location in use.")
    previous_checkpoint_location: str = Field(
        default="",
        description="The previous epoch's checkpoint. A fresh start of this epoch first "
        "commits its last durable batch's end offsets where they are ahead of the group "
        "(nothing it made durable is read again). Empty: no catch-up.",
    )
    older_checkpoint_locations: list[str] = Field(
        default_factory=list,
        description="Earlier epochs' checkpoints, newest first (at most 7): where the previous "
        "epoch never started its query (its start failed, was refused or never ran), the "
        "catch-up reaches back to the newest epoch whose query started.",
    )
    checkpoint_group_id: str = Field(
        default="",
        description="The consumer group (spec.job.source.groupId) whose reads "
        "checkpointLocation holds: the new epoch's, then the group of each run that started "
        "on it (its report's groupId). A new epoch catches up from the previous epoch's "
        "checkpoint only for the same group: a new group starts from its own offsets or the "
        "reset strategy.",
    )
    offsets_acted_since_launch: bool = Field(
        default=False,
        description="The group's offsets were set by an offsets action (spec.offsetsAction "
        "reset or alter) since the last launch: the next launch is a new epoch (also under "
        "upgradeMode last-state) that starts from them, without catching up from the "
        "previous epoch's checkpoint (the action wins). Cleared by that launch.",
    )
    launch_state: str = Field(
        default="",
        description="Pending: the launch is recorded but the pod may not exist yet. "
        "Created: the driver pod was created.",
    )
    launched_at: str = Field(default="", description="When the current driver was created.")
    running_since: str = Field(
        default="", description="When the current driver was first seen running."
    )
    unknown_since: str = Field(
        default="",
        description="Since when the current driver's node has been silent (no lease renewal "
        "seen, or the pod marked Unknown).",
    )
    avoid_nodes: list[str] = Field(
        default_factory=list,
        description="Nodes the current attempt's pods must not be scheduled on: the node a "
        "driver was lost on, and those the operator counted lost when it created the driver; "
        "the scheduler may still think them Ready (the operator's grace can end before "
        "the node lifecycle controller marks a node, and a node back from a freeze is Ready "
        "before the operator hears its kubelet).",
    )
    suspended: bool = Field(default=False, description="The job is suspended.")
    deployed_job_hash: str = Field(
        default="", description="Hash of the redeploy-class spec fields last deployed."
    )
    deployed_pod_hash: str = Field(
        default="", description="Hash of the restart-class spec fields last deployed."
    )
    deployed_checkpoint_base: str = Field(
        default="", description="spec.checkpoint.location last deployed."
    )
    sink: str = Field(
        default="",
        description="The sink last deployed and the guarantee it keeps, e.g. 'kafka "
        "exactly-once' (for read_committed readers); shown by kubectl get -o wide.",
    )
    deployed_restart_nonce: int = Field(default=0, description="restartNonce last acted on.")
    deployed_redeploy_nonce: int = Field(default=0, description="redeployNonce last acted on.")
    restarts: int = Field(default=0, description="Restarts in this epoch and before.")
    consecutive_failures: int = Field(
        default=0, description="Failures since the last stable run (drives the backoff)."
    )
    recent_failures: list[str] = Field(
        default_factory=list, description="Times of failures inside the restart window."
    )
    last_restart_reason: str = Field(default="", description="Why the last restart happened.")
    last_restart_time: str = Field(default="", description="When the last restart happened.")
    next_retry_time: str = Field(
        default="", description="When the pending relaunch may happen (backoff)."
    )
    start_path: str = Field(
        default="",
        description="How the current run started: restored (from the checkpoint) or fresh "
        "(committed offsets / reset strategy), as reported by the driver.",
    )
    start_detail: str = Field(
        default="", description="e.g. restored from batch 41, or per-partition origins."
    )
    restored_batch: int | None = Field(default=None, description="Batch the run restored.")
    data_loss_skipped_offsets: int = Field(
        default=0,
        description="Offsets the current run skipped because they were deleted (retention) "
        "or truncated before it read them (failOnDataLoss=false), as the driver reported.",
    )
    dead_letter_records: dict[str, int] = Field(
        default_factory=dict,
        description="Records of the current run that could not be decoded and went to the "
        "dead-letter topic, by reason (bad-magic-byte, truncated, unknown-schema-id, "
        "unresolvable-schema, malformed-payload), as the driver counted them.",
    )
    sink_transactions: dict[str, int] = Field(
        default_factory=dict,
        description="The exactly-once Kafka sink's counts in the current run, as the driver "
        "reported them: transactions committed, replaysSkipped (ranges of a replayed batch "
        "whose output was committed already: written once, not again), records written and "
        "batchesAborted.",
    )
    group_commits: GroupCommitsStatus | None = Field(
        default=None,
        description="The runner's offset commits to the consumer group, once it reported any.",
    )
    latest_batch: dict[str, Any] = Field(
        default_factory=dict,
        description="The driver's latest batch: batchId, numInputRows, timestamp.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    last_progress_time: str = Field(
        default="", description="Time of the latest batch known (checkpoint age)."
    )
    committed_offsets: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="The consumer group's committed offsets, read by the operator.",
    )
    lag: int | None = Field(
        default=None, description="Sum over partitions of log end offset - committed offset."
    )
    offsets_time: str = Field(default="", description="When offsets and lag were read.")
    history: list[HistoryEntry] = Field(
        default_factory=list, description="The latest transitions, newest last (bounded)."
    )
    warnings: list[WarningRecord] = Field(
        default_factory=list,
        description="The latest Warning Events, newest last (bounded), each recorded in the "
        "same write as the decision it tells: an Event the operator could not post (it "
        "ended, lost its Lease, or the API server was away) is posted by the next reconcile "
        "of whichever replica leads, once (its name is fixed).",
    )
    offsets_action: OffsetsActionStatus | None = Field(
        default=None, description="The last offsets action (spec.offsetsAction)."
    )
    reconcile_failure: ReconcileFailure | None = Field(
        default=None,
        description="Set while reconciles fail (condition Degraded names it); cleared by "
        "the next reconcile that succeeds.",
    )
    autoscaler: AutoscalerStatus | None = Field(
        default=None,
        description="The autoscaler's measurements and decisions (spec.autoscaler.enabled).",
    )
    handover: HandoverStatus | None = Field(
        default=None,
        description="The warm hand-over under way, or the last one (spec.handover.mode warm).",
    )
    standby: StandbyStatus | None = Field(
        default=None,
        description="The standby driver (spec.standby.enabled), or the last one.",
    )
