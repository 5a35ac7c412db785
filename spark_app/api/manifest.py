"""The job part of a StreamingJob manifest: the one place where YAML becomes a typed job.

The runner reads a whole StreamingJob manifest (the same YAML users `kubectl apply`) and
uses only `spec.job`, `spec.checkpoint`, `spec.sparkConf` and `spec.s3`; the operator owns the other
spec fields. These models are also the source of the CRD schema for their fields, so every
field carries a description and cross-field rules are mirrored as CEL rules.

This module must not import pyspark: the operator imports it too.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from spark_app.api.field_rules import (
    LOCATION,
    check_location,
    location_schema,
)
from spark_app.api.job_spec import JobSpec
from spark_app.api.spec_base import (
    SpecModel,
    secret_key,
    secret_name,
)

API_GROUP = "sparkkafka.dev"
API_VERSION = "v1alpha1"
KIND = "StreamingJob"


class CheckpointSpec(SpecModel):
    """Where the job's state lives. The location is the only lever between restore and
    redeploy: each deployment epoch gets <location>/<namespace>/<name>/epoch-<n>."""

    location: str = Field(
        min_length=1,
        max_length=1024,
        pattern=LOCATION,
        json_schema_extra=location_schema(),
        description="Base URI of checkpoints (file:///mnt/checkpoints on a volume, "
        "s3a://bucket/prefix, ...). Each epoch gets a directory below it.",
    )

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        return check_location(value)


# The environment variables S3A's EnvironmentVariableCredentialsProvider reads; the operator
# fills them from spec.s3.credentialsSecret through secretKeyRef (never an argument or a file).
S3_ACCESS_KEY_ENV, S3_SECRET_KEY_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
_S3A_ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"


class S3CredentialsSecret(SpecModel):
    """A Secret in the job's namespace with an access key pair for the object store."""

    name: str = secret_name("Name of the Secret in the job's namespace.")
    access_key_id_key: str = secret_key("accessKeyId", "Key of the access key id in the Secret.")
    secret_access_key_key: str = secret_key(
        "secretAccessKey", "Key of the secret access key in the Secret."
    )


class S3Spec(SpecModel):
    """The object store behind s3a:// checkpoint and file-sink locations (Spark's S3A
    connector). Credentials come only from a Secret (as environment variables of the driver
    and executors) or, without credentialsSecret, from S3A's default chain (web identity,
    instance profile)."""

    endpoint: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        pattern=r"^https?://[^\s/]+(/.*)?$",
        description="Endpoint URL of an S3-compatible store (http://minio.storage:9000). "
        "Unset: AWS S3 of the region.",
    )
    region: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="Region of the bucket (fs.s3a.endpoint.region). Unset: S3A's default "
        "lookup; set it for S3-compatible stores (us-east-1 is the usual choice).",
    )
    path_style_access: bool = Field(
        default=False,
        description="Address buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint>; "
        "most S3-compatible stores need true.",
    )
    credentials_secret: S3CredentialsSecret | None = Field(
        default=None,
        description="Access key pair by Secret reference. Unset: S3A's default credential "
        "chain (IRSA / web identity, instance profile).",
    )

    def hadoop_conf(self) -> dict[str, str]:
        """The Spark confs (spark.hadoop.fs.s3a.*) for this store: no secret among them."""
        conf = {"spark.hadoop.fs.s3a.path.style.access": str(self.path_style_access).lower()}
        if self.endpoint:
            conf["spark.hadoop.fs.s3a.endpoint"] = self.endpoint
            conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
                self.endpoint.startswith("https://")
            ).lower()
        if self.region:
            conf["spark.hadoop.fs.s3a.endpoint.region"] = self.region
        if self.credentials_secret is not None:
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = _S3A_ENV_PROVIDER
        return conf


class RunnerSpec(BaseModel):
    """The spec fields the runner reads; the operator's fields are ignored here."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    job: JobSpec
    checkpoint: CheckpointSpec
    spark_conf: dict[str, str] = Field(default_factory=dict)
    s3: S3Spec | None = None

    def session_conf(self) -> dict[str, str]:
        """sparkConf with the object store's settings under it (the user's keys win)."""
        return {**(self.s3.hadoop_conf() if self.s3 else {}), **self.spark_conf}


class Metadata(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1)
    namespace: str = "default"


class RunnerManifest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: Literal["StreamingJob"]
    metadata: Metadata
    spec: RunnerSpec

    @model_validator(mode="after")
    def _check(self) -> RunnerManifest:
        expected = f"{API_GROUP}/{API_VERSION}"
        if self.api_version != expected:
            raise ValueError(f"apiVersion must be {expected}, got {self.api_version}")
        return self


class ManifestError(ValueError):
    """A manifest that cannot run, with every problem named by its field path."""


def load_manifest(document: dict[str, Any]) -> RunnerManifest:
    try:
        return RunnerManifest.model_validate(document)
    except ValidationError as exc:
        raise ManifestError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(document)"
        lines.append(f"{path}: {error['msg']}")
    return "invalid StreamingJob manifest:\n  " + "\n  ".join(lines)


def job_checkpoints(base: str, namespace: str, name: str, uid: str = "") -> str:
    """Where one job keeps its epochs' checkpoints: `<base>/<namespace>/<name>/<uid>`. The
    uid keeps a job deleted and created again under the same name apart from the old one
    (its checkpoints, its file sink's directories, its Delta app ids). Without a uid (a
    local run, a job launched by an operator before this layout): `<base>/<namespace>/<name>`."""
    root = f"{base.rstrip('/')}/{namespace}/{name}"
    return f"{root}/{uid}" if uid else root


def checkpoint_location(base: str, namespace: str, name: str, epoch: int, uid: str = "") -> str:
    """The checkpoint directory of one deployment epoch (same epoch = restore)."""
    return f"{job_checkpoints(base, namespace, name, uid)}/epoch-{epoch}"


_EPOCH_TAIL = re.compile(
    r"(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?/epoch-\d+/?$"
)


def epoch_sink_path(path: str, checkpoint: str) -> str | None:
    """A file sink's directory for the query at `checkpoint`: `<path>/<uid>/epoch-<n>`, the
    checkpoint location's own tail (`<path>/epoch-<n>` for a location without uid); None
    for a location that names no epoch.

    Spark's file sink records committed batches by batch id in `<dir>/_spark_metadata` and
    skips any batch id it has seen. A redeploy starts a new checkpoint at batch 0, so in the
    same directory its batches would be silently dropped; each epoch of each job (uid)
    writes its own."""
    tail = _EPOCH_TAIL.search(checkpoint)
    return f"{path.rstrip('/')}{tail.group(0).rstrip('/')}" if tail else None
