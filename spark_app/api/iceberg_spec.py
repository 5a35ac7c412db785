"""`spec.job.sink.catalog`: the Iceberg catalog a `format: iceberg` sink commits through, and
the table's identifier. Pure (no pyspark): the operator imports it.

Two catalog protocols: the Iceberg REST catalog (the common one: Polaris, Nessie, Gravitino,
Apache Iceberg's own server, the clouds') and the SQL catalog (a PostgreSQL or SQLite database
holding each table's metadata pointer). The catalog's secret, a REST bearer token or the SQL
user's password, comes from a Secret as the environment variable ICEBERG_CATALOG_CREDENTIAL;
never from the URI (refused there), so it is in no argument, ConfigMap, status or log.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from spark_app.api.field_rules import CLIENT_KEY, Options, check_keys, refusing_keys_schema
from spark_app.api.spec_base import SpecModel, secret_key, secret_name

CREDENTIAL_ENV = "ICEBERG_CATALOG_CREDENTIAL"
# namespace[.namespace...].table: Iceberg's identifiers, with names every engine takes
TABLE = r"^[A-Za-z_][A-Za-z0-9_]{0,127}(\.[A-Za-z_][A-Za-z0-9_]{0,127}){1,3}$"
# rest: http(s)://host[:port][/path]; sql: an SQLAlchemy URL of PostgreSQL or SQLite. No
# user info with a password (user@ is fine for PostgreSQL), no query or fragment.
REST_URI = r"^https?://[A-Za-z0-9._~\[\]-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%+=,-]*)?$"
SQL_URI = (
    r"^sqlite:////[A-Za-z0-9._~/@=+,-]+$"
    r"|^postgresql(\+psycopg2)?://([A-Za-z0-9._~-]+@)?[A-Za-z0-9._~\[\]-]+(:[0-9]{1,5})?"
    r"/[A-Za-z0-9._-]+$"
)
URI_RULE = (
    "spec.job.sink.catalog.uri: a rest catalog's is http(s)://host:port[/path]; a sql "
    "catalog's is postgresql://[user@]host[:port]/database or sqlite:////absolute/path.db. "
    "No password in it: the catalog's secret comes from catalog.credentialsSecret"
)
NEEDS_WAREHOUSE = (
    "spec.job.sink.catalog.warehouse is required for a sql catalog: where new tables' files "
    "go (file:///path on a mounted volume or s3a://bucket/prefix)"
)
# Catalog properties the job sets from a field: an override would move the table or leak a
# secret into the spec.
CATALOG_PROPERTY_FIELDS = {
    "uri": "spec.job.sink.catalog.uri",
    "type": "spec.job.sink.catalog.type",
    "py-catalog-impl": "spec.job.sink.catalog.type",
    "warehouse": "spec.job.sink.catalog.warehouse",
    "token": "spec.job.sink.catalog.credentialsSecret",
    "credential": "spec.job.sink.catalog.credentialsSecret",
    "s3.access-key-id": "spec.s3.credentialsSecret",
    "s3.secret-access-key": "spec.s3.credentialsSecret",
}


class CatalogCredentialsSecret(SpecModel):
    """The catalog's secret from a Secret in the job's namespace: a REST catalog's bearer
    token, or the password of a SQL catalog's database user (the user is in the uri)."""

    name: str = secret_name("Name of the Secret in the job's namespace.")
    key: str = secret_key(
        "credential", "Key of the token (rest) or the database password (sql) in the Secret."
    )


class IcebergCatalogSpec(SpecModel):
    """Where the Iceberg table's metadata lives and its files go."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.type == 'rest' ? self.uri.matches(r'" + REST_URI + "') : "
                    "self.uri.matches(r'" + SQL_URI + "')",
                    "message": URI_RULE,
                    "fieldPath": ".uri",
                },
                {
                    "rule": "self.type == 'rest' || has(self.warehouse)",
                    "message": NEEDS_WAREHOUSE,
                    "fieldPath": ".warehouse",
                },
            ]
        }
    )

    name: str = Field(
        default="default",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$",
        description="The catalog's name: a sql catalog keeps each table under it (its "
        "readers must name the catalog so too); a rest catalog's server ignores it.",
    )
    type: Literal["rest", "sql"] = Field(
        description="rest: an Iceberg REST catalog server. sql: PyIceberg's SQL catalog in a "
        "PostgreSQL (or, on a mounted volume, SQLite) database."
    )
    uri: str = Field(
        min_length=1,
        max_length=2048,
        description="rest: http(s)://host:port[/path]. sql: postgresql://[user@]host[:port]"
        "/database or sqlite:////absolute/path.db. No password: use credentialsSecret.",
    )
    warehouse: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=r"^(file:///|s3a://|s3://)[A-Za-z0-9._~/@=+,-]*$|^[A-Za-z0-9._~/@=+,-]+$",
        description="Where new tables' files go: file:///path on a mounted volume or "
        "s3a://bucket/prefix (the store of spec.s3); a REST catalog may instead name its own "
        "warehouse (then any name it knows). Required for sql.",
    )
    credentials_secret: CatalogCredentialsSecret | None = Field(
        default=None,
        description="The catalog's bearer token (rest) or database password (sql) by Secret "
        "reference. Unset: no authentication.",
    )
    properties: Options = Field(
        default_factory=dict,
        description="Further catalog properties (PyIceberg's names, e.g. "
        "header.X-Iceberg-Access-Delegation). Secrets are refused here: use "
        "credentialsSecret; so are the properties the job sets from a field ("
        + ", ".join(CATALOG_PROPERTY_FIELDS)
        + ").",
        json_schema_extra=refusing_keys_schema(
            CATALOG_PROPERTY_FIELDS, "k.lowerAscii()", "catalog properties the job sets"
        ),
    )

    @field_validator("properties")
    @classmethod
    def _property_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if (field := CATALOG_PROPERTY_FIELDS.get(key.lower())) is not None:
                raise ValueError(
                    f"catalog property {key[:100]!r} is set from {field}: remove it and set {field}"
                )
        return check_keys(value, CLIENT_KEY, "catalog property")

    @model_validator(mode="after")
    def _uri_and_warehouse(self) -> IcebergCatalogSpec:
        if not re.match(REST_URI if self.type == "rest" else SQL_URI, self.uri):
            raise ValueError(URI_RULE)
        if self.type == "sql" and self.warehouse is None:
            raise ValueError(NEEDS_WAREHOUSE)
        return self
