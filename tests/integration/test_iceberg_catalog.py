"""The dev bed's Iceberg REST catalog (devbed/iceberg_catalog.py): Apache Iceberg's own server,
reached by PyIceberg's REST client from the variables it hands out, keeping its tables across
a crash and a restart, as the Iceberg sink's tests rely on."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from devbed.iceberg_catalog import CATALOG_NAME, IcebergCatalog

pytestmark = pytest.mark.integration


def client(catalog: IcebergCatalog):
    prefix = f"PYICEBERG_CATALOG__{CATALOG_NAME.upper()}__"
    env = catalog.client_env()
    return load_catalog(
        CATALOG_NAME, **{key.removeprefix(prefix).lower(): value for key, value in env.items()}
    )


def test_a_table_outlives_a_crash_of_the_catalog(tmp_path):
    catalog = IcebergCatalog(tmp_path).start()
    try:
        rest = client(catalog)
        rest.create_namespace("bed")
        table = rest.create_table("bed.t", schema=pa.schema([("n", pa.int64())]))
        table.append(pa.table({"n": pa.array([1, 2, 3], pa.int64())}))
        assert table.location().startswith(catalog.warehouse)
        catalog.stop(kill=True)
        catalog.start()  # the same port, the same SQLite file and warehouse
        scanned = client(catalog).load_table("bed.t").scan().to_arrow()
        assert sorted(scanned.column("n").to_pylist()) == [1, 2, 3]
    finally:
        catalog.stop(kill=True)
