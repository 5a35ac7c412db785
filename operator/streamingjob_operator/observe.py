"""The observe step: the job read once into its typed object (api/job.py), its pods and its
runner's report (read, or known first hand within one reconcile), the node view, the go of a
warm hand-over, the spec's problems (validate.py), and the operator's reading of the group in
Kafka, as the values decide() takes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from spark_app.kafka.config import (
    ENV_SASL_MECHANISM,
    ENV_SASL_PASSWORD,
    ENV_SASL_USERNAME,
    ENV_SECURITY_PROTOCOL,
    ENV_SSL_CA_PEM,
)
from streamingjob_operator.api.job import Job, JobMeta
from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus, parse_status
from streamingjob_operator.api.naming import go_configmap_name, report_configmap_name
from streamingjob_operator.children.validation import InvalidJobError, parse
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaMonitor, KafkaTarget
from streamingjob_operator.io.nodes import NodeTracker, with_node_view
from streamingjob_operator.rules import handover
from streamingjob_operator.rules.history import end_told
from streamingjob_operator.rules.observed import (
    GO_KEY,
    HANDOVER_KEY,
    Observed,
    PodInfo,
    parse_report,
    parse_signal,
)
from streamingjob_operator.rules.status import KafkaView
from streamingjob_operator.seen import Seen
from streamingjob_operator.validate import Validator


@dataclass(frozen=True)
class Unparsable:
    """A job whose spec the models cannot read: Invalid, and nothing else decided."""

    meta: JobMeta
    status: StreamingJobStatus
    problems: list[InvalidJobError]
    body: dict[str, Any]


def read_job(body: dict[str, Any]) -> Job | Unparsable:
    """The job as the API server returned it, read once for the whole step."""
    meta, status = JobMeta.of(body["metadata"]), parse_status(body.get("status"))
    spec, problems = parse(body.get("spec") or {})
    if spec is None:  # the schema let it through (an older CRD)
        return Unparsable(meta, status, problems, body)
    return Job(meta, spec, status, body)


@dataclass
class Known:
    """What the next step of a reconcile may use without reading it again (reconcile.py)."""

    job: dict[str, Any] | None = None
    pods: list[dict[str, Any]] | None = None
    report: dict[str, Any] | None = None


class Observer:
    def __init__(
        self,
        api: KubeApi,
        seen: Seen,
        nodes: NodeTracker | None,
        kafka: KafkaMonitor | None,
        validator: Validator,
    ) -> None:
        self.api, self.seen, self.nodes, self.kafka = api, seen, nodes, kafka
        self.validator = validator

    def observe(
        self, job: Job, known: Known, now: datetime
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, Observed]:
        """The job's pods and report, and decide()'s view of them."""
        meta = job.meta
        pods, report = self._pods(job, known)
        observed = Observed(
            now=now,
            pods=self._with_node_view(meta.namespace, meta.name, pods),
            report=parse_report(report),
            invalid=self.validator.problems_of(job),
            handover=parse_signal(report, HANDOVER_KEY),
            go=parse_signal(self._go_configmap(job), GO_KEY),
            lost_nodes=self.nodes.lost() if self.nodes is not None else frozenset(),
            gone=self._gone(job, pods),
        )
        return pods, report, observed

    def _gone(self, job: Job, pods: list[dict[str, Any]]) -> tuple[PodInfo, ...]:
        """Driver pods that failed as they were deleted and are gone (Seen.driver_event),
        whose end the history does not tell yet."""
        meta, listed = job.meta, {p["metadata"]["name"] for p in pods}
        gone = []
        for info in self.seen.ended_drivers(meta.namespace, meta.name, meta.uid):
            if end_told(job.status, info.name):
                self.seen.told(meta.namespace, meta.name, info.name)
            elif info.name not in listed:
                gone.append(info)
        return tuple(gone)

    def _go_configmap(self, job: Job) -> Any:
        """The go ConfigMap, read only while a warm hand-over is under way (only then does
        its go.json decide anything); read afresh: the go step before wrote it."""
        if handover.active(job.status) is None:
            return None
        return self.api.get_configmap(job.meta.namespace, go_configmap_name(job.meta.name))

    def _pods(self, job: Job, known: Known) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The job's pods (direct list) and, once a driver was created, the runner's report
        ConfigMap; what this reconcile already knows first hand is not read again."""
        if known.pods is not None:
            return known.pods, known.report
        status, meta = job.status, job.meta
        if status.epoch == 0:
            # Never launched: a driver is created only after status records its target
            # (write-ahead), so none of ours exists, and fencing lists right before any create.
            # One list less per new job, each a quorum read of every pod in the namespace.
            return [], None
        pods = self.api.list_job_pods(meta.namespace, meta.name)
        self.seen.saw_pods(meta.namespace, meta.name, pods)
        report = None
        if status.launch_state == "Created":
            report = self.api.get_configmap(meta.namespace, report_configmap_name(meta.name))
        return pods, report

    def _with_node_view(
        self, namespace: str, name: str, pods: list[dict[str, Any]]
    ) -> tuple[PodInfo, ...]:
        """The pods as decide() sees them; the tracker learns which nodes to wake this job
        for."""
        infos = with_node_view(pods, self.nodes)
        if self.nodes is not None:
            self.nodes.track((namespace, name), {p.node for p in infos if p.node})
        return infos

    def kafka_view(self, job: Job, now: datetime) -> KafkaView | None:
        """The operator's last reading of the job's group, refreshed when due."""
        if self.kafka is None or job.spec.suspend:
            return None
        key = job.meta.key
        if self.kafka.is_due(key, now):
            target = self.kafka_target(key[0], job.spec)
            if target is not None:
                self.kafka.refresh(key, target)
        return self.kafka.view(key)

    def kafka_target(self, namespace: str, spec: StreamingJobSpec) -> KafkaTarget | None:
        """The job's source as its driver connects to it (credentials as the pod gets them);
        None: a Secret is missing (reported as InvalidSpec by validation)."""
        creds = spec.kafka_credentials
        if creds is None:
            return KafkaTarget.of(spec.job.source, {})
        data = self.api.secret_data(namespace, creds.secret_name)
        if data is None:
            return None
        credentials = {
            ENV_SECURITY_PROTOCOL: creds.security_protocol,
            ENV_SASL_MECHANISM: creds.sasl_mechanism,
            ENV_SASL_USERNAME: data.get(creds.username_key) or "",
            ENV_SASL_PASSWORD: data.get(creds.password_key) or "",
        }
        ca_field = "spec.kafkaCredentials.caSecret (none: the system's CA bundle)"
        if creds.ca_secret is not None:
            ca = self.api.secret_data(namespace, creds.ca_secret.name)
            if ca is None:
                return None
            credentials[ENV_SSL_CA_PEM] = ca.get(creds.ca_secret.key) or ""
            ca_field = (
                f"spec.kafkaCredentials.caSecret (Secret {creds.ca_secret.name!r}, key "
                f"{creds.ca_secret.key!r})"
            )
        sasl_field = f"spec.kafkaCredentials.secretName (Secret {creds.secret_name!r})"
        return KafkaTarget.of(spec.job.source, credentials, (sasl_field, ca_field))
