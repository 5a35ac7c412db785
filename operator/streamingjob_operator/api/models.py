"""The StreamingJob API, the one source of truth for the CRD schema: its names, the whole object
as the API server returns it, and parsing. The spec models (what the user asks for) are in
`spec_models.py` and `policy_models.py`, the status models (what the operator records) in
`status_models.py`; all are re-exported here, the module the rest of the operator imports.

`python -m streamingjob_operator.api.crd` renders these models into `crds/streamingjob.yaml`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spark_app.api.manifest import API_GROUP, API_VERSION, KIND
from streamingjob_operator.api.policy_models import (
    AutoscalerSpec,
    BackoffSpec,
    CheckpointPolicySpec,
    OffsetsActionSpec,
    OffsetsPartitionSpec,
    RestartPolicySpec,
)
from streamingjob_operator.api.spec_models import (
    ExecutorSpec,
    KafkaCASecretSpec,
    KafkaCredentialsSpec,
    PodTemplateSpec,
    ResourcesSpec,
    SparkUISpec,
    StreamingJobSpec,
    TolerationSpec,
)
from streamingjob_operator.api.status_models import StreamingJobStatus
from streamingjob_operator.api.status_records import (
    AutoscalerDecisionStatus,
    AutoscalerStatus,
    Condition,
    HistoryEntry,
    OffsetsActionStatus,
    OffsetsPartitionResult,
    ReconcileFailure,
    WarningRecord,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "PLURAL",
    "SHORT_NAME",
    "SINGULAR",
    "AutoscalerDecisionStatus",
    "AutoscalerSpec",
    "AutoscalerStatus",
    "BackoffSpec",
    "CheckpointPolicySpec",
    "Condition",
    "ExecutorSpec",
    "HistoryEntry",
    "InvalidSpecError",
    "KafkaCASecretSpec",
    "KafkaCredentialsSpec",
    "OffsetsActionSpec",
    "OffsetsActionStatus",
    "OffsetsPartitionResult",
    "OffsetsPartitionSpec",
    "PodTemplateSpec",
    "ReconcileFailure",
    "ResourcesSpec",
    "RestartPolicySpec",
    "SparkUISpec",
    "StreamingJob",
    "StreamingJobSpec",
    "StreamingJobStatus",
    "TolerationSpec",
    "WarningRecord",
    "parse_spec",
    "parse_status",
]

PLURAL = "streamingjobs"
SINGULAR = "streamingjob"
SHORT_NAME = "sj"


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")


class StreamingJob(BaseModel):
    """A whole StreamingJob object as the API server returns it."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: Literal["StreamingJob"]
    metadata: ObjectMeta
    spec: StreamingJobSpec
    status: StreamingJobStatus = Field(default_factory=StreamingJobStatus)


class InvalidSpecError(ValueError):
    """The spec failed validation; the message names each field path."""


def parse_spec(spec: dict[str, Any]) -> StreamingJobSpec:
    """Validates a spec; the error names every bad field as spec.<path>."""
    try:
        return StreamingJobSpec.model_validate(spec)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            path = ".".join(["spec", *(str(part) for part in error["loc"])])
            problems.append(f"{path}: {error['msg']}")
        raise InvalidSpecError("; ".join(problems)) from None


def parse_status(status: dict[str, Any] | None) -> StreamingJobStatus:
    """Status is ours, but tolerate anything (older operator versions, hand edits)."""
    try:
        return StreamingJobStatus.model_validate(status or {})
    except ValidationError:
        return StreamingJobStatus()
