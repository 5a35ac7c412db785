"""Validation: the one place that decides whether a spec can run, and says why not.

Three layers, each naming the spec field at fault and the fix:

1. the schema (the CRD generated from the models, with its CEL rules) refuses most bad input
   at `kubectl apply`; `parse` applies the same models to what the API server stored (an older
   CRD, a hand-made object);
2. `check_spec`: rules without I/O that the schema cannot express (reserved Spark confs,
   credentials in plain options, the size of the job's ConfigMap);
3. checks against the cluster, whose I/O the reconciler does through `k8s.py` (validate.py)
   and whose answers are judged here: the Secrets the pods read (`check_secrets`), and, in
   dry_run.py, a server-side dry run of the pods the job would create (`dry_run_pods` →
   `rejection_problems`), which
   catches what only the pod API knows (free-form env, volumes, volumeMounts, podTemplate,
   quantities, tolerations, a missing service account, admission policies).

A spec with a problem never launches: the job goes to phase Invalid with a Degraded condition
(reason InvalidSpec) and an InvalidSpec Event whose message names each field and its fix
(`decide.invalid`). Pure: no kopf, no kubernetes client, no API calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import ValidationError

from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.kafka.config import job_options
from streamingjob_operator.api.models import StreamingJobSpec
from streamingjob_operator.children.driver_pod import (
    build_job_configmap,
)
from streamingjob_operator.children.pod_parts import (
    secret_references,
)

MAX_MESSAGE = 1024  # what one status message / Event carries (the problems, clipped)
MAX_PROBLEM = 300
CONFIGMAP_LIMIT = 1024 * 1024  # the API server's limit on a ConfigMap's data
CONFIGMAP_MARGIN = 16 * 1024  # room for metadata


class InvalidJobError(ValueError):
    """The spec cannot run; `field` names the culprit (spec.<path>), `fix` says what to do."""

    def __init__(self, field: str, message: str, fix: str = "") -> None:
        self.field = field
        self.message = _clip(message, MAX_PROBLEM)
        self.fix = fix
        super().__init__(f"{field}: {self.message}" + (f" (fix: {fix})" if fix else ""))


def summary(problems: list[InvalidJobError]) -> str:
    """One message for status, condition and Event: every problem, bounded."""
    return _clip("; ".join(str(p) for p in problems), MAX_MESSAGE)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- 1. the models ------------------------------------------------------------------------


def parse(spec: dict[str, Any]) -> tuple[StreamingJobSpec | None, list[InvalidJobError]]:
    """The spec as the models read it, or the problems naming every bad field."""
    try:
        return StreamingJobSpec.model_validate(spec), []
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            path = _spec_path(error["loc"])
            if error["type"] == "string_type" and error.get("input", "") is None:
                # a null in a map of strings (an older CRD pruned it: the key was dropped)
                problems.append(InvalidJobError(path, "is null", "quote the value or remove it"))
                continue
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(
                InvalidJobError(
                    path, message, f"correct {path} (kubectl explain streamingjob.{path})"
                )
            )
        return None, problems


def _spec_path(loc: tuple[Any, ...]) -> str:
    path = "spec"
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(part)):
            path += f".{part}"
        else:
            path += f"[{str(part)[:100]!r}]"
    return path


# --- 2. rules without I/O --------------------------------------------------------------------

# sparkConf keys that would let a manifest escape the operator's control, each with the
# field to use instead. A key ending in "." is a prefix. The operator sets most of them itself
# (fencing: names, labels, ports; placement; the per-job ServiceAccount); the others would
# bypass a field the operator checks (image, resources, volumes, nodes). docs/operator/spec.md
# lists them; a unit test checks every entry is refused.
SPARK_CONF_GUARDRAILS: dict[str, str] = {
    "spark.master": "the operator runs every job against its cluster's API server",
    "spark.submit.deployMode": "the driver is the operator's pod (client mode)",
    "spark.app.name": "the application is named after the StreamingJob",
    "spark.kubernetes.context": "the driver uses its in-cluster account",
    "spark.kubernetes.namespace": "a job runs in its StreamingJob's namespace",
    "spark.kubernetes.authenticate.": "API credentials and service accounts are the "
    "operator's (a per-job ServiceAccount; spec.serviceAccountName to choose another)",
    "spark.kubernetes.container.image": "use spec.image",
    "spark.kubernetes.executor.container.image": "use spec.image",
    "spark.kubernetes.container.image.pullPolicy": "use spec.imagePullPolicy",
    "spark.kubernetes.driver.": "the driver pod is built by the operator: use spec.driver, "
    "spec.env, spec.volumes, spec.podTemplate",
    "spark.driver.host": "executors reach the driver through its Service",
    "spark.driver.port": "executors reach the driver through its Service",
    "spark.driver.blockManager.port": "executors reach the driver through its Service",
    "spark.driver.bindAddress": "executors reach the driver through its Service",
    "spark.driver.memory": "use spec.driver.memory",
    "spark.executor.instances": "use spec.executor.instances (or kubectl scale)",
    "spark.executor.cores": "use spec.executor.cores",
    "spark.executor.memory": "use spec.executor.memory",
    "spark.executor.memoryOverhead": "use spec.executor.memoryOverhead",
    "spark.dynamicAllocation.": "the executor count is spec.executor.instances",
    "spark.kubernetes.executor.request.cores": "use spec.executor.cpuRequest",
    "spark.kubernetes.executor.limit.cores": "use spec.executor.cpuLimit",
    "spark.kubernetes.executor.useDriverPodIP": "executors reach the driver through its Service",
    "spark.kubernetes.executor.podNamePrefix": "executor names fence the job's attempts",
    "spark.kubernetes.executor.podTemplateFile": "use spec.podTemplate",
    "spark.kubernetes.executor.podTemplateContainerName": "use spec.podTemplate",
    "spark.kubernetes.executor.deleteOnTermination": "executors go with their driver",
    "spark.kubernetes.executor.disableConfigMap": "the driver's Role has no ConfigMap rights "
    "beyond its report",
    "spark.kubernetes.executor.label.": "executor labels fence the job's attempts: use "
    "spec.podTemplate.metadata.labels",
    "spark.kubernetes.executor.secrets.": "use spec.volumes / spec.env[].valueFrom",
    "spark.kubernetes.executor.secretKeyRef.": "use spec.env[].valueFrom.secretKeyRef",
    "spark.kubernetes.executor.volumes.": "use spec.volumes and spec.volumeMounts",
    "spark.kubernetes.executor.node.selector.": "use spec.nodeSelector",
    "spark.kubernetes.node.selector.": "use spec.nodeSelector",
    "spark.kubernetes.file.upload.path": "the job's code is in its image",
    "spark.ui.enabled": "use spec.sparkUI.enabled",
    "spark.sql.streaming.checkpointLocation": "use spec.checkpoint.location",
}


def guardrail(key: str) -> str | None:
    """Why `key` may not be set in sparkConf (and what to use instead), or None."""
    for reserved, fix in SPARK_CONF_GUARDRAILS.items():
        if key == reserved or (reserved.endswith(".") and key.startswith(reserved)):
            return fix
    return None


# Keys whose values are credentials. A credential in sparkConf reaches the driver's command
# line (visible to everyone who can read pods); in job options it reaches the job ConfigMap.
SECRET_KEY = re.compile(
    r"passw(or)?d|secret|token|jaas|credentials?$|private[._-]?key|access[._-]?key|"
    r"account\.key|(^|[._-])key$|api[._-]?key|sasl\.username|sasl\.oauthbearer\.config",
    re.IGNORECASE,
)
# ...except those that name where a credential is, not the credential.
_NOT_SECRET = re.compile(
    r"(provider|providers|file|location|type|path|enabled|pullsecrets)$", re.IGNORECASE
)

_S3_FIX = (
    "remove it: give the object store's access key pair by Secret reference in "
    "spec.s3.credentialsSecret (it reaches the pods only as secretKeyRef env vars)"
)
_KAFKA_FIX = (
    "remove it: give SASL credentials by Secret reference in spec.kafkaCredentials (they "
    "reach the pods only as secretKeyRef env vars)"
)
_ENV_FIX = (
    "remove it: put the value in a Secret and pass it as an environment variable "
    "(spec.env[].valueFrom.secretKeyRef); Hadoop settings (spark.hadoop.*) can read it "
    "as ${env.NAME}"
)


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key)) and not _NOT_SECRET.search(key)


def _secret_fix(key: str) -> str:
    lowered = key.lower()
    if "s3a" in lowered or "aws" in lowered:
        return _S3_FIX
    if "sasl" in lowered or "jaas" in lowered or "kafka" in lowered:
        return _KAFKA_FIX
    return _ENV_FIX


def check_source(spec: StreamingJobSpec) -> list[InvalidJobError]:
    """The question the runner's preflight asks before Spark starts (`spark_app.runner.
    preflight`: `SourceOptions.parse` of the options the driver's source gets), asked before
    launching: a contradiction among the source's fields fails here, not in the driver. The
    credentials' environment is left out: no option it sets can be refused."""
    try:
        SourceOptions.parse(job_options(spec.job, env={}))
    except OptionError as exc:
        return [
            InvalidJobError(
                "spec.job.source",
                f"the job's source refuses its options: {exc}",
                "correct spec.job.source (kubectl explain streamingjob.spec.job.source)",
            )
        ]
    return []


def check_sink_credentials(spec: StreamingJobSpec) -> list[InvalidJobError]:
    """spec.sinkKafkaCredentials only where a Kafka sink connects with them."""
    sink = spec.job.sink.format
    if spec.sink_kafka_credentials is None or sink == "kafka":
        return []
    return [
        InvalidJobError(
            "spec.sinkKafkaCredentials",
            f"are the kafka sink's credentials, but the job's sink is {sink}",
            "remove spec.sinkKafkaCredentials, or set spec.job.sink.format: kafka",
        )
    ]


def check_spec(spec: StreamingJobSpec) -> list[InvalidJobError]:
    """Problems the schema cannot express (no I/O)."""
    problems = [*check_source(spec), *check_sink_credentials(spec)]
    for key in sorted(spec.spark_conf):
        where = f"spec.sparkConf[{key!r}]"
        if (fix := guardrail(key)) is not None:
            problems.append(
                InvalidJobError(
                    where,
                    "is reserved: it would escape the operator's control",
                    f"remove it ({fix})",
                )
            )
        elif is_secret_key(key):
            problems.append(
                InvalidJobError(
                    where,
                    "looks like a credential: it would be visible in the driver's arguments "
                    "to everyone who can read pods",
                    _secret_fix(key),
                )
            )
    for i, mount in enumerate(spec.volume_mounts):
        path = mount.get("mountPath")
        if isinstance(path, str) and not path.startswith("/"):
            # the pod API accepts it; the container runtime refuses to start the container
            problems.append(
                InvalidJobError(
                    f"spec.volumeMounts[{i}].mountPath",
                    f"{path[:100]!r} is not an absolute path",
                    "give an absolute path such as /data",
                )
            )
    source = spec.job.source
    for key in sorted(source.kafka):
        if is_secret_key(key):
            problems.append(
                InvalidJobError(
                    f"spec.job.source.kafka[{key!r}]",
                    "looks like a credential: it would be stored in the job ConfigMap",
                    _KAFKA_FIX,
                )
            )
    for key in sorted(spec.job.sink.options):
        if is_secret_key(key):
            problems.append(
                InvalidJobError(
                    f"spec.job.sink.options[{key!r}]",
                    "looks like a credential: it would be stored in the job ConfigMap",
                    _secret_fix(key) if spec.job.sink.format != "kafka" else _KAFKA_FIX,
                )
            )
    return problems


def check_size(job: dict[str, Any], spec: StreamingJobSpec) -> list[InvalidJobError]:
    """The job ConfigMap (the manifest and the executor pod template) must fit the API
    server's 1 MiB; the largest spec field is named."""
    data = build_job_configmap(job, spec)["data"]
    size = sum(len(v.encode()) for v in data.values())
    if size <= CONFIGMAP_LIMIT - CONFIGMAP_MARGIN:
        return []
    dumped = spec.model_dump(mode="json", by_alias=True)
    largest = max(dumped, key=lambda k: len(yaml.safe_dump(dumped[k])))
    return [
        InvalidJobError(
            f"spec.{largest}",
            f"the job's ConfigMap would hold {size} bytes, more than the API server's "
            f"{CONFIGMAP_LIMIT}",
            f"shrink spec.{largest}",
        )
    ]


# --- 3. answers of the cluster -----------------------------------------------------------


def check_secrets(
    spec: StreamingJobSpec,
    namespace: str,
    secret_data: Callable[[str, str], dict[str, str] | None],
) -> list[InvalidJobError]:
    """Every Secret the pods read exists with its keys (`secret_data(namespace, name)`:
    the decoded data, None when absent)."""
    problems = []
    for name_field, secret, keys in secret_references(spec):
        data = secret_data(namespace, secret)
        if data is None:
            problems.append(
                InvalidJobError(
                    name_field,
                    f"Secret {secret!r} not found in namespace {namespace}",
                    f"create it, or correct {name_field}",
                )
            )
            continue
        problems += [
            InvalidJobError(
                key_field,
                f"Secret {secret!r} has no key {key!r}",
                f"add the key to the Secret, or correct {key_field}",
            )
            for key_field, key in keys.items()
            if key not in data
        ]
    return problems
