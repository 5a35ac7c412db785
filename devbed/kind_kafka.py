"""The replicated Kafka of the kind bed (examples/kind/kafka.yaml) with its SASL_SSL listener,
the Secrets its brokers mount (a certificate of a CA of the bed's own, a SCRAM user) and the
schema registry beside it (examples/kind/schema-registry.yaml).
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from devbed.kind_cluster import REPO_ROOT, Kube
from devbed.tls import Authority

KAFKA_NAMESPACE = "kafka"  # examples/kind/kafka.yaml
BOOTSTRAP = "kafka.kafka.svc.cluster.local:9092"
KAFKA_MANIFEST = REPO_ROOT / "examples" / "kind" / "kafka.yaml"
# examples/kind/schema-registry.yaml: Apicurio Registry (image streamingjob/schema-registry,
# images/schema-registry) in the Kafka namespace; its Confluent-compatible API
SCHEMA_REGISTRY_MANIFEST = REPO_ROOT / "examples" / "kind" / "schema-registry.yaml"
SCHEMA_REGISTRY_URL = "http://schema-registry.kafka.svc.cluster.local:8080/apis/ccompat/v7"

# examples/kind/kafka.yaml: the StatefulSet kafka (kafka-0..2, each broker and controller,
# RF 3, min.insync.replicas 2) behind the bootstrap Service kafka; the brokers advertise their
# own names under the headless Service kafka-brokers, so their certificate names them too.
BROKERS = 3
BROKER_PODS = [f"kafka-{n}" for n in range(BROKERS)]
KAFKA_HOSTS = [
    "kafka.kafka.svc.cluster.local",
    "kafka.kafka.svc",
    *(f"{pod}.kafka-brokers.kafka.svc.cluster.local" for pod in BROKER_PODS),
]
SECURED_BOOTSTRAP = f"{KAFKA_HOSTS[0]}:9094"  # SASL_SSL, SCRAM-SHA-512


@dataclass(frozen=True)
class KafkaLogin:
    """The SASL_SSL listener's SCRAM user and the CA that signed the broker's certificate:
    what a job namespace gets as its Secrets kafka-login and kafka-ca."""

    username: str
    password: str
    ca_pem: str

    def give_secrets(self, kube: Kube, namespace: str) -> None:
        for name, data in (
            ("kafka-login", {"username": self.username, "password": self.password}),
            ("kafka-ca", {"ca.crt": self.ca_pem}),
        ):
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "stringData": data,
            }
            kube.apply(json.dumps(secret), namespace)


def secret_data(kube: Kube, name: str, namespace: str) -> dict[str, str] | None:
    try:
        secret = kube.get("secret", name, namespace)
    except RuntimeError:
        return None
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def broker_secrets(kube: Kube, workdir: Path) -> bool:
    """The broker's certificate (a CA of the test's own, SANs: the Service names) and SCRAM
    user as the Secrets examples/kind/kafka.yaml mounts; kept when a kept cluster has them.
    True when they were made now."""
    kube.run("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KAFKA_NAMESPACE}}
    ))  # fmt: skip
    tls = secret_data(kube, "kafka-tls", KAFKA_NAMESPACE)
    hosts = ",".join(KAFKA_HOSTS)  # a kept cluster's certificate may name other hosts
    if (
        tls
        and "ca.crt" in tls
        and tls.get("hosts") == hosts
        and secret_data(kube, "kafka-scram", KAFKA_NAMESPACE)
    ):
        return False
    server = Authority.create(workdir).issue(KAFKA_HOSTS)
    secrets = [
        ("kafka-tls", "kubernetes.io/tls", {
            "tls.crt": server.cert.read_text(),
            "tls.key": server.key.read_text(),
            "ca.crt": server.ca.read_text(),
            "hosts": hosts,
        }),
        ("kafka-scram", "Opaque", {"username": "orders", "password": uuid.uuid4().hex}),
    ]  # fmt: skip
    for name, kind, data in secrets:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": kind,
            "metadata": {"name": name, "namespace": KAFKA_NAMESPACE},
            "stringData": data,
        }
        kube.apply(json.dumps(secret), KAFKA_NAMESPACE)
    return True


def start_kafka(kube: Kube, workdir: Path) -> str:
    """The replicated cluster of examples/kind/kafka.yaml with its SASL_SSL listeners; its
    PLAINTEXT bootstrap address inside the cluster (the tests' own tools). The schema
    registry of examples/kind/schema-registry.yaml is applied first and starts while the
    brokers do (`wait_schema_registry` waits for it)."""
    made = broker_secrets(kube, workdir)
    kube.run("apply", "-f", str(SCHEMA_REGISTRY_MANIFEST))
    # a kept cluster of an older bed may run the single broker of a Deployment
    kube.run("delete", "deployment", "kafka", "-n", KAFKA_NAMESPACE, "--ignore-not-found")
    existed = bool(kube.run("get", "statefulset", "-n", KAFKA_NAMESPACE, "-o", "name"))
    kube.run("apply", "-f", str(KAFKA_MANIFEST))
    if made and existed:  # a kept cluster's brokers started without these Secrets
        kube.run("delete", "pods", "-n", KAFKA_NAMESPACE, "-l", "app=kafka", "--wait=false")
    kube.run(
        "rollout", "status", "statefulset/kafka", "-n", KAFKA_NAMESPACE, "--timeout=240s",
        timeout=270,
    )  # fmt: skip
    return BOOTSTRAP


def wait_schema_registry(kube: Kube) -> str:
    """Until the registry that `start_kafka` applied is Ready (its readiness probe asks
    Apicurio's /health/ready); the URL of its Confluent-compatible API inside the cluster."""
    kube.run(
        "rollout", "status", "deployment/schema-registry", "-n", KAFKA_NAMESPACE,
        "--timeout=240s", timeout=270,
    )  # fmt: skip
    return SCHEMA_REGISTRY_URL


def read_kafka_login(kube: Kube) -> KafkaLogin:
    scram = secret_data(kube, "kafka-scram", KAFKA_NAMESPACE) or {}
    tls = secret_data(kube, "kafka-tls", KAFKA_NAMESPACE) or {}
    return KafkaLogin(scram["username"], scram["password"], tls["ca.crt"])
