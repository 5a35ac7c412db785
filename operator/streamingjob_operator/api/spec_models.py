"""The StreamingJob spec: what the user asks for, the one source of truth for the CRD's spec schema.

The job part (`spec.job`, `spec.checkpoint.location`, `spec.sparkConf`) comes from
`spark_app.api.manifest`, which the runner reads; how the operator treats the job (checkpoint,
restarts, offsets actions, autoscaler) from `policy_models.py`; the pods' settings are here.
Every field carries a description (it becomes `kubectl explain` text) and cross-field rules are
mirrored as CEL rules in `x-kubernetes-validations` so the API server rejects what pydantic
rejects.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from spark_app.api.field_rules import NO_NULL_VALUES, MapValue, check_keys
from spark_app.api.job_spec import JobSpec
from spark_app.api.manifest import S3Spec
from spark_app.api.spec_base import K8S_NAME, SpecModel, secret_key, secret_name
from streamingjob_operator.api.policy_models import (
    DAY,
    AutoscalerSpec,
    CheckpointPolicySpec,
    HandoverSpec,
    OffsetsActionSpec,
    RestartPolicySpec,
    StandbySpec,
)

# Spark memory strings as spark-submit accepts them: 512m, 2g, 1024k, 1t.
_SPARK_MEMORY = r"^[0-9]{1,13}[kmgtKMGT]?$"
# Spark refuses heaps below 450 MiB at start (UnifiedMemoryManager); a pod beyond 1 TiB fits
# no node.
MIN_HEAP_MIB, MAX_MEMORY_MIB = 512, 1024 * 1024
# A CPU quantity: millicores or cores with at most three decimals (the API's precision).
_CPU = r"^([1-9][0-9]{0,6}m|[0-9]{1,3}(\.[0-9]{1,3})?)$"
_ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# A container image reference (the grammar of the distribution/reference library: optional
# registry host[:port]/, lower-case path components, optional :tag and @digest). The pod API
# checks only for surrounding whitespace; the kubelet refuses the rest (InvalidImageName).
_IMAGE = (
    r"^(([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*"
    r"[a-zA-Z0-9]))*(:[0-9]+)?/)?[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)"
    r"[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z]"
    r"[A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
# Spark conf keys: spark.* (spark-submit ignores anything else), no '=' or whitespace.
_SPARK_CONF_KEY = r"^spark\.[A-Za-z0-9_.:/-]{1,250}$"


def memory_mib(value: str) -> float:
    number, unit = int(value.rstrip("kmgtKMGT")), value[-1:].lower()
    factor = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}.get(unit, 1 / (1024 * 1024))
    return number * factor


def cpu_cores(value: str) -> float:
    return int(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _free_form(description: str) -> Any:
    """A Kubernetes object the operator passes through unchanged (kept unknown fields)."""
    return Field(
        default_factory=dict,
        description=description,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class KafkaCASecretSpec(SpecModel):
    """The CA certificate (PEM) that signed the brokers' certificates, from a Secret in the
    job's namespace: mounted as a file in the driver and executors (ssl.ca.location); the
    operator reads it for its own Kafka look-ups (ssl.ca.pem, in memory)."""

    name: str = secret_name(
        "Name of the Secret in the job's namespace that holds the CA certificate."
    )
    key: str = secret_key("ca.crt", "Key of the PEM CA certificate in the Secret.")


class KafkaCredentialsSpec(SpecModel):
    """SASL credentials for the source (and a kafka sink), read from a Secret in the job's
    namespace. The values reach the driver and executors only as environment variables
    (KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD) through secretKeyRef; they never appear in
    the job ConfigMap, the status or the logs. The source, the driver's offset committer,
    the operator's lag reader and a kafka sink all connect with them."""

    secret_name: str = secret_name(
        "Name of the Secret in the job's namespace that holds the credentials."
    )
    username_key: str = secret_key("username", "Key of the SASL user name in the Secret.")
    password_key: str = secret_key("password", "Key of the SASL password in the Secret.")
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        default="SCRAM-SHA-512", description="SASL mechanism (sasl.mechanism)."
    )
    security_protocol: Literal["SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="SASL_SSL", description="Kafka security protocol (security.protocol)."
    )
    ca_secret: KafkaCASecretSpec | None = Field(
        default=None,
        description="The CA that signed the brokers' certificates (SASL_SSL), by Secret "
        "reference. Unset: the image's system CA bundle (a public CA, e.g. a managed service).",
    )


class ResourcesSpec(SpecModel):
    """CPU and memory of one Spark process (driver or executor)."""

    cores: int = Field(default=1, ge=1, le=256, description="CPU cores (pod request).")
    memory: str = Field(
        default="1g",
        max_length=14,
        pattern=_SPARK_MEMORY,
        description="JVM heap as Spark writes it (512m, 2g); at least 512m (Spark refuses "
        "less), heap plus overhead at most 1t.",
    )
    memory_overhead: str = Field(
        default="512m",
        max_length=14,
        pattern=_SPARK_MEMORY,
        description="Off-heap memory added to the heap for the pod's memory request and "
        "limit (Python workers, native buffers).",
    )
    cpu_request: str | None = Field(
        default=None,
        max_length=12,
        pattern=_CPU,
        description="Optional CPU request of the pod (Kubernetes quantity, e.g. 250m) when it "
        "should differ from cores (small clusters). Unset: cores.",
    )
    cpu_limit: str | None = Field(
        default=None,
        max_length=12,
        pattern=_CPU,
        description="Optional CPU limit (Kubernetes quantity), at least the request. Unset: "
        "no CPU limit.",
    )

    @model_validator(mode="after")
    def _check(self) -> ResourcesSpec:
        if memory_mib(self.memory) < MIN_HEAP_MIB:
            raise ValueError(f"memory {self.memory} is below 512m: Spark refuses to start")
        if memory_mib(self.memory) + memory_mib(self.memory_overhead) > MAX_MEMORY_MIB:
            raise ValueError("memory + memoryOverhead exceed 1t: no node fits the pod")
        request = cpu_cores(self.cpu_request) if self.cpu_request else float(self.cores)
        if request <= 0:
            raise ValueError("cpuRequest must be above 0")
        if self.cpu_limit is not None and cpu_cores(self.cpu_limit) < request:
            wanted = self.cpu_request or self.cores
            raise ValueError(f"cpuLimit {self.cpu_limit} is below the CPU request ({wanted})")
        return self


class ExecutorSpec(ResourcesSpec):
    """The executors: pods created by the driver, owned by the driver pod."""

    instances: int = Field(default=1, ge=1, le=1000, description="Number of executors.")


class TolerationSpec(SpecModel):
    """A Kubernetes toleration for the driver and executor pods."""

    key: str | None = Field(
        default=None, max_length=317, description="Taint key; unset matches all keys."
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists or Equal.")
    value: str | None = Field(
        default=None, max_length=63, description="Taint value for operator Equal."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect; unset matches all effects."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3650 * DAY,
        description="How long a NoExecute taint is tolerated.",
    )


class PodTemplateSpec(SpecModel):
    """Escape hatch: merged into the driver pod and the executor pod template. The operator's
    own fields (names, labels it sets, the main container's command, ports and the restart
    policy) win over the template."""

    metadata: dict[str, Any] = _free_form("Labels and annotations added to the pods.")
    spec: dict[str, Any] = _free_form(
        "A partial PodSpec (affinity, priorityClassName, sidecars, securityContext, ...)."
    )


class SparkUISpec(SpecModel):
    """The driver's Spark UI (port 4040), off by default: it costs the driver memory and CPU."""

    enabled: bool = Field(
        default=False,
        description="true runs the Spark UI in the driver (spark.ui.enabled) and creates a "
        "Service <job>-ui selecting the current driver (port 4040, named http; reach it with "
        "kubectl port-forward svc/<job>-ui 4040). Changing it restarts the job (restore).",
    )


class StreamingJobSpec(SpecModel):
    """The desired state of one Spark Structured Streaming job that reads Kafka."""

    image: str = Field(
        min_length=1,
        max_length=1024,
        pattern=_IMAGE,
        description="Container image reference of the driver and executors; it contains "
        "Spark and the project's runner at /opt/streamingjob/run_job.py. A change redeploys "
        "(new epoch, fresh start) under upgradeMode stateless.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Pull policy of the driver and executor images."
    )
    job: JobSpec = Field(description="What the job does: source, optional transform, sink.")
    checkpoint: CheckpointPolicySpec = Field(
        description="Where the job's state lives and how it is restored."
    )
    spark_conf: dict[str, MapValue] = Field(
        default_factory=dict,
        max_length=200,
        description="Extra Spark configuration (spark.* keys). Keys the operator uses for "
        "fencing and placement (spark.master, spark.kubernetes.*pod.name, "
        "spark.driver.host/port, spark.kubernetes.namespace, executor labels, ...) cannot be "
        "overridden, and credentials are refused (they would be visible in the driver's "
        "arguments): use the Secret references (kafkaCredentials, s3.credentialsSecret, env "
        "valueFrom.secretKeyRef).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.all(k, k.startsWith('spark.') && size(k) <= 256)",
                    "message": "keys are Spark settings: spark.<name>, at most 256 characters",
                },
                NO_NULL_VALUES,
            ]
        },
    )
    kafka_credentials: KafkaCredentialsSpec | None = Field(
        default=None,
        description="SASL credentials by Secret reference. Unset: no authentication.",
    )
    sink_kafka_credentials: KafkaCredentialsSpec | None = Field(
        default=None,
        description="SASL credentials (and CA) of the kafka sink, by Secret reference, for a "
        "sink on another cluster (spec.job.sink.bootstrapServers) or writing as another user. "
        "Unset: the sink connects with kafkaCredentials.",
    )
    s3: S3Spec | None = Field(
        default=None,
        description="The object store of s3a:// checkpoint and sink locations: endpoint, "
        "region, path-style access, and credentials by Secret reference.",
    )
    upgrade_mode: Literal["stateless", "last-state"] = Field(
        default="stateless",
        description="stateless: a change to the job (image, job, sparkConf) redeploys into "
        "a new epoch with an empty checkpoint, starting from the group's committed offsets. "
        "last-state: such a change relaunches in the same epoch and restores the checkpoint.",
    )
    restart_nonce: int = Field(
        default=0,
        ge=-(2**53),
        le=2**53,
        description="Change (e.g. increment) to restart the driver in the same epoch: it "
        "restores from the checkpoint. Also resumes a Failed job.",
    )
    redeploy_nonce: int = Field(
        default=0,
        ge=-(2**53),
        le=2**53,
        description="Change to redeploy into a new epoch with a new, empty checkpoint: the "
        "source starts from the group's committed offsets. Also resumes a Failed job.",
    )
    suspend: bool = Field(
        default=False,
        description="true deletes the driver and its executors and keeps the epoch and the "
        "checkpoint. Back to false: stateless jobs redeploy (new epoch), last-state jobs "
        "restore.",
    )
    restart_policy: RestartPolicySpec = Field(
        default_factory=RestartPolicySpec, description="Automatic restarts."
    )
    driver: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="Resources of the driver pod."
    )
    executor: ExecutorSpec = Field(
        default_factory=ExecutorSpec, description="Number and resources of the executors."
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=256,
        description="Extra environment variables (Kubernetes EnvVar) of the driver and "
        "executors. Put secrets in a Secret and use valueFrom.secretKeyRef.",
        json_schema_extra={"items": {"x-kubernetes-preserve-unknown-fields": True}},
    )
    volumes: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra volumes (Kubernetes Volume) of the driver and executors, e.g. the "
        "PVC that holds file:// checkpoints.",
        json_schema_extra={"items": {"x-kubernetes-preserve-unknown-fields": True}},
    )
    volume_mounts: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=64,
        description="Mounts (Kubernetes VolumeMount) of the volumes in the Spark containers.",
        json_schema_extra={"items": {"x-kubernetes-preserve-unknown-fields": True}},
    )
    tolerations: list[TolerationSpec] = Field(
        default_factory=list,
        max_length=64,
        description="Tolerations of the driver and executor pods.",
    )
    node_selector: dict[
        str, Annotated[str, Field(max_length=63, json_schema_extra={"nullable": True})]
    ] = Field(
        default_factory=dict,
        max_length=64,
        description="Node selector of the driver and executor pods.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.all(k, size(k) <= 317)", "message": "label keys are too long"},
                NO_NULL_VALUES,
            ]
        },
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=K8S_NAME,
        description="Service account of the driver. Unset: the operator creates "
        "<job>-driver with a Role that manages only the job's executors and its report "
        "ConfigMap. A named account must grant the same rights itself.",
    )
    pod_template: PodTemplateSpec = Field(
        default_factory=PodTemplateSpec,
        description="Escape hatch merged into the driver and executor pods.",
    )
    offsets_action: OffsetsActionSpec | None = Field(
        default=None,
        description="List, reset or alter the consumer group's offsets while suspended "
        "(runs once per nonce; refused while the job runs). Changing it never restarts "
        "anything by itself.",
    )
    spark_ui: SparkUISpec = Field(
        default_factory=SparkUISpec,
        alias="sparkUI",
        description="The driver's Spark UI and its Service (off by default).",
    )
    autoscaler: AutoscalerSpec = Field(
        default_factory=AutoscalerSpec,
        description="Executors that follow the load (off by default). Changing it restarts "
        "nothing; a recommended count is applied as a restart in the same epoch.",
    )
    handover: HandoverSpec = Field(
        default_factory=HandoverSpec,
        description="How a redeploy or a restartNonce replaces the running driver: cold "
        "(default; stop, then start) or warm (start the next driver first, waiting, and hand "
        "over once it is ready). Changing it restarts nothing.",
    )
    standby: StandbySpec = Field(
        default_factory=StandbySpec,
        description="A warm standby driver for failover (off by default): it takes over a "
        "lost driver from the checkpoint as soon as that one is confirmed gone. Changing it "
        "restarts nothing.",
    )

    @field_validator("spark_conf")
    @classmethod
    def _conf_keys(cls, value: dict[str, str]) -> dict[str, str]:
        return check_keys(value, _SPARK_CONF_KEY, "Spark conf")

    @field_validator("volume_mounts")
    @classmethod
    def _mounted_volumes(
        cls, value: list[dict[str, Any]], info: ValidationInfo
    ) -> list[dict[str, Any]]:
        """Each mount names one of spec.volumes (the schema cannot say it: the items are
        untyped in the released CRD, and CEL sees no field of an untyped item)."""
        volumes = info.data.get("volumes")
        if volumes is None:
            return value  # volumes is itself invalid (reported there)
        names = {v.get("name") for v in volumes if isinstance(v.get("name"), str)}
        for i, mount in enumerate(value):
            name = mount.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(
                    f"volumeMounts[{i}] names no volume: set its name to one of spec.volumes[].name"
                )
            if name not in names:
                raise ValueError(
                    f"volumeMounts[{i}] mounts volume {name[:100]!r}, which spec.volumes does "
                    f"not have: add it to spec.volumes or correct the name (volumes: "
                    f"{sorted(names)[:10]})"
                )
        return value
