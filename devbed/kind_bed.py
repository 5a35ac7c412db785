"""The end-to-end bed on kind, as `make demo` and the e2e tier both bring it up: the cluster
(devbed/kind_cluster.py: `scripts/kind/up.sh`, offline node image, project images loaded), the
operator by `helm install` (devbed/kind_operator.py), the replicated Kafka of
examples/kind/kafka.yaml with its SASL_SSL listener (devbed/kind_kafka.py, its client pod
devbed/kind_kafka_client.py), MinIO for checkpoints and sinks (devbed/kind_storage.py), an
Iceberg REST catalog beside it (devbed/kind_iceberg.py), and a job namespace that enforces
the `restricted` Pod Security Standard with the Secrets a job needs (here). No pytest here:
tests/e2e/conftest.py wraps these in fixtures, devbed/demo.py runs them for a person.

CLI (scripts/test-all.sh): python -m devbed.kind_bed start-services, with
$STREAMJOB_E2E_KUBECONFIG.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from devbed.kind_cluster import Kube, kubectl_for
from devbed.kind_iceberg import ICEBERG_REST_MANIFEST
from devbed.kind_kafka import KAFKA_MANIFEST, SCHEMA_REGISTRY_MANIFEST, KafkaLogin, broker_secrets
from devbed.kind_storage import MINIO_MANIFEST, ObjectStore

RESTRICTED = "pod-security.kubernetes.io/enforce"  # the namespace label the PSS admission reads


def committed_batch(report: dict, epoch: int, attempt: int) -> dict | None:
    """The report if the run (epoch, attempt) committed a batch after its start."""
    if (report.get("epoch"), report.get("attempt")) != (epoch, attempt):
        return None
    batch = report.get("latestBatch") or {}
    restored = report.get("restoredBatch")
    if batch.get("batchId") is None or batch["batchId"] <= (-1 if restored is None else restored):
        return None
    return report


def start_services(kube: Kube, workdir: Path) -> None:
    """Kafka (its Secrets, the brokers, the registry), MinIO and the Iceberg catalog applied,
    not waited for: CI starts them as soon as the cluster is up, beside the tiers that need
    no cluster (scripts/test-all.sh); the e2e fixtures (`start_kafka`, `start_object_store`,
    `start_iceberg_catalog`) apply the same manifests again and find them running."""
    broker_secrets(kube, workdir)
    for manifest in (SCHEMA_REGISTRY_MANIFEST, KAFKA_MANIFEST, MINIO_MANIFEST,
                     ICEBERG_REST_MANIFEST):  # fmt: skip
        kube.run("apply", "-f", str(manifest))


def job_namespace(kube: Kube, store: ObjectStore, login: KafkaLogin, name: str) -> str:
    """A namespace for jobs that enforces the `restricted` Pod Security Standard, with the
    Secrets examples/kind/orders-job.yaml names: s3-credentials, kafka-login, kafka-ca."""
    labels = {RESTRICTED: "restricted"}
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }
    kube.run("apply", "-f", "-", input=json.dumps(namespace))
    store.give_secret(name)
    login.give_secrets(kube, name)
    return name


def main(argv: list[str]) -> int:
    if argv != ["start-services"]:
        sys.exit("usage: python -m devbed.kind_bed start-services")
    with tempfile.TemporaryDirectory() as certificates:
        start_services(kubectl_for(os.environ["STREAMJOB_E2E_KUBECONFIG"]), Path(certificates))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
