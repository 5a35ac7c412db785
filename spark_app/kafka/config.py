"""Kafka client settings in one place, for the driver, the source and the operator.

* The credentials contract: the operator gives the driver and executor pods SASL settings as
  environment variables (values by `secretKeyRef`) and the CA that signed the brokers'
  certificates as a file (a Secret volume, `KAFKA_SSL_CA_LOCATION`); every client built from
  a job reads them back as librdkafka properties through `CREDENTIAL_ENV`. The operator,
  which reads the Secrets itself, passes the CA in memory instead (`KAFKA_SSL_CA_PEM`).
* A Kafka sink on another cluster (or as another user) has credentials of its own
  (`spec.sinkKafkaCredentials`): the same contract under `SINK_CREDENTIAL_ENV`'s names;
  `sink_client` gives the sink's client its cluster and credentials (its own, else the
  source's).
* `source_options`: a job's `spec.job.source` as the `kafka_checkpointed` source's Spark
  options. The driver starts its query with them and the operator parses the same options
  (`spark_app.api.options.SourceOptions`) for its own look-ups (`spark_app.kafka.metadata`),
  so both talk to Kafka with one configuration. With `spec.job.source.value` it adds the typed
  records' options (valueFormat, schemaRegistryUrl, ...), with `spec.job.source.key` the
  key's (keyFormat, keySubject, ...); the registry's basic-auth
  credentials come only from the environment (`REGISTRY_CREDENTIAL_ENV`, set by the operator
  from the Secret through `secretKeyRef`), like Kafka's; its CA Secret is a file at
  `REGISTRY_CA_FILE` (schemaRegistryCaFile). `job_options` adds
  `spec.job.deadLetter`.

Pure (no Kafka or Spark imports): the operator imports it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from spark_app.api.job_spec import JobSpec
from spark_app.api.source_spec import SourceSpec

# the source's credentials are KAFKA_<name>, a Kafka sink's own KAFKA_SINK_<name>
SOURCE_ENV_PREFIX, SINK_ENV_PREFIX = "KAFKA_", "KAFKA_SINK_"
ENV_SECURITY_PROTOCOL = SOURCE_ENV_PREFIX + "SECURITY_PROTOCOL"
ENV_SASL_MECHANISM = SOURCE_ENV_PREFIX + "SASL_MECHANISM"
ENV_SASL_USERNAME = SOURCE_ENV_PREFIX + "SASL_USERNAME"
ENV_SASL_PASSWORD = SOURCE_ENV_PREFIX + "SASL_PASSWORD"
ENV_SSL_CA_LOCATION = SOURCE_ENV_PREFIX + "SSL_CA_LOCATION"
ENV_SSL_CA_PEM = SOURCE_ENV_PREFIX + "SSL_CA_PEM"
ENV_REGISTRY_USERNAME = "SCHEMA_REGISTRY_USERNAME"
ENV_REGISTRY_PASSWORD = "SCHEMA_REGISTRY_PASSWORD"
# Where the operator mounts schemaRegistry.caSecret in the driver and executors (a Secret
# volume; streamingjob_operator.children.pod_parts): the source's schemaRegistryCaFile.
REGISTRY_CA_DIR = "/etc/streamingjob-registry-ca"
REGISTRY_CA_FILE = f"{REGISTRY_CA_DIR}/ca.crt"

# environment variable → librdkafka property
CREDENTIAL_ENV = {
    ENV_SECURITY_PROTOCOL: "security.protocol",
    ENV_SASL_MECHANISM: "sasl.mechanism",
    ENV_SASL_USERNAME: "sasl.username",
    ENV_SASL_PASSWORD: "sasl.password",
    ENV_SSL_CA_LOCATION: "ssl.ca.location",
    ENV_SSL_CA_PEM: "ssl.ca.pem",
}

# the same for a Kafka sink with credentials of its own (spec.sinkKafkaCredentials)
SINK_CREDENTIAL_ENV = {
    SINK_ENV_PREFIX + var.removeprefix(SOURCE_ENV_PREFIX): prop
    for var, prop in CREDENTIAL_ENV.items()
    if var != ENV_SSL_CA_PEM  # the operator writes to no sink: the CA is always a file
}

# environment variable → the source's schema-registry option (with a decoded value.format)
REGISTRY_CREDENTIAL_ENV = {
    ENV_REGISTRY_USERNAME: "schemaRegistryUser",
    ENV_REGISTRY_PASSWORD: "schemaRegistryPassword",
}


def credential_properties(env: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka credential properties the environment sets."""
    return {prop: env[var] for var, prop in CREDENTIAL_ENV.items() if env.get(var)}


def sink_credentials(env: Mapping[str, str]) -> dict[str, str]:
    """The Kafka sink's own credential properties (`spec.sinkKafkaCredentials`), if any."""
    return {prop: env[var] for var, prop in SINK_CREDENTIAL_ENV.items() if env.get(var)}


def sink_client(job: JobSpec, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Kafka sink's client properties: its cluster (`spec.job.sink.bootstrapServers`,
    else the source's) and its credentials: its own where the environment has them
    (`SINK_CREDENTIAL_ENV`), else the source's (`CREDENTIAL_ENV`), never a mix of the two."""
    env = os.environ if env is None else env
    credentials = sink_credentials(env) or credential_properties(env)
    bootstrap = job.sink.bootstrap_servers or job.source.bootstrap_servers
    return {"bootstrap.servers": bootstrap, **credentials}


def source_options(source: SourceSpec, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The job's source as the `kafka_checkpointed` source's Spark options; credentials come
    from `env` (the process environment by default), never from the manifest."""
    env = os.environ if env is None else env
    options = {
        "kafka.bootstrap.servers": source.bootstrap_servers,
        "startingOffsets": source.starting_offsets,
        "offsetResetStrategy": source.offset_reset_strategy,
        "commitOffsetsOnCheckpoints": str(source.commit_offsets_on_checkpoints).lower(),
        "failOnDataLoss": str(source.fail_on_data_loss).lower(),
        "includeHeaders": str(source.include_headers).lower(),
        "partitionDiscoveryIntervalMs": str(source.partition_discovery_interval_ms),
        "isolationLevel": source.isolation_level,
    }
    if source.subscribe:
        options["subscribe"] = ",".join(source.subscribe)
    if source.subscribe_pattern:
        options["subscribePattern"] = source.subscribe_pattern
    if source.group_id:
        options["kafka.group.id"] = source.group_id
    if source.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    options.update({f"kafka.{k}": v for k, v in source.kafka.items()})
    options.update({f"kafka.{k}": v for k, v in credential_properties(env).items()})
    options.update(value_options(source, env))
    options.update(key_options(source))
    return options


def value_options(source: SourceSpec, env: Mapping[str, str]) -> dict[str, str]:
    """`spec.job.source.value` as the source's options; the registry's credentials from
    `env` only (REGISTRY_CREDENTIAL_ENV)."""
    value = source.value
    if value is None or value.format == "raw":
        return {}
    options: dict[str, str] = {"valueFormat": value.format}
    registry = value.schema_registry
    if registry is not None:
        options["schemaRegistryUrl"] = registry.url
        if registry.timeout_seconds is not None:
            options["schemaRegistryTimeoutMs"] = str(registry.timeout_seconds * 1000)
        if registry.ca_secret is not None:
            options["schemaRegistryCaFile"] = REGISTRY_CA_FILE
        if registry.subject_strategy is not None:
            options["valueSubjectStrategy"] = registry.subject_strategy
        if registry.record_name is not None:
            options["valueRecordName"] = registry.record_name
        options.update(
            {opt: env[var] for var, opt in REGISTRY_CREDENTIAL_ENV.items() if env.get(var)}
        )
    if value.subject:
        options["valueSubject"] = value.subject
    if value.version is not None:
        options["valueSchemaVersion"] = str(value.version)
    if value.reader_schema is not None:
        options["valueSchema"] = value.reader_schema
    if value.message_name is not None:
        options["valueMessageName"] = value.message_name
    return options


def key_options(source: SourceSpec) -> dict[str, str]:
    """`spec.job.source.key` as the source's options (the registry's are the value's)."""
    key = source.key
    if key is None or key.format == "raw":
        return {}
    options: dict[str, str] = {"keyFormat": key.format}
    if key.subject:
        options["keySubject"] = key.subject
    if key.version is not None:
        options["keySchemaVersion"] = str(key.version)
    if key.reader_schema is not None:
        options["keySchema"] = key.reader_schema
    return options


def job_options(job: JobSpec, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The source's options with the job's dead-letter topic (`spec.job.deadLetter`): what the
    driver's query starts with and what the runner's preflight and the operator check."""
    options = source_options(job.source, env)
    if job.sink.format == "kafka" and job.sink.guarantee == "exactly-once":
        options["announceTaskRanges"] = "true"  # the sink writes per source range
    if job.dead_letter is not None:
        options["deadLetterTopic"] = job.dead_letter.topic
        if job.dead_letter.bootstrap_servers:
            options["deadLetterBootstrapServers"] = job.dead_letter.bootstrap_servers
    return options
