"""The pod parts the driver pod, the executor pod template and the cleanup Job share: resources,
credentials (only as `secretKeyRef` env), the Kafka and schema registry CA volumes, scratch
volumes for a read-only root filesystem, the restricted security contexts, the merge of the
user's podTemplate, node avoidance. Pure: plain dicts."""

from __future__ import annotations

import copy
import re
from typing import Any

from spark_app.api.iceberg_spec import CREDENTIAL_ENV as CATALOG_CREDENTIAL_ENV
from spark_app.api.manifest import S3_ACCESS_KEY_ENV, S3_SECRET_KEY_ENV
from spark_app.api.registry_spec import RegistryCASecret, RegistryCredentialsSecret
from spark_app.kafka.config import (
    ENV_REGISTRY_PASSWORD,
    ENV_REGISTRY_USERNAME,
    REGISTRY_CA_DIR,
    SINK_ENV_PREFIX,
    SOURCE_ENV_PREFIX,
)
from streamingjob_operator.api.models import StreamingJobSpec
from streamingjob_operator.api.naming import LABEL_DRIVER, job_selector
from streamingjob_operator.api.spec_models import KafkaCredentialsSpec

SPARK_UID = 185  # the spark user of Apache Spark images
KAFKA_CA_VOLUME = "streamingjob-kafka-ca"
KAFKA_CA_DIR = "/etc/streamingjob-kafka-ca"  # not below CONFIG_DIR: a ConfigMap volume
KAFKA_CA_FILE = f"{KAFKA_CA_DIR}/ca.crt"
SINK_CA_VOLUME = "streamingjob-kafka-sink-ca"  # spec.sinkKafkaCredentials.caSecret
SINK_CA_DIR = "/etc/streamingjob-kafka-sink-ca"
SINK_CA_FILE = f"{SINK_CA_DIR}/ca.crt"
REGISTRY_CA_VOLUME = "streamingjob-registry-ca"  # at REGISTRY_CA_DIR (spark_app.kafka.config)
# Writable directories of a container whose root filesystem is read-only (emptyDirs): Spark's
# local dirs and work dir, Python's and the JVM's temporary files, the runner's work files.
SCRATCH_VOLUME = "streamingjob-scratch"
SCRATCH_MOUNTS = {"tmp": "/tmp", "work": "/opt/streamingjob/work", "home": "/home/spark"}


def spark_memory_mib(value: str) -> int:
    match = re.fullmatch(r"([0-9]+)([kmgtKMGT]?)", value)
    if not match:
        raise ValueError(f"not a Spark memory size: {value!r}")
    number, unit = int(match.group(1)), match.group(2).lower()
    factor = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]
    return max(int(number * factor), 1)


def pod_resources(
    cores: int, memory: str, overhead: str, cpu_limit: str | None, cpu_request: str | None = None
) -> dict[str, Any]:
    total = spark_memory_mib(memory) + spark_memory_mib(overhead)
    limits: dict[str, str] = {"memory": f"{total}Mi"}
    if cpu_limit:
        limits["cpu"] = cpu_limit
    requests = {"cpu": cpu_request or str(cores), "memory": f"{total}Mi"}
    return {"requests": requests, "limits": limits}


def _from_secret(env: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": env, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _sasl_env(
    creds: KafkaCredentialsSpec | None, prefix: str, ca_file: str
) -> list[dict[str, Any]]:
    """`creds` as the environment variables `prefix` names (spark_app.kafka.config: the
    source's KAFKA_*, a Kafka sink's own KAFKA_SINK_*), the CA as the file `ca_file`."""
    if creds is None:
        return []
    env = [
        _from_secret(f"{prefix}SASL_USERNAME", creds.secret_name, creds.username_key),
        _from_secret(f"{prefix}SASL_PASSWORD", creds.secret_name, creds.password_key),
        {"name": f"{prefix}SASL_MECHANISM", "value": creds.sasl_mechanism},
        {"name": f"{prefix}SECURITY_PROTOCOL", "value": creds.security_protocol},
    ]
    if creds.ca_secret is not None:
        env.append({"name": f"{prefix}SSL_CA_LOCATION", "value": ca_file})
    return env


def _ca_volume(name: str, secret: str, key: str) -> dict[str, Any]:
    """One key of a CA Secret as the file ca.crt (the CA is no credential, but it comes by
    Secret reference like the credentials it goes with)."""
    return {
        "name": name,
        "secret": {
            "secretName": secret,
            "items": [{"key": key, "path": "ca.crt"}],
            "defaultMode": 0o444,
        },
    }


def _ca_volumes(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    """The Kafka CA at KAFKA_CA_FILE, the Kafka sink's at SINK_CA_FILE, the schema
    registry's at REGISTRY_CA_FILE."""
    volumes = []
    for creds, volume in (
        (spec.kafka_credentials, KAFKA_CA_VOLUME),
        (spec.sink_kafka_credentials, SINK_CA_VOLUME),
    ):
        if creds is not None and creds.ca_secret is not None:
            volumes.append(_ca_volume(volume, creds.ca_secret.name, creds.ca_secret.key))
    if (registry_ca := _registry_ca(spec)) is not None:
        volumes.append(_ca_volume(REGISTRY_CA_VOLUME, registry_ca.name, registry_ca.key))
    return volumes


def _ca_mounts(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    where = {
        KAFKA_CA_VOLUME: KAFKA_CA_DIR,
        SINK_CA_VOLUME: SINK_CA_DIR,
        REGISTRY_CA_VOLUME: REGISTRY_CA_DIR,
    }
    return [
        {"name": v["name"], "mountPath": where[v["name"]], "readOnly": True}
        for v in _ca_volumes(spec)
    ]


def scratch_volumes() -> list[dict[str, Any]]:
    return [{"name": f"{SCRATCH_VOLUME}-{key}", "emptyDir": {}} for key in SCRATCH_MOUNTS]


def scratch_mounts() -> list[dict[str, Any]]:
    return [
        {"name": f"{SCRATCH_VOLUME}-{key}", "mountPath": path}
        for key, path in SCRATCH_MOUNTS.items()
    ]


def pod_volumes(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    """The volumes every Spark pod of the job has (before the user's)."""
    return [*_ca_volumes(spec), *scratch_volumes()]


def pod_mounts(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    return [*_ca_mounts(spec), *scratch_mounts()]


def s3_env(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    """The object store's access key pair, from its Secret, as the environment variables
    S3A reads (the runner selects that provider; spark_app.api.manifest.S3Spec)."""
    creds = spec.s3.credentials_secret if spec.s3 else None
    if creds is None:
        return []
    return [
        _from_secret(S3_ACCESS_KEY_ENV, creds.name, creds.access_key_id_key),
        _from_secret(S3_SECRET_KEY_ENV, creds.name, creds.secret_access_key_key),
    ]


def _registry_secret(spec: StreamingJobSpec) -> RegistryCredentialsSecret | None:
    value = spec.job.source.value
    registry = value.schema_registry if value is not None else None
    return registry.credentials_secret if registry is not None else None


def _registry_ca(spec: StreamingJobSpec) -> RegistryCASecret | None:
    value = spec.job.source.value
    registry = value.schema_registry if value is not None else None
    return registry.ca_secret if registry is not None else None


REGISTRY_SECRET_FIELD = "spec.job.source.value.schemaRegistry.credentialsSecret"
CATALOG_SECRET_FIELD = "spec.job.sink.catalog.credentialsSecret"
REGISTRY_CA_FIELD = "spec.job.source.value.schemaRegistry.caSecret"


def registry_env(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    """The schema registry's basic-auth pair, from its Secret: the driver resolves the reader
    schema, the executors fetch writer schemas by id (spark_app.kafka.config reads them)."""
    creds = _registry_secret(spec)
    if creds is None:
        return []
    return [
        _from_secret(ENV_REGISTRY_USERNAME, creds.name, creds.username_key),
        _from_secret(ENV_REGISTRY_PASSWORD, creds.name, creds.password_key),
    ]


def catalog_env(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    """The Iceberg catalog's token or database password, from its Secret: the driver commits
    the table (spark_app.sinks.iceberg_sink reads it)."""
    catalog = spec.job.sink.catalog
    creds = catalog.credentials_secret if catalog is not None else None
    return [] if creds is None else [_from_secret(CATALOG_CREDENTIAL_ENV, creds.name, creds.key)]


def credential_sources(spec: StreamingJobSpec) -> dict[str, list[dict[str, Any]]]:
    """The job's credentials as env vars (each from a secretKeyRef), by the spec field
    they come from."""
    source, sink = spec.kafka_credentials, spec.sink_kafka_credentials
    return {
        "spec.kafkaCredentials": _sasl_env(source, SOURCE_ENV_PREFIX, KAFKA_CA_FILE),
        "spec.sinkKafkaCredentials": _sasl_env(sink, SINK_ENV_PREFIX, SINK_CA_FILE),
        "spec.s3": s3_env(spec),
        REGISTRY_SECRET_FIELD: registry_env(spec),
        CATALOG_SECRET_FIELD: catalog_env(spec),
    }


def credential_env(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    """Every credential of the job, each an env var from a secretKeyRef."""
    return [entry for entries in credential_sources(spec).values() for entry in entries]


def secret_references(spec: StreamingJobSpec) -> list[tuple[str, str, dict[str, str]]]:
    """(spec field of the Secret's name, Secret name, {spec field of a key: key}) for every
    Secret the job's pods read: what validation checks before a launch."""
    refs = [
        *_kafka_references(spec.kafka_credentials, "spec.kafkaCredentials"),
        *_kafka_references(spec.sink_kafka_credentials, "spec.sinkKafkaCredentials"),
    ]
    if spec.s3 is not None and spec.s3.credentials_secret is not None:
        c = spec.s3.credentials_secret
        refs.append(
            (
                "spec.s3.credentialsSecret.name",
                c.name,
                {
                    "spec.s3.credentialsSecret.accessKeyIdKey": c.access_key_id_key,
                    "spec.s3.credentialsSecret.secretAccessKeyKey": c.secret_access_key_key,
                },
            )
        )
    if (r := _registry_secret(spec)) is not None:
        refs.append(
            (
                f"{REGISTRY_SECRET_FIELD}.name",
                r.name,
                {
                    f"{REGISTRY_SECRET_FIELD}.usernameKey": r.username_key,
                    f"{REGISTRY_SECRET_FIELD}.passwordKey": r.password_key,
                },
            )
        )
    if (ca := _registry_ca(spec)) is not None:
        refs.append((f"{REGISTRY_CA_FIELD}.name", ca.name, {f"{REGISTRY_CA_FIELD}.key": ca.key}))
    catalog = spec.job.sink.catalog
    if catalog is not None and (login := catalog.credentials_secret) is not None:
        keys = {f"{CATALOG_SECRET_FIELD}.key": login.key}
        refs.append((f"{CATALOG_SECRET_FIELD}.name", login.name, keys))
    return refs


def _kafka_references(
    creds: KafkaCredentialsSpec | None, field: str
) -> list[tuple[str, str, dict[str, str]]]:
    if creds is None:
        return []
    keys = {f"{field}.usernameKey": creds.username_key, f"{field}.passwordKey": creds.password_key}
    refs = [(f"{field}.secretName", creds.secret_name, keys)]
    if (ca := creds.ca_secret) is not None:
        refs.append((f"{field}.caSecret.name", ca.name, {f"{field}.caSecret.key": ca.key}))
    return refs


def container_security() -> dict[str, Any]:
    """The `restricted` Pod Security Standard, and a read-only root filesystem: what Spark,
    Python and the runner write goes to emptyDirs (SCRATCH_MOUNTS)."""
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": SPARK_UID,
        "runAsGroup": SPARK_UID,
        "fsGroup": SPARK_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _merge_named(base: list[Any], ours: list[Any]) -> list[Any]:
    """Merge lists of named objects (containers, env, volumes): ours wins per name."""
    result = [copy.deepcopy(item) for item in base]
    index = {item.get("name"): i for i, item in enumerate(result) if isinstance(item, dict)}
    for item in ours:
        name = item.get("name") if isinstance(item, dict) else None
        if name is not None and name in index:
            result[index[name]] = merge(result[index[name]], item)
        else:
            result.append(copy.deepcopy(item))
    return result


def merge(base: Any, ours: Any) -> Any:
    """Deep-merge `ours` over a user template: dicts merge, named lists merge by name."""
    if isinstance(base, dict) and isinstance(ours, dict):
        out = copy.deepcopy(base)
        for key, value in ours.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(ours, list):
        if all(isinstance(i, dict) and "name" in i for i in [*base, *ours]):
            return _merge_named(base, ours)
        return copy.deepcopy(ours) if ours else copy.deepcopy(base)
    return copy.deepcopy(ours)


def spec_tolerations(spec: StreamingJobSpec) -> list[dict[str, Any]]:
    return [t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations]


def avoiding(pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """`pod` (a Pod or pod template) kept off `nodes`: a required node affinity term ANDed
    into each of the user's terms (they are ORed), or the only term."""
    if not nodes:
        return pod
    spec = pod.setdefault("spec", {})
    required = (
        spec.setdefault("affinity", {})
        .setdefault("nodeAffinity", {})
        .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    terms = required.setdefault("nodeSelectorTerms", []) or [{}]
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(nodes)}
    for term in terms:
        term.setdefault("matchExpressions", []).append(dict(away))
    required["nodeSelectorTerms"] = terms
    return pod


def apart_from_other_drivers(pod: dict[str, Any], job: str) -> dict[str, Any]:
    """`pod` placed, where the scheduler can, on a node without the pods of another driver
    of the job (that driver and its executors): a preferred pod anti-affinity term added to
    the user's. `mismatchLabelKeys` (Kubernetes 1.33) selects the job's pods whose driver
    label differs from this pod's; a node lost then takes one driver's pods, not both."""
    preferred = (
        pod.setdefault("spec", {})
        .setdefault("affinity", {})
        .setdefault("podAntiAffinity", {})
        .setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
    )
    preferred.append(
        {
            "weight": 100,
            "podAffinityTerm": {
                "labelSelector": {"matchLabels": job_selector(job)},
                "mismatchLabelKeys": [LABEL_DRIVER],
                "topologyKey": "kubernetes.io/hostname",
            },
        }
    )
    return pod
