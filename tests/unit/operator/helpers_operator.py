"""Shared builders of specs, statuses and observations for the operator's unit tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from streamingjob_operator.api.job import Job, JobMeta
from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus, parse_spec
from streamingjob_operator.rules.decide import DecideConfig, Decision, decide
from streamingjob_operator.rules.observed import Observed, PodInfo, Termination

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
NS, NAME = "team", "orders"
CFG = DecideConfig(node_lost_grace_seconds=60, fencing_poll_seconds=1, resync_seconds=30)

BASE_SPEC: dict[str, Any] = {
    "image": "repo/streamingjob:1",
    "job": {
        "source": {
            "bootstrapServers": "kafka:9092",
            "subscribe": ["orders"],
            "groupId": "orders-group",
        },
        "sink": {"format": "parquet", "path": "s3a://lake/orders"},
    },
    "checkpoint": {"location": "s3a://ckpt/base"},
    "restartPolicy": {
        "maxRestarts": 3,
        "windowSeconds": 600,
        "backoff": {"baseSeconds": 10, "capSeconds": 60},
        "stableRunSeconds": 120,
    },
}


def make_spec(**changes: Any) -> StreamingJobSpec:
    data = copy.deepcopy(BASE_SPEC)
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return parse_spec(data)


def driver(name: str, phase: str = "Running", **kw: Any) -> PodInfo:
    return PodInfo(name=name, role="driver", phase=phase, **kw)


def executor(name: str, driver_pod: str, phase: str = "Running") -> PodInfo:
    return PodInfo(name=name, role="executor", phase=phase, driver_pod=driver_pod)


def exited(name: str, code: int, reason: str = "") -> PodInfo:
    phase = "Succeeded" if code == 0 else "Failed"
    return driver(name, phase, termination=Termination(exit_code=code, reason=reason))


def run(
    spec: StreamingJobSpec,
    status: StreamingJobStatus,
    pods: tuple[PodInfo, ...] | list[PodInfo] = (),
    now: datetime = T0,
    cfg: DecideConfig = CFG,
    uid: str = "",
    **observed: Any,
) -> Decision:
    job = Job(JobMeta(name=NAME, namespace=NS, uid=uid), spec, status, {})
    return decide(job, Observed(now=now, pods=tuple(pods), **observed), cfg)


def launched(spec: StreamingJobSpec, now: datetime = T0) -> StreamingJobStatus:
    """Status of a job whose first driver was created and is running."""
    d = run(spec, StreamingJobStatus(), now=now)  # first launch recorded
    d = run(spec, d.status, now=now)  # → launch
    assert d.action == "launch"
    d = run(spec, d.status, [driver(d.status.driver_pod, "Pending")], now=now)
    assert d.status.launch_state == "Created"
    d = run(spec, d.status, [driver(d.status.driver_pod)], now=now)
    assert d.status.phase == "Running"
    return d.status


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)
