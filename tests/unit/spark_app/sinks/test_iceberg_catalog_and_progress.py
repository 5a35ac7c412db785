"""The Iceberg sink's pure parts: the catalog's properties (the credential from the
environment only) and where a writer's newest batch is read from."""

from __future__ import annotations

import pytest

from spark_app.api.iceberg_spec import IcebergCatalogSpec
from spark_app.sinks.iceberg_sink import (
    APP_PROPERTY,
    BATCH_PROPERTY,
    CatalogUnusable,
    IcebergTable,
    catalog_properties,
    progress_key,
    recorded_batch,
)

pytestmark = pytest.mark.unit
REST = "http://c.lake.svc:8181"
S3A = {
    "fs.s3a.endpoint": "http://minio.lake.svc:9000",
    "fs.s3a.path.style.access": "true",
}


def _catalog(**fields) -> IcebergCatalogSpec:
    return IcebergCatalogSpec.model_validate(fields)


def test_a_rest_catalogs_token_and_the_object_store_come_from_the_environment():
    catalog = _catalog(type="rest", uri="https://catalog.lake.svc/api", properties={"a": "b"})
    env = {
        "ICEBERG_CATALOG_CREDENTIAL": "t0ken",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    assert catalog_properties(catalog, S3A, env) == {
        "a": "b",
        "type": "rest",
        "uri": "https://catalog.lake.svc/api",
        "token": "t0ken",
        "s3.endpoint": "http://minio.lake.svc:9000",
        "s3.region": "us-east-1",
        "s3.force-virtual-addressing": "false",
        "s3.access-key-id": "key",
        "s3.secret-access-key": "secret",
    }
    assert "token" not in catalog_properties(catalog, {}, {})


def test_a_sql_catalogs_password_joins_its_user_in_the_url_escaped():
    catalog = _catalog(
        type="sql", uri="postgresql://lake@db.lake.svc:5432/catalog", warehouse="s3a://w/h"
    )
    props = catalog_properties(catalog, {}, {"ICEBERG_CATALOG_CREDENTIAL": "p@ss/w:rd"})
    # with the driver the image has (SQLAlchemy 2.1's default for postgresql:// is psycopg 3)
    assert props["uri"] == "postgresql+psycopg2://lake:p%40ss%2Fw%3Ard@db.lake.svc:5432/catalog"
    assert catalog_properties(catalog, {}, {})["uri"].startswith("postgresql+psycopg2://lake@")
    assert props["warehouse"] == "s3a://w/h"
    anonymous = _catalog(type="sql", uri="postgresql://db.lake.svc/catalog", warehouse="s3a://w")
    with pytest.raises(CatalogUnusable, match="names no user"):
        catalog_properties(anonymous, {}, {"ICEBERG_CATALOG_CREDENTIAL": "pw"})


def test_the_newest_batch_is_the_property_first_then_the_newest_summary():
    """The property survives snapshot expiry; a summary is the fallback for a table written
    before it (newest first: the first summary of the app wins)."""
    app = "s3a://c/team/orders/uid/epoch-2"
    summaries = [
        {"operation": "replace"},
        {APP_PROPERTY: app, BATCH_PROPERTY: "7"},
        {APP_PROPERTY: "other", BATCH_PROPERTY: "9"},
        {APP_PROPERTY: app, BATCH_PROPERTY: "6"},
    ]
    assert recorded_batch({}, summaries, app) == 7
    assert recorded_batch({progress_key(app): "8"}, summaries, app) == 8
    assert recorded_batch({progress_key("other"): "9"}, [], app) is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"type": "sql", "uri": "postgresql://u:pw@db/c", "warehouse": "s3a://w"}, "No password"),
        ({"type": "rest", "uri": "http://" + "u:pw@c.lake.svc:8181"}, "No password"),
        ({"type": "rest", "uri": "sqlite:////data/c.db"}, "a rest catalog's is http"),
        ({"type": "sql", "uri": "sqlite:////data/c.db"}, "warehouse is required"),
        ({"type": "rest", "uri": REST, "properties": {"Token": "x"}}, "credentialsSecret"),
        ({"type": "rest", "uri": REST, "properties": {"warehouse": "x"}}, "catalog.warehouse"),
    ],
)  # fmt: skip
def test_a_catalog_without_its_secret_in_the_spec_or_its_pieces_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        _catalog(**fields)


def test_the_catalogs_credential_is_in_no_repr_or_message():
    catalog = _catalog(type="sql", uri="postgresql://lake@db.lake.svc/catalog", warehouse="s3a://w")
    props = catalog_properties(catalog, {}, {"ICEBERG_CATALOG_CREDENTIAL": "s3cr3t"})
    table = IcebergTable("lake.orders", props)
    assert "s3cr3t" in table.catalog["uri"]  # what the catalog is opened with
    assert "s3cr3t" not in repr(table)
    assert table.uri == "postgresql+psycopg2://lake@db.lake.svc/catalog"
