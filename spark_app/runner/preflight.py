"""Before Spark starts, and when the runner stops on its own: Kafka asked the runner's own
questions (reachable, the credentials accepted, the topics there), each failure an exit code of
its own and a termination message naming the field and the fix; the runner's refusal of its
input marked for the operator (InvalidSpec).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from spark_app.api.exit_codes import (
    EXIT_INVALID,
    EXIT_KAFKA_AUTH,
    EXIT_KAFKA_TLS,
    EXIT_KAFKA_UNAVAILABLE,
    REFUSED_MARK,
)
from spark_app.api.job_spec import JobSpec
from spark_app.api.manifest import RunnerManifest
from spark_app.kafka.config import (
    credential_properties,
    job_options,
    sink_client,
    sink_credentials,
)
from spark_app.runner.query import (
    InvalidJob,
    load_transform,
)
from spark_app.runner.report import Reporter

log = logging.getLogger("spark_app.runner.runner")  # one logger: the driver's lines as before


EXIT_OK, EXIT_FAILED = 0, 1  # and EXIT_INVALID (2), EXIT_KAFKA_AUTH (3), EXIT_KAFKA_TLS (4),


# EXIT_CATCH_UP_FAILED (5), EXIT_KAFKA_UNAVAILABLE (6): spark_app.kafka.config
TERMINATION_LOG = Path(os.environ.get("STREAMJOB_TERMINATION_LOG", "/dev/termination-log"))


class KafkaStartFailed(RuntimeError):
    """Kafka refused the job's credentials, the TLS handshake failed, or Kafka or a topic is
    not there (yet): a fact about the Secrets or the cluster, not about the manifest, which a
    later start may not meet; `exit_code` tells which."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _credentials_fields(
    credentials: dict[str, Any] | None, field: str = "spec.kafkaCredentials"
) -> tuple[str, str]:
    """How messages name the Secrets of `field`: (SASL credentials, CA)."""
    creds = credentials or {}
    sasl = (
        f"{field}.secretName (Secret {creds['secretName']!r})" if creds.get("secretName") else field
    )
    ca_ref = creds.get("caSecret") or {}
    ca = (
        f"{field}.caSecret (Secret {ca_ref['name']!r}, key {ca_ref.get('key', 'ca.crt')!r})"
        if ca_ref.get("name")
        else f"{field}.caSecret (none: the system's CA bundle)"
    )
    return sasl, ca


def preflight(
    options: dict[str, str], timeout_s: float = 15.0, credentials: dict[str, Any] | None = None
) -> None:
    """Fails fast, before Spark starts, on what would otherwise fail inside a batch.
    `credentials`: the manifest's spec.kafkaCredentials (names only), for the messages."""
    from spark_app.api.option_values import OptionError
    from spark_app.api.options import SourceOptions
    from spark_app.kafka.errors import KafkaUnavailable, UnknownTopic
    from spark_app.kafka.metadata import KafkaMetadata

    sasl_field, ca_field = _credentials_fields(credentials)
    try:
        parsed = SourceOptions.parse(options)
        metadata = KafkaMetadata(parsed, timeout_s=timeout_s)
        try:
            metadata.topic_partitions()
        finally:
            metadata.close()
    except OptionError as exc:
        raise InvalidJob(f"spec.job.source: {exc}") from None
    except UnknownTopic as exc:  # it may be created: the start is retried
        raise KafkaStartFailed(
            f"spec.job.source.subscribe: {exc}", EXIT_KAFKA_UNAVAILABLE
        ) from None
    except KafkaUnavailable as exc:
        raise _start_failed(exc, sasl_field, ca_field, "spec.job.source.bootstrapServers") from None


def _start_failed(
    exc: Exception, sasl_field: str, ca_field: str, cluster_field: str
) -> KafkaStartFailed:
    """KafkaStartFailed naming the field behind a refused login, a failed TLS handshake or
    brokers that did not answer."""
    from spark_app.kafka.errors import KafkaAuthFailed, KafkaTLSFailed

    if isinstance(exc, KafkaAuthFailed):
        return KafkaStartFailed(f"{sasl_field}: {exc}", EXIT_KAFKA_AUTH)
    if isinstance(exc, KafkaTLSFailed):
        return KafkaStartFailed(f"{ca_field}: {exc}", EXIT_KAFKA_TLS)
    return KafkaStartFailed(f"{cluster_field}: {exc}", EXIT_KAFKA_UNAVAILABLE)


def sink_preflight(job: JobSpec, timeout_s: float, spec: dict[str, Any]) -> None:
    """A Kafka sink on a cluster or with credentials of its own: its brokers answer and take
    its credentials (the topic is not required: brokers may create it on the first write).
    The same cluster as the source's, with its credentials: asked already."""
    from spark_app.api.options import SourceOptions
    from spark_app.kafka.errors import KafkaUnavailable
    from spark_app.kafka.metadata import KafkaMetadata

    client = sink_client(job)
    source = {"bootstrap.servers": job.source.bootstrap_servers}
    if client == {**source, **credential_properties(os.environ)}:
        return
    key = "sinkKafkaCredentials" if sink_credentials(os.environ) else "kafkaCredentials"
    sasl_field, ca_field = _credentials_fields(_mapping(spec.get(key)), f"spec.{key}")
    options = SourceOptions.parse(sink_lookup_options(client, job.sink.topic or ""))
    metadata = KafkaMetadata(options, timeout_s=timeout_s)
    try:
        metadata.topic_partitions()
    except KafkaUnavailable as exc:
        raise _start_failed(exc, sasl_field, ca_field, "spec.job.sink.bootstrapServers") from None
    finally:
        metadata.close()


def sink_lookup_options(client: dict[str, str], topic: str) -> dict[str, str]:
    """The Kafka sink's cluster as options of the source's look-ups: the sink's topic by
    pattern (absent is no error), a group for the look-ups only (it never joins)."""
    options = {f"kafka.{k}": v for k, v in client.items()}
    options["subscribePattern"] = re.escape(topic)
    options["kafka.group.id"] = "streamingjob-sink-preflight"
    return options


def _mapping(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def check_start(manifest: RunnerManifest, args: argparse.Namespace, spec: dict[str, Any]) -> None:
    """Kafka answers for the subscribed topics (and a Kafka sink's cluster) and the transform
    loads (before Spark): InvalidJob or KafkaStartFailed otherwise. `spec`: the manifest's
    spec as written (its Secret references name the fields in the messages)."""
    job = manifest.spec.job
    preflight(job_options(job), args.preflight_timeout, _mapping(spec.get("kafkaCredentials")))
    if job.sink.format == "kafka":
        sink_preflight(job, args.preflight_timeout, spec)
    if manifest.spec.job.transform:
        load_transform(manifest.spec.job.transform)


# The source's own errors, as the executor's Python traceback ends in them inside Spark's
# wrapping ("…spark_app.source.partition_range.TopicDeletedError: topic t was deleted …").
_SOURCE_ERROR = re.compile(
    r"\b(?:DataLossError|TopicDeletedError|UnknownTopic|KafkaUnavailable|KafkaException"
    r"|TimeoutError|NativeUnavailable|PoisonRecordError|RegistryUnavailable|RegistryRefused"
    r"|RegistryTLSError"
    r"|ReaderSchemaError|DeadLetterError|KafkaSinkError): (.+)"
)


def failure_cause(text: str) -> str:
    """The line that says why a query failed: the source's own error where Spark's wrapping
    holds one (the last: a traceback ends in the error raised), else Spark's first line."""
    found = _SOURCE_ERROR.findall(text)
    if found:
        return found[-1].strip()
    lines = text.splitlines()
    return lines[0] if lines else "unknown error"


def refuse(message: str, reporter: Reporter | None = None) -> int:
    """EXIT_INVALID for input that cannot run: the log, the termination message (the
    operator's InvalidSpec: REFUSED_MARK tells it from any other program's exit 2) and the
    report say why."""
    log.error("invalid job: %s", message)
    termination_message(REFUSED_MARK + message)
    if reporter is not None:
        reporter.update(state="failed", error=message)
    return EXIT_INVALID


def termination_message(text: str) -> None:
    """The container's termination message (Kubernetes shows it in the pod's status); the
    kubelet creates the file, elsewhere there is none and nothing is written."""
    if not TERMINATION_LOG.exists():
        return
    with contextlib.suppress(OSError):  # the log line says it all anyway
        TERMINATION_LOG.write_text(text[:4000])
