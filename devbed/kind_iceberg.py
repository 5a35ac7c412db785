"""The Iceberg REST catalog on the kind bed (examples/kind/iceberg-rest.yaml: Apache Iceberg's
own REST server, its tables' files in the bed's MinIO), and its tables read from the tests as
any Iceberg reader would: PyIceberg through a `kubectl port-forward` to the catalog, the
files through the object store's.
"""

from __future__ import annotations

import subprocess
from typing import Any

from devbed.kind_cluster import REPO_ROOT, Kube
from devbed.kind_storage import BUCKET, STORAGE_NAMESPACE, ObjectStore, port_forward

ICEBERG_REST_MANIFEST = REPO_ROOT / "examples" / "kind" / "iceberg-rest.yaml"
ICEBERG_REST_URI = "http://iceberg-rest.storage.svc.cluster.local:8181"  # the Service
ICEBERG_WAREHOUSE = f"s3://{BUCKET}/warehouse"


def start_iceberg_catalog(kube: Kube) -> None:
    """Until the catalog is Ready (its readiness probe asks /v1/config); MinIO first."""
    kube.run("apply", "-f", str(ICEBERG_REST_MANIFEST))
    kube.run(
        "rollout", "status", "deployment/iceberg-rest", "-n", STORAGE_NAMESPACE,
        "--timeout=240s", timeout=270,
    )  # fmt: skip


class IcebergReader:
    """The bed's catalog seen from the tests (loopback only)."""

    def __init__(self, kube: Kube, store: ObjectStore) -> None:
        self.kube, self.store = kube, store
        self.forward: subprocess.Popen[str] | None = None
        self.port = 0

    def rows(self, identifier: str) -> list[dict[str, Any]]:
        """Every row of the table's current snapshot; [] while there is no such table."""
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        if self.forward is None or self.forward.poll() is not None:
            self.forward, self.port = port_forward(
                self.kube, STORAGE_NAMESPACE, "svc/iceberg-rest", 8181
            )
        self.store.connect()
        creds = self.store.credentials
        catalog = load_catalog(
            "default",
            type="rest",
            uri=f"http://127.0.0.1:{self.port}",
            **{
                "s3.endpoint": f"http://127.0.0.1:{self.store.port}",
                "s3.access-key-id": creds["accessKeyId"],
                "s3.secret-access-key": creds["secretAccessKey"],
                "s3.region": "us-east-1",
                "s3.force-virtual-addressing": "false",
            },
        )
        try:
            table = catalog.load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            return []
        return table.scan().to_arrow().to_pylist()

    def close(self) -> None:
        if self.forward is not None:
            self.forward.terminate()
            self.forward.wait(10)
