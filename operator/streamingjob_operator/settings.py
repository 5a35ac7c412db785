"""Operator settings, typed and read from STREAMINGJOB_* environment variables.

| variable | default | meaning |
|---|---|---|
| STREAMINGJOB_NAMESPACES | (all) | comma-separated namespaces to watch; empty = cluster-wide |
| STREAMINGJOB_LOG_LEVEL | INFO | log level of the operator |
| STREAMINGJOB_RESYNC_SECONDS | 30 | re-observe every job at least this often |
| STREAMINGJOB_FENCING_POLL_SECONDS | 2 | re-check while old pods terminate |
| STREAMINGJOB_NODE_LOST_GRACE_SECONDS | 40 | a pod whose node is silent this long is lost |
| STREAMINGJOB_KUBELET_LEASE_RENEW_SECONDS | 10 | kubelets renew node leases this often |
| STREAMINGJOB_KAFKA_TIMEOUT_SECONDS | 5 | socket timeout of each Kafka request |
| STREAMINGJOB_KAFKA_DEADLINE_SECONDS | 60 | a Kafka call's deadline, its retries included |
| STREAMINGJOB_KAFKA_POLL_SECONDS | 30 | how often committed offsets and lag are read |
| STREAMINGJOB_KAFKA_WORKERS | 4 | threads that talk to Kafka (never the event loop) |
| STREAMINGJOB_API_TIMEOUT_SECONDS | 30 | timeout of each Kubernetes API request |
| STREAMINGJOB_FAILURE_BACKOFF_BASE_SECONDS | 2 | first retry of a failed reconcile (doubles) |
| STREAMINGJOB_FAILURE_BACKOFF_CAP_SECONDS | 300 | longest wait between those retries |
| STREAMINGJOB_WATCH_SERVER_TIMEOUT_SECONDS | 300 | kopf watch server timeout |
| STREAMINGJOB_WORKERS | 16 | reconcile threads (blocking API calls); resyncs get WORKERS/2 more |
| STREAMINGJOB_HISTORY_LIMIT | 20 | transitions kept in status.history |
| STREAMINGJOB_METRICS_PORT | 9090 | Prometheus metrics port (0 = off) |
| STREAMINGJOB_HEALTH_PORT | 8080 | liveness endpoint port /healthz (0 = off) |
| STREAMINGJOB_DRIVER_ENTRYPOINT | /opt/streamingjob/run_job.py | runner path in the image |
| STREAMINGJOB_SPARK_SUBMIT | /opt/spark/bin/spark-submit | spark-submit path in the image |
| STREAMINGJOB_LEADER_ELECTION | true | one acting replica, through a Lease (the entry point) |
| STREAMINGJOB_LEASE_NAME | streamingjob-operator | the Lease the replicas compete for |
| STREAMINGJOB_LEASE_NAMESPACE | (own) | its namespace; empty = the pod's own, else `default` |
| STREAMINGJOB_LEADER_IDENTITY | (host_random) | this replica's name in the Lease (the pod's) |
| STREAMINGJOB_LEASE_DURATION_SECONDS | 15 | a silent leader's Lease expires after this long |
| STREAMINGJOB_RENEW_DEADLINE_SECONDS | 10 | a leader that cannot renew this long stops acting |
| STREAMINGJOB_RETRY_PERIOD_SECONDS | 2 | renewal and candidate retry interval |

Durations that must fit inside one another are checked at start-up (timing.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from streamingjob_operator.rules import timing
from streamingjob_operator.rules.election import ElectionTiming

PREFIX = "STREAMINGJOB_"


class OperatorSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespaces: tuple[str, ...] = Field(default=(), description="Watched namespaces.")
    log_level: str = "INFO"
    resync_seconds: float = Field(default=30.0, gt=0)
    fencing_poll_seconds: float = Field(default=2.0, gt=0)
    node_lost_grace_seconds: float = Field(default=40.0, gt=0)
    kubelet_lease_renew_seconds: float = Field(default=timing.KUBELET_LEASE_RENEW_SECONDS, gt=0)
    kafka_timeout_seconds: float = Field(default=5.0, gt=0)
    # outlasts a broker restart (spark_app.kafka.retry says why 60)
    kafka_deadline_seconds: float = Field(default=60.0, gt=0)
    kafka_poll_seconds: float = Field(default=30.0, gt=0)
    kafka_workers: int = Field(default=4, ge=1)
    api_timeout_seconds: float = Field(default=30.0, gt=0)
    failure_backoff_base_seconds: float = Field(default=2.0, gt=0)
    failure_backoff_cap_seconds: float = Field(default=300.0, gt=0)
    watch_server_timeout_seconds: int = Field(default=300, gt=0)
    workers: int = Field(default=16, ge=1)
    history_limit: int = Field(default=20, ge=1)
    metrics_port: int = Field(default=9090, ge=0)
    health_port: int = Field(default=8080, ge=0)
    driver_entrypoint: str = "/opt/streamingjob/run_job.py"
    spark_submit: str = "/opt/spark/bin/spark-submit"
    leader_election: bool = True
    lease_name: str = Field(default="streamingjob-operator", min_length=1)
    lease_namespace: str = ""
    leader_identity: str = ""
    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _durations_fit(self) -> OperatorSettings:
        """The timing rules (timing.py): each names both settings when it is broken."""
        timing.check_node_grace(self.node_lost_grace_seconds, self.kubelet_lease_renew_seconds)
        self.election_timing  # noqa: B018  (timing.check_election)
        return self

    @property
    def node_silent_seconds(self) -> float:
        return timing.node_silent_seconds(self.kubelet_lease_renew_seconds)

    @property
    def election_timing(self) -> ElectionTiming:
        return ElectionTiming(
            lease_duration_seconds=self.lease_duration_seconds,
            renew_deadline_seconds=self.renew_deadline_seconds,
            retry_period_seconds=self.retry_period_seconds,
            api_timeout_seconds=self.api_timeout_seconds,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env
        values = {
            name: env[PREFIX + name.upper()]
            for name in cls.model_fields
            if PREFIX + name.upper() in env
        }
        return cls.model_validate(values)
