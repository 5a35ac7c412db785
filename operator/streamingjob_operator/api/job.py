"""A StreamingJob as one reconcile step works on it: its metadata, its parsed spec and status,
read once from the object the API server returned (observe.py) and passed through validate,
decide, act and record. The raw object stays beside them for what is built for the API server
(the children's builders, status writes) and for the kopf handlers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamingjob_operator.api.spec_models import StreamingJobSpec
from streamingjob_operator.api.status_models import StreamingJobStatus


@dataclass(frozen=True)
class JobMeta:
    name: str
    namespace: str
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    deleting: bool = False  # metadata.deletionTimestamp is set
    annotations: dict[str, str] = field(default_factory=dict)
    # who wrote which field (the autoscaler names a foreign scale's writer, the offsets action
    # its requester): the API server's entries as they are
    managed_fields: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> JobMeta:
        return cls(
            name=metadata["name"],
            namespace=metadata["namespace"],
            uid=metadata.get("uid") or "",
            generation=int(metadata.get("generation") or 0),
            resource_version=metadata.get("resourceVersion") or "",
            deleting=bool(metadata.get("deletionTimestamp")),
            annotations=dict(metadata.get("annotations") or {}),
            managed_fields=tuple(metadata.get("managedFields") or ()),
        )

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass(frozen=True)
class Job:
    """A job whose spec parses (one that does not is Invalid before anything else)."""

    meta: JobMeta
    spec: StreamingJobSpec
    status: StreamingJobStatus
    body: dict[str, Any]  # as the API server returned it: for the bodies built from it

    def written(self, body: dict[str, Any], status: StreamingJobStatus) -> Job:
        """The job after its status write, as the API server returned it."""
        return Job(JobMeta.of(body["metadata"]), self.spec, status, body)
