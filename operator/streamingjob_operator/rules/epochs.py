"""What makes a new epoch and what a restart (semantics rules 5, 6, 9 and 11): the class of
each spec field, the hashes of the fields last deployed, the manual acts (nonces, resume, spec
changes), and the target a launch records in status (epoch, attempt, driver pod, checkpoint
location, the previous epoch's checkpoint to catch up from).

A new epoch starts fresh in a new, empty checkpoint location; the next attempt of the same
epoch restores the epoch's checkpoint."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from spark_app.api.manifest import checkpoint_location
from streamingjob_operator.api.naming import driver_pod_name, executor_selector, ui_service_name
from streamingjob_operator.api.spec_models import StreamingJobSpec
from streamingjob_operator.api.status_models import DeployedSpec, StreamingJobStatus
from streamingjob_operator.rules.observed import iso, parse_time
from streamingjob_operator.rules.step import Job

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
    "sink_kafka_credentials": RESTART,
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
    "handover": IGNORE,  # read when a redeploy or restart is due (handover.py)
    "standby": IGNORE,  # read while the job runs and when its driver is lost (standby.py)
}

# Fields added after a release: hashed only when they differ from their default, so that the
# hashes of jobs deployed by the older operator stay the same (an upgrade restarts no job).
ADDED_SINCE_RELEASE = ("spark_ui", "sink_kafka_credentials")
# ... and fields added inside a hashed field (by alias path): left out while unset (None, or
# an empty list or map).
ADDED_NESTED_SINCE_RELEASE = (
    ("job", "source", "value"),
    ("job", "source", "key"),
    ("job", "deadLetter"),
    ("job", "sql"),
    ("job", "sink", "partitionBy"),
    ("job", "sink", "tableProperties"),
    ("job", "sink", "deliveryGuarantee"),
    ("job", "sink", "transactionTimeoutMs"),
    ("job", "sink", "table"),
    ("job", "sink", "catalog"),
    ("job", "sink", "value"),
)


def _drop_unset_added(data: dict[str, Any]) -> None:
    for *parents, leaf in ADDED_NESTED_SINCE_RELEASE:
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(leaf, 0) in (None, [], {}):  # unset
            del node[leaf]


def _hash(spec: StreamingJobSpec, klass: str) -> str:
    data = spec.model_dump(mode="json", by_alias=True)
    _drop_unset_added(data)
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


def manual_trigger(spec: StreamingJobSpec, st: StreamingJobStatus) -> tuple[str, str, str] | None:
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


def next_attempt(st: StreamingJobStatus) -> int:
    """The epoch's next attempt: above the running one and above the last standby's and
    waiting driver's, whose pods (named by their attempt) may still exist: a name is never
    reused."""
    others = (o for o in (st.standby, st.handover) if o is not None and o.epoch == st.epoch)
    return max([st.attempt, *(o.attempt for o in others)]) + 1


def next_epoch(st: StreamingJobStatus) -> int:
    """A new epoch: above the job's and above the last hand-over's, whose driver (named by
    its epoch) was started for an epoch that may never have become the job's (Cancelled,
    FellBack): a name and a checkpoint location are never handed out again."""
    handover = st.handover.epoch if st.handover is not None else 0
    return max(st.epoch, handover) + 1


def set_target(job: Job, st: StreamingJobStatus, epoch: int, attempt: int) -> None:
    """The next launch's target in status: a new epoch gets a new, empty checkpoint location
    of this job's own (its uid); the next attempt of an epoch restores the location the
    epoch was given (as recorded, whatever layout it was given under)."""
    spec, name = job.spec, job.name
    group = spec.job.source.group_id or ""
    new_epoch = epoch != st.epoch
    # A new epoch: the ones before it are where its offsets catch up from, for the same group
    # only (a new group starts where the user asked: its own offsets or the reset strategy),
    # also when the group changed in a restart of an epoch that never started its query
    # (last-state). "": recorded by an operator that kept no group (treated as the same).
    same_group = st.checkpoint_group_id in ("", group)
    chain = [st.previous_checkpoint_location, *st.older_checkpoint_locations]
    if new_epoch:
        chain.insert(0, st.checkpoint_location)
    _catch_up_from(st, chain if same_group else [])
    if new_epoch:  # a restore's run says when it reads as its group (phases.apply_report)
        st.checkpoint_group_id = group
    if st.offsets_acted_since_launch:
        # The user set the group's offsets after the last driver stopped: they win over the
        # earlier epochs' checkpoints, for this launch and every later one of the epoch.
        _catch_up_from(st, [])
        st.offsets_acted_since_launch = False
    st.epoch, st.attempt = epoch, attempt
    st.avoid_nodes = []  # a lost node is avoided by the attempt after the loss only
    st.driver_pod = driver_pod_name(name, epoch, attempt)
    st.spark_ui_service = ui_service_name(name) if spec.spark_ui.enabled else ""
    st.selector = executor_selector(name)
    if new_epoch or not st.checkpoint_location:
        base = spec.checkpoint.location
        st.checkpoint_location = checkpoint_location(base, job.namespace, name, epoch, job.uid)
    st.launch_state = "Pending"
    # unknown_since stays: the old driver may still be silent and is fenced by it
    # (fencing.delete_pods)
    st.launched_at = st.running_since = ""
    st.start_path = st.start_detail = ""
    st.restored_batch = None
    st.data_loss_skipped_offsets = 0  # per run, as the driver counts them
    st.dead_letter_records = {}
    st.sink_transactions = {}
    if st.group_commits is not None:  # counted per run; failing until a commit succeeds
        st.group_commits = st.group_commits.model_copy(update={"failed": 0, "succeeded": 0})


# Epochs a catch-up reaches back over (the newest whose query started wins): a chain of
# starts that all failed before their query longer than this re-reads from the group.
CATCH_UP_EPOCHS = 8


def _catch_up_from(st: StreamingJobStatus, locations: list[str]) -> None:
    chain = [location for location in locations if location][:CATCH_UP_EPOCHS]
    st.previous_checkpoint_location = chain[0] if chain else ""
    st.older_checkpoint_locations = chain[1:]


def catch_up_chain(previous: str, older: list[str]) -> tuple[str, ...]:
    """The checkpoints a fresh start catches up from, newest first (launch.py)."""
    return tuple(location for location in (previous, *older) if location)


def checkpoint_too_old(spec: StreamingJobSpec, st: StreamingJobStatus, now: datetime) -> str | None:
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


def mark_deployed(spec: StreamingJobSpec, st: StreamingJobStatus) -> None:
    put_deployed(
        st,
        DeployedSpec(
            job_hash=job_hash(spec),
            pod_hash=pod_hash(spec),
            checkpoint_base=spec.checkpoint.location,
            sink=f"{spec.job.sink.format} {spec.job.sink.guarantee}",  # kubectl get -o wide
            restart_nonce=spec.restart_nonce,
            redeploy_nonce=spec.redeploy_nonce,
        ),
    )


# DeployedSpec's fields and the status fields that hold them (status keeps them flat: its
# API since before a hand-over saved them)
_DEPLOYED_IN_STATUS = {
    "job_hash": "deployed_job_hash",
    "pod_hash": "deployed_pod_hash",
    "checkpoint_base": "deployed_checkpoint_base",
    "sink": "sink",
    "restart_nonce": "deployed_restart_nonce",
    "redeploy_nonce": "deployed_redeploy_nonce",
}


def deployed(st: StreamingJobStatus) -> DeployedSpec:
    """What the job's driver was launched for (mark_deployed)."""
    return DeployedSpec(**{f: getattr(st, held) for f, held in _DEPLOYED_IN_STATUS.items()})


def put_deployed(st: StreamingJobStatus, spec: DeployedSpec) -> None:
    for field, held in _DEPLOYED_IN_STATUS.items():
        setattr(st, held, getattr(spec, field))
