"""How the operator treats a job, part of the StreamingJob spec: its checkpoint (age, deletion),
automatic restarts and their backoff, actions on the group's offsets, and the autoscaler.
Field descriptions become `kubectl explain` text; cross-field rules are mirrored as CEL rules."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from spark_app.api.manifest import CheckpointSpec
from spark_app.api.spec_base import SpecModel

DAY = 86_400


class CheckpointPolicySpec(CheckpointSpec):
    """Where the job's state lives and how the operator treats it. Each deployment epoch gets
    <location>/<namespace>/<name>/epoch-<n>; an automatic restart reuses the epoch's
    directory (restore), a redeploy gets a new, empty one (fresh start)."""

    max_checkpoint_age_seconds: int | None = Field(
        default=None,
        ge=1,
        le=3650 * DAY,
        description="Refuse to restore a checkpoint whose last known batch is older than "
        "this many seconds (the job goes to phase Failed with a message). Unset: any age. "
        "Set force to restore anyway, or bump redeployNonce to start fresh instead.",
    )
    force: bool = Field(
        default=False,
        description="Restore even when the checkpoint is older than maxCheckpointAgeSeconds.",
    )
    delete_on_job_deletion: bool = Field(
        default=False,
        description="When the StreamingJob is deleted, also delete its checkpoint data: a "
        "short-lived cleanup Job removes <location>/<namespace>/<name>, for s3a:// locations "
        "(with spec.s3) and file:// locations on a volume listed in volumes. Elsewhere (a "
        "node-local path, gs://, ...) the operator keeps the data and emits a CheckpointKept "
        "event: use the store's lifecycle rules. Default false: checkpoints survive deletion.",
    )


class BackoffSpec(SpecModel):
    """Exponential backoff between automatic restarts: base * 2^(consecutive failures - 1),
    capped."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.capSeconds) ? self.capSeconds : 300.0) >= "
                    "(has(self.baseSeconds) ? self.baseSeconds : 10.0)",
                    "message": "capSeconds must be >= baseSeconds",
                }
            ]
        }
    )

    base_seconds: float = Field(
        default=10,
        ge=0,
        le=DAY,
        description="Delay before the first automatic restart (seconds, at most a day).",
    )
    cap_seconds: float = Field(
        default=300, ge=0, le=DAY, description="Upper bound of the delay (seconds, at most a day)."
    )

    @model_validator(mode="after")
    def _check(self) -> BackoffSpec:
        if self.cap_seconds < self.base_seconds:
            raise ValueError("capSeconds must be >= baseSeconds")
        return self

    def delay(self, consecutive_failures: int) -> float:
        """base * 2^(n-1), capped; n = consecutive failures including this one."""
        exponent = max(consecutive_failures - 1, 0)
        if exponent > 60:
            return self.cap_seconds
        return min(self.cap_seconds, self.base_seconds * (1 << exponent))


class RestartPolicySpec(SpecModel):
    """When the operator relaunches a driver that stopped. A relaunch reuses the epoch's
    checkpoint location, so Spark restores from the last complete batch."""

    type: Literal["Always", "OnFailure", "Never"] = Field(
        default="Always",
        description="Always: relaunch after every driver termination. OnFailure: the same, "
        "except that a clean exit of an availableNow job completes it. (A continuous job "
        "that exits 0 has failed: a stream does not stop on its own.) Never: no automatic "
        "relaunch; the job goes to phase Failed (or Completed).",
    )
    max_restarts: int = Field(
        default=10,
        ge=0,
        le=10_000,
        description="Automatic restarts allowed within windowSeconds; one more failure "
        "moves the job to phase Failed until restartNonce or redeployNonce is bumped.",
    )
    window_seconds: int = Field(
        default=3600,
        ge=1,
        le=365 * DAY,
        description="The window (seconds, at most a year) that maxRestarts counts in.",
    )
    backoff: BackoffSpec = Field(
        default_factory=BackoffSpec, description="Delay between automatic restarts."
    )
    stable_run_seconds: int = Field(
        default=600,
        ge=1,
        le=365 * DAY,
        description="A driver that runs this long resets the consecutive-failure count "
        "(backoff starts again at baseSeconds) and the window's restart count.",
    )
    start_timeout_seconds: int = Field(
        default=600,
        ge=1,
        le=7 * DAY,
        description="A driver pod that has not started running this long after it was "
        "created (unschedulable, image pull failing, a referenced Secret missing) counts as "
        "a failed attempt: it is deleted and relaunched after backoff, within maxRestarts. "
        "While it waits, the job is Degraded with the kubelet's or scheduler's reason.",
    )


class HandoverSpec(SpecModel):
    """How a redeploy or a restart by hand (restartNonce) replaces a running driver. cold:
    stop it between batches, wait until it is gone, then start the next one. warm: start the
    next driver first, waiting; once it reports ready (its session, executors, Kafka and the
    checkpoint storage checked), stop the running one the same way and, once it is gone,
    tell the waiting one to go (docs/operator/handover.md, "Warm hand-over")."""

    mode: Literal["warm", "cold"] = Field(
        default="cold",
        description="cold (default): stop, then start. warm: start the next driver first, "
        "waiting, and stop the running one when the next is ready. Falls back to cold when "
        "the next driver is not ready within readyTimeoutSeconds or fails (condition "
        "HandoverFallback, Event WarmHandoverFailed). Changing it restarts nothing.",
    )
    ready_timeout_seconds: int = Field(
        default=180,
        ge=1,
        le=3600,
        description="How long (seconds, 1 to 3600) the waiting driver of a warm hand-over "
        "may take to report ready before it is deleted and the cold path is taken.",
    )


class StandbySpec(SpecModel):
    """A standby for failover: one more driver, warm and waiting, beside the running one
    (docs/operator/handover.md, "Standby"). When the running driver is lost it takes over from the
    checkpoint as soon as the old driver is confirmed gone, and a new standby is started
    behind it. It costs one more driver pod and its executors (spec.driver and
    spec.executor requests), placed on another node where one fits."""

    enabled: bool = Field(
        default=False,
        description="Keep a warm standby driver (with spec.executor.instances executors) "
        "beside the running one. A lost driver (crashed, deleted, evicted, its node lost) or a "
        "restartNonce then hands over to it at once instead of a cold relaunch; its warm-up "
        "is bounded by spec.handover.readyTimeoutSeconds. `kubectl get sj` shows it in the "
        "Standby column. Changing it restarts nothing.",
    )


class OffsetsPartitionSpec(SpecModel):
    """One partition of an offsets action."""

    topic: str = Field(min_length=1, max_length=249, description="Topic name.")
    partition: int = Field(ge=0, le=1_000_000, description="Partition number.")
    offset: int | None = Field(
        default=None,
        ge=0,
        le=2**62,
        description="alter only: the group's new offset (the next record to read), between "
        "the partition's log start and log end inclusive.",
    )


class OffsetsActionSpec(SpecModel):
    """An action on the consumer group's offsets, run once per nonce and only while the job
    is suspended with no driver or executor left. The result goes into
    status.offsetsAction, an Event, and (list) the ConfigMap <job>-offsets. After a reset or
    alter, the next resume starts a new epoch (an empty checkpoint) from the group's offsets,
    also under upgradeMode last-state."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.action != 'reset' || has(self.to)",
                    "message": "reset needs to: earliest, latest or timestamp",
                },
                {
                    "rule": "self.action == 'reset' || !has(self.to)",
                    "message": "to is for reset only",
                },
                {
                    "rule": "(has(self.to) && self.to == 'timestamp') == has(self.timestamp)",
                    "message": "timestamp is set exactly when to is timestamp",
                },
                {
                    "rule": "self.action != 'alter' || (has(self.partitions) && "
                    "size(self.partitions) > 0 && self.partitions.all(p, has(p.offset)))",
                    "message": "alter needs partitions, each with an offset",
                },
                {
                    "rule": "self.action == 'alter' || !has(self.partitions) || "
                    "self.partitions.all(p, !has(p.offset))",
                    "message": "offsets per partition are for alter only",
                },
            ]
        }
    )

    nonce: int = Field(
        ge=-(2**53),
        le=2**53,
        description="Change (e.g. increment) to request the action; each value runs once.",
    )
    action: Literal["list", "reset", "alter"] = Field(
        description="list: committed offsets and log ends into status and the ConfigMap "
        "<job>-offsets. reset: move the offsets to the earliest, latest or a timestamp. "
        "alter: set the given offset of each listed partition."
    )
    to: Literal["earliest", "latest", "timestamp"] | None = Field(
        default=None, description="reset only: earliest, latest or timestamp."
    )
    timestamp: str | None = Field(
        default=None,
        max_length=40,
        pattern=r"^([0-9]{1,15}|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9]{2}:[0-9]{2}))$",
        description="reset to timestamp: RFC 3339 (2026-11-23T05:00:00Z) or epoch "
        "milliseconds. Each partition goes to its first record at or after it (the log end "
        "if there is none).",
    )
    partitions: list[OffsetsPartitionSpec] | None = Field(
        default=None,
        max_length=1000,
        description="The partitions to act on; unset: every partition of the job's topics.",
    )

    @model_validator(mode="after")
    def _check(self) -> OffsetsActionSpec:
        if self.action == "reset" and self.to is None:
            raise ValueError("reset needs to: earliest, latest or timestamp")
        if self.action != "reset" and self.to is not None:
            raise ValueError("to is for reset only")
        if (self.to == "timestamp") != (self.timestamp is not None):
            raise ValueError("timestamp is set exactly when to is timestamp")
        parts = self.partitions or []
        if self.action == "alter" and (not parts or any(p.offset is None for p in parts)):
            raise ValueError("alter needs partitions, each with an offset")
        if self.action != "alter" and any(p.offset is not None for p in parts):
            raise ValueError("offsets per partition are for alter only")
        return self


class AutoscalerSpec(SpecModel):
    """The executor count follows the load (docs/operator/scaling.md, "Autoscaler"). While enabled,
    the operator owns spec.executor.instances: a rescale is a restart in the same epoch
    (restore), and a change of the count by anyone else (kubectl scale, an HPA, KEDA) is
    undone and reported (condition AutoscalerConflict)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.minExecutors) ? self.minExecutors : 1) <= "
                    "(has(self.maxExecutors) ? self.maxExecutors : 10)",
                    "message": "minExecutors must be <= maxExecutors",
                }
            ]
        }
    )

    enabled: bool = Field(
        default=False,
        description="true: the operator sets the executor count from the measured input "
        "rate, processing rate and lag, within [minExecutors, maxExecutors].",
    )
    min_executors: int = Field(
        default=1, ge=1, le=1000, description="The fewest executors the autoscaler runs."
    )
    max_executors: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="The most executors the autoscaler runs (also capped by the partitions "
        "the job reads: ceil(partitions / executor.cores)).",
    )
    target_utilization: float = Field(
        default=0.7,
        ge=0.25,
        le=1.0,
        description="The share of the executors' processing rate the input may use; the "
        "rest is headroom for bursts and for working off a backlog. Nothing changes while "
        "the utilization is within 0.2 of it.",
    )
    catch_up_seconds: int = Field(
        default=300,
        ge=10,
        le=DAY,
        description="Time allowed to work off the lag: executors are added when the input "
        "plus lag / catchUpSeconds needs more than the headroom.",
    )
    stabilization_seconds: int = Field(
        default=180,
        ge=0,
        le=DAY,
        description="After a launch or a rescale (a restart in the same epoch), no decision "
        "for this long: at most one rescale per window.",
    )
    scale_down_delay_seconds: int = Field(
        default=600,
        ge=0,
        le=DAY,
        description="The load must stay low this long before the executors go down (a "
        "scale-down never goes below what the peak of this span needed).",
    )
    metrics_window_seconds: int = Field(
        default=120,
        ge=10,
        le=DAY,
        description="The rates are averaged over this window; a scale-up needs the load "
        "high over all of it. Give it several of the operator's readings (one per "
        "KAFKA_POLL_SECONDS, 30 by default): fewer than two make no decision.",
    )

    @model_validator(mode="after")
    def _check(self) -> AutoscalerSpec:
        if self.min_executors > self.max_executors:
            raise ValueError(
                f"minExecutors ({self.min_executors}) must be <= maxExecutors "
                f"({self.max_executors})"
            )
        return self
