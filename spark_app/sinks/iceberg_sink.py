"""The Apache Iceberg table sink: each micro-batch is one Iceberg commit that records its batch.

No Iceberg release runs on Spark 4.3 (docs/source/sinks.md), so the job writes through
PyIceberg from `foreachBatch`, with the protocol of Flink's Iceberg sink: the snapshot a batch
commits carries, in its summary, the writer's id and the batch (`APP_PROPERTY`,
`BATCH_PROPERTY`), in the same atomic catalog commit as the batch's files. The same commit
sets the table property `progress_key(app)` to the batch: snapshot expiry (maintenance)
removes old snapshots, never a property, so the batch is found after any maintenance. The
writer's id is the epoch's checkpoint location (a restore keeps it, a redeploy changes it),
as for the Delta sink (spark_app/sinks/delta_sink.py). So:
- a restore's replay of a batch the table already committed writes nothing (`BatchWriter`
  reads the table's snapshots once per query and then keeps the batch itself);
- a redeploy's catch-up counts the previous epoch's last batch in the table as durable
  (`IcebergTable.committed_batch`, used by `spark_app.runner.group_offsets`).
The catalog's optimistic commit fences concurrent writers: a commit whose base moved is
rebased and retried by PyIceberg, so compaction or another job's appends never fail a batch.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from spark_app.api.iceberg_spec import CREDENTIAL_ENV, IcebergCatalogSpec
from spark_app.sinks.delta_sink import SchemaIncompatible, hadoop_settings
from spark_app.sinks.table_writer import TableWriter

log = logging.getLogger("spark_app.sinks.iceberg_sink")
APP_PROPERTY = "streamingjob.app-id"
BATCH_PROPERTY = "streamingjob.batch-id"
FIX = (
    "an Iceberg table takes new columns (added, optional) and widened types (int to long, "
    "float to double); for any other change write to a new table (spec.job.sink.table) or "
    "keep the column as it was (cast it in spec.job.sql)"
)


# SQLAlchemy 2.1 reads postgresql:// as psycopg (version 3); the image carries psycopg2
# (pyiceberg[sql-postgres]), so a plain URI names the driver it has
POSTGRES_DRIVER = "postgresql+psycopg2://"


class CatalogUnusable(ValueError):
    """The catalog's settings cannot reach it (a credential without a user to go with it)."""


def catalog_properties(
    catalog: IcebergCatalogSpec, hadoop: Mapping[str, str], env: Mapping[str, str]
) -> dict[str, str]:
    """PyIceberg's catalog properties: the spec's, the credential from the environment (a
    REST token, or the SQL user's password in the URL) and the object store of spec.s3 (its
    key pair, like S3A's, from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)."""
    uri = catalog.uri
    if uri.startswith("postgresql://"):
        uri = POSTGRES_DRIVER + uri.removeprefix("postgresql://")
    props = {**catalog.properties, "type": catalog.type, "uri": uri}
    if catalog.warehouse:
        props["warehouse"] = catalog.warehouse
    credential = env.get(CREDENTIAL_ENV)
    if credential and catalog.type == "rest":
        props["token"] = credential
    elif credential and uri.startswith("postgresql"):
        props["uri"] = _with_password(uri, credential)
    if endpoint := hadoop.get("fs.s3a.endpoint"):
        props["s3.endpoint"] = endpoint
    props["s3.region"] = hadoop.get("fs.s3a.endpoint.region") or "us-east-1"
    if hadoop.get("fs.s3a.path.style.access", "false").lower() == "true":
        props["s3.force-virtual-addressing"] = "false"
    for key, name in (("s3.access-key-id", "AWS_ACCESS_KEY_ID"),
                      ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY")):  # fmt: skip
        if value := env.get(name):
            props[key] = value
    return props


def _with_password(uri: str, password: str) -> str:
    scheme, rest = uri.split("://", 1)
    user, at, host = rest.partition("@")
    if not at:
        raise CatalogUnusable(
            "spec.job.sink.catalog.credentialsSecret is a database password, and "
            "spec.job.sink.catalog.uri names no user: write postgresql://user@host/database"
        )
    return f"{scheme}://{user}:{quote(password, safe='')}@{host}"


def progress_key(app_id: str) -> str:
    """The table property holding `app_id`'s newest committed batch."""
    return f"streamingjob.batch.{app_id}"


def recorded_batch(
    properties: Mapping[str, str], summaries: Iterable[Mapping[str, str]], app_id: str
) -> int | None:
    """The newest batch `app_id` committed: its table property, else the newest snapshot
    summary (`summaries`, newest first) that carries it (a table written before the
    property). None: none."""
    if (value := properties.get(progress_key(app_id))) is not None:
        return int(value)
    for summary in summaries:
        if summary.get(APP_PROPERTY) == app_id:
            return int(summary[BATCH_PROPERTY])
    return None


def newest_batch(table: Any, app_id: str) -> int | None:
    """`recorded_batch` of a PyIceberg table: its properties and its current snapshot's
    ancestry."""
    from pyiceberg.table.snapshots import ancestors_of

    ancestry = ancestors_of(table.current_snapshot(), table.metadata)
    summaries = (s.summary for s in ancestry if s.summary is not None)
    return recorded_batch(table.properties, summaries, app_id)


@dataclass(frozen=True)
class IcebergTable:
    """One Iceberg table of a catalog (`identifier`: namespace.table), written by one job."""

    identifier: str
    # PyIceberg's catalog properties (`catalog_properties`): the credential too, so never in
    # a repr
    catalog: Mapping[str, str] = field(repr=False)
    name: str = "default"  # the catalog's (a SQL catalog keeps each table under it)
    partition_by: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        """The catalog's URI for messages: a password joined into it (SQL) left out."""
        return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1@", self.catalog.get("uri", ""))

    @classmethod
    def for_session(cls, spark, sink) -> IcebergTable:
        """The table of `sink` (a SinkSpec of format iceberg), the session's S3A settings as
        its object store's."""
        props = catalog_properties(sink.catalog, hadoop_settings(spark), os.environ)
        return cls(
            sink.table,
            props,
            sink.catalog.name,
            tuple(sink.partition_by),
            dict(sink.table_properties),
        )

    def open(self) -> Any:
        """The table as the catalog has it now (a pyiceberg Table); None: no such table."""
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return load_catalog(self.name, **self.catalog).load_table(self.identifier)
        except NoSuchTableError:
            return None

    def committed_batch(self, app_id: str) -> int | None:
        """The newest batch the table committed for `app_id`; None: none (or no table)."""
        table = self.open()
        return None if table is None else newest_batch(table, app_id)

    def check(self, schema: Any) -> None:
        """The query's columns (Spark's `schema`) against the table's before the query
        starts: SchemaIncompatible naming what the table cannot take (no table: nothing)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        opened = self.open()
        if opened is not None:
            evolve(opened, to_arrow_schema(schema, timezone="UTC"), self.identifier, dry=True)

    def append(self, opened: Any, rows: Any, app_id: str, batch_id: int) -> Any:
        """Appends `rows` (Arrow) as batch `batch_id` of `app_id` in one catalog commit: to
        `opened` (evolving its schema in the same commit where the rows bring new columns or
        wider types) or, with None, to a table created by that commit with the spec's
        partitions and properties. The table after the commit."""
        summary = {APP_PROPERTY: app_id, BATCH_PROPERTY: str(batch_id)}
        progress = {progress_key(app_id): str(batch_id)}
        if opened is None:
            return self._create_with(rows, summary, progress)
        with opened.transaction() as transaction:
            evolve(transaction, rows.schema, self.identifier)
            transaction.set_properties(progress)
            transaction.append(rows, snapshot_properties=summary)
        return opened

    def _create_with(self, rows: Any, summary: dict[str, str], progress: dict[str, str]) -> Any:
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(self.name, **self.catalog)
        catalog.create_namespace_if_not_exists(self.identifier.rsplit(".", 1)[0])
        with catalog.create_table_transaction(
            self.identifier, schema=rows.schema, properties={**self.properties, **progress}
        ) as transaction:
            if self.partition_by:
                with transaction.update_spec() as spec:
                    for column in self.partition_by:
                        spec.add_identity(column)
            transaction.append(rows, snapshot_properties=summary)
        return catalog.load_table(self.identifier)


def evolve(target: Any, schema: Any, identifier: str, dry: bool = False) -> None:
    """The table's schema (of `target`, a table or a transaction) takes `schema`'s new
    columns and widened types (Iceberg's own promotions); SchemaIncompatible naming what it
    cannot take. `dry`: only checked."""
    from pyiceberg.exceptions import ValidationError

    try:
        update = target.update_schema().union_by_name(schema)
        if not dry:
            update.commit()
    except (ValidationError, ValueError, TypeError) as exc:
        raise SchemaIncompatible(
            f"the Iceberg table {identifier} cannot take the query's columns ({exc}); {FIX}"
        ) from None


class BatchWriter(TableWriter):
    """One query's foreachBatch function: each batch's rows reach the driver as Arrow and
    become one Iceberg commit.

    The table's snapshots are read once, at the query's first batch: the newest batch they
    hold for the app id, so that a restore's replay of a batch the table has writes nothing.
    From then on that batch is kept here, and each commit goes through the table loaded then
    (a commit moves it on; PyIceberg rebases a commit over other writers' and retries)."""

    table: IcebergTable

    def newest_in(self, opened: Any) -> int | None:
        return newest_batch(opened, self.app_id)

    def write(self, rows: Any, batch_id: int) -> bool:
        """Appends `rows` as batch `batch_id` unless the table has it (a replay after a
        restore). True: written.

        A commit PyIceberg could not rebase is tried once more from the table read again:
        snapshot expiry beside the job may have removed the snapshot the loaded table is at
        ("Cannot find starting snapshot"), which PyIceberg's own retries need."""
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        try:
            return self._write_once(rows, batch_id)
        except (CommitFailedException, ValidationException) as exc:
            log.warning(
                "batch %d: Iceberg commit failed (%s); reading the table again", batch_id, exc
            )
            return self._write_once(rows, batch_id)

    def _write_once(self, rows: Any, batch_id: int) -> bool:
        if self.has(batch_id):
            log.info("batch %d is in the Iceberg table already: skipped", batch_id)
            return False
        try:
            self._opened = self.table.append(self._opened, rows, self.app_id, batch_id)
        except BaseException:
            self._read = False  # the commit may have landed all the same: read it again
            raise
        self._done = batch_id
        return True
