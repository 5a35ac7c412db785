"""Reads what a job committed to its Iceberg table through the table's catalog with PyIceberg
(what every Iceberg reader sees), and runs maintenance beside a job: another writer's commit,
then `streamingjob-iceberg-maintenance` as its CronJob would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from devbed.iceberg_catalog import RestCatalog
from devbed.iceberg_java_reader import java_rows
from devbed.object_store import Storage
from devbed.postgres import PostgresServer
from spark_app.api.iceberg_spec import IcebergCatalogSpec
from spark_app.api.manifest import S3Spec
from spark_app.sinks.iceberg_sink import catalog_properties


def rest_sink(catalog: RestCatalog, table: str) -> dict:
    """The spec.job.sink of a job writing `table` through the REST catalog."""
    return {
        "format": "iceberg",
        "table": table,
        "catalog": {"type": "rest", "uri": catalog.uri},
    }


def postgres_sink(server: PostgresServer, storage: Storage, table: str) -> dict:
    """The spec.job.sink of a job writing `table` through a SQL catalog in PostgreSQL, its
    files in `storage` (a local directory or a bucket: the client writes them, not the
    catalog); its password reaches the driver as a Secret's would (`server.password` in
    CREDENTIAL_ENV)."""
    return {
        "format": "iceberg",
        "table": table,
        "catalog": {"type": "sql", "uri": server.uri, "warehouse": f"{storage.base}/warehouse"},
    }


def store_settings(storage: Storage | None) -> dict[str, str]:
    """The fs.s3a.* settings of a job on `storage`: its spec.s3 as the driver's session maps
    it (S3Spec.hadoop_conf)."""
    if storage is None or storage.s3_spec is None:
        return {}
    conf = S3Spec.model_validate(storage.s3_spec).hadoop_conf()
    return {key.removeprefix("spark.hadoop."): value for key, value in conf.items()}


def open_table(sink: dict, env: Mapping[str, str] | None = None, storage: Storage | None = None):
    """The job's table through its catalog, with the credential `env` holds (CREDENTIAL_ENV)
    and the object store of `storage` joined in as the job's driver does
    (iceberg_sink.catalog_properties)."""
    from pyiceberg.catalog import load_catalog

    spec = IcebergCatalogSpec.model_validate(sink["catalog"])
    props = catalog_properties(
        spec, store_settings(storage), {**(storage.env if storage else {}), **(env or {})}
    )
    return load_catalog(spec.name, **props).load_table(sink["table"])


def iceberg_rows(
    sink: dict, env: Mapping[str, str] | None = None, storage: Storage | None = None
) -> list[dict]:
    """Every row of the table's current snapshot with its record's id (a JSON value's)."""
    columns = ("value", "topic", "partition", "offset")
    rows = open_table(sink, env, storage).scan(selected_fields=columns).to_arrow().to_pylist()
    for row in rows:
        row["id"] = json.loads(row["value"])["id"]
    return rows


def read_alike_by_java(catalog: RestCatalog, sink: dict, rows: list[dict]) -> None:
    """A second reader, Apache Iceberg's Java library through the same REST catalog, sees the
    very rows PyIceberg read (`rows`, from `iceberg_rows`): each (partition, offset, id) as
    often."""
    java = java_rows(catalog.uri, sink["table"], ("value", "partition", "offset"))

    def key(row: dict) -> tuple[int, int, int]:
        return row["partition"], row["offset"], json.loads(row["value"])["id"]

    assert sorted(map(key, java)) == sorted(map(key, rows)), "the two readers disagree"
    assert java, "the Java reader read nothing"


def maintain(
    manifest: dict,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    storage: Storage | None = None,
) -> int:
    """Beside the job of `manifest` (on `storage`), down: the maintenance command rewriting
    the table's small files into one (a REPLACE snapshot), expiring every snapshot but the
    newest and removing the orphan files (its CronJob's environment: `env`). The number of
    snapshots left."""
    sink = manifest["spec"]["job"]["sink"]
    path = workdir / "maintained-job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    # the job is down (killed): any file nothing reaches is an orphan, whatever its age
    command = [sys.executable, "-m", "spark_app.sinks.iceberg_maintenance", "--manifest",
               str(path), "--rewrite-small-files", "--min-input-files", "2",
               "--older-than-hours", "0", "--remove-orphans-older-than-hours", "0"]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["rewrite"]["filesReplaced"] >= 2 and "orphans" in summary, done.stdout
    return len(open_table(sink, env, storage).snapshots())
