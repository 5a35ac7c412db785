"""The Apache Iceberg table sink: each micro-batch is one Iceberg commit that records its batch.

No Iceberg Spark runtime loads on Spark 4.3 (docs/source/sinks.md), so the job writes through
PyIceberg from `foreachBatch`, with the protocol Iceberg's own streaming sinks use: the
snapshot a batch's append makes carries, in its summary, the writer (the app id: the epoch's
checkpoint location, as the Delta sink's) and the batch id. The same commit sets a table
property `streamingjob.batch.<app id>` to the batch id: snapshot expiry removes old snapshots
(and their summaries), never a property, so the record of a batch outlives any maintenance.
So:
- a restore's replay of a batch the table already committed writes nothing (`BatchWriter`,
  which reads the table once per query and then keeps the batch id itself);
- a redeploy's catch-up counts the previous epoch's last batch in the table as durable
  (`committed_batch`, used by `spark_app.runner.group_offsets`).
The catalog (its URI, warehouse and credentials) comes only from the environment: PyIceberg's
own `PYICEBERG_CATALOG__DEFAULT__*` variables, on Kubernetes from a Secret through the spec's
`env` (valueFrom.secretKeyRef); nothing of it is in the spec, the arguments or a log line.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("spark_app.sinks.iceberg_sink")
# The same fault point as the Delta sink's (tests only): SIGKILL right after the table's commit.
CRASH_AFTER_COMMIT_ENV = "STREAMJOB_TEST_CRASH_AFTER_TABLE_COMMIT"
CATALOG = "default"  # the PyIceberg catalog the sink loads
CATALOG_ENV = f"PYICEBERG_CATALOG__{CATALOG.upper()}__"
APP_ID = "streamingjob.app-id"  # snapshot summary: the writer
BATCH_ID = "streamingjob.batch-id"  # snapshot summary: its batch
BATCH_PROPERTY = "streamingjob.batch."  # + app id: table property, the newest batch
COMMIT_TRIES = 4  # commits lost to another writer's (maintenance) before the batch fails


class CatalogMissing(ValueError):
    """No catalog configured in the environment; the message says which variables to set."""


def app_id(checkpoint: str) -> str:
    """The writer of an epoch's query in the table: its checkpoint location."""
    return checkpoint.rstrip("/")


def batch_property(app: str) -> str:
    return BATCH_PROPERTY + app


def batch_summary(app: str, batch_id: int) -> dict[str, str]:
    """What a batch's snapshot summary carries besides Iceberg's own counts."""
    return {APP_ID: app, BATCH_ID: str(batch_id)}


def newest_batch(
    app: str, properties: Mapping[str, str], summaries: Iterable[Mapping[str, str]]
) -> int | None:
    """The newest batch of `app` that the table holds: its table property, or the summaries of
    the current snapshot's ancestors (`summaries`, newest first), whichever is newer (both are
    written in one commit; expiry may have removed the snapshots, a user the property)."""
    found = [int(properties[batch_property(app)])] if batch_property(app) in properties else []
    for summary in summaries:
        if summary.get(APP_ID) == app and BATCH_ID in summary:
            found.append(int(summary[BATCH_ID]))
            break  # the newest of this writer: ancestors come newest first
    return max(found, default=None)


def identifier(table: str) -> tuple[str, ...]:
    """`namespace.table` (spec.job.sink.table) as PyIceberg's identifier."""
    return tuple(table.split("."))


def catalog_properties(environ: Mapping[str, str]) -> dict[str, str]:
    """The catalog's properties from PyIceberg's variables (`CATALOG_ENV` + NAME, case
    ignored), spelled as PyIceberg spells them: `__` a dot, `_` a dash
    (PYICEBERG_CATALOG__DEFAULT__S3__ACCESS_KEY_ID: s3.access-key-id). Read here, at each
    load, not from PyIceberg's copy of the environment made when it was first imported."""
    prefix = CATALOG_ENV.lower()
    return {
        key.lower()[len(prefix) :].replace("__", ".").replace("_", "-"): value
        for key, value in environ.items()
        if key.lower().startswith(prefix) and len(key) > len(prefix)
    }


def load_catalog() -> Any:
    """The catalog, from the environment only. PyIceberg's own errors can quote the catalog's
    properties (credentials among them): they are replaced by one that names the variables."""
    from pyiceberg.catalog import load_catalog as load

    properties = catalog_properties(os.environ)
    if "uri" not in properties:
        raise CatalogMissing(
            f"the iceberg sink found no catalog: set {CATALOG_ENV}URI (and {CATALOG_ENV}TYPE, "
            f"e.g. rest, {CATALOG_ENV}WAREHOUSE, credentials such as {CATALOG_ENV}CREDENTIAL "
            "or __TOKEN) in spec.env, credentials through valueFrom.secretKeyRef"
        )
    try:
        return load(CATALOG, **properties)
    except ValueError:
        raise CatalogMissing(
            f"the iceberg sink could not set up its catalog from the {CATALOG_ENV}* variables "
            "(check TYPE and URI; their values are not shown: they may hold credentials)"
        ) from None


def prepare() -> None:
    """Before the query starts: the catalog from the environment (CatalogMissing), and
    PyIceberg's writer imported, so that the first batch does not wait for its imports
    (1.6 s of CPU)."""
    load_catalog()
    import pyiceberg.io.pyarrow
    import pyiceberg.table  # noqa: F401


def ancestor_summaries(opened: Any) -> Iterable[Mapping[str, str]]:
    """The summaries of the table's current snapshot and its ancestors, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    metadata = opened.metadata
    for snapshot in ancestors_of(metadata.current_snapshot(), metadata):
        yield snapshot.summary.additional_properties if snapshot.summary else {}


@dataclass(frozen=True)
class IcebergTable:
    """One Iceberg table (`namespace.table`) in the environment's catalog, written by one job."""

    table: str
    partition_by: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    def open(self) -> Any:
        """The table as the catalog has it now (a pyiceberg Table); None: no table yet."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return load_catalog().load_table(identifier(self.table))
        except NoSuchTableError:
            return None

    def committed_batch(self, app: str) -> int | None:
        """The newest batch the table committed for `app`; None: none (or no table)."""
        opened = self.open()
        return None if opened is None else committed_in(opened, app)

    def create(self, schema: Any) -> Any:
        """The table, created from the first batch's Arrow `schema` with the spec's identity
        partitions and properties, in one catalog commit; one that another writer created
        first is loaded instead."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        catalog = load_catalog()
        name = identifier(self.table)
        catalog.create_namespace_if_not_exists(name[:-1])
        try:
            create = catalog.create_table_transaction(
                name, schema=schema, properties=dict(self.properties)
            )
            if self.partition_by:
                with create.update_spec() as spec:
                    for column in self.partition_by:
                        spec.add_identity(column)
            create.commit_transaction()
        except TableAlreadyExistsError:
            pass  # another writer's: loaded below
        return catalog.load_table(name)  # (the staged table a creation returns cannot commit)

    def append(self, opened: Any, rows: Any, app: str, batch_id: int) -> Any:
        """`rows` (Arrow) as batch `batch_id` of `app`: one snapshot and the batch's property
        in one commit on top of `opened`'s snapshot; the table after it. The catalog refuses
        the commit when another one came first (CommitFailedException): nothing of it is in
        the table then."""
        view = without_retries(opened)
        with view.transaction() as commit:
            commit.set_properties({batch_property(app): str(batch_id)})
            commit.append(rows, snapshot_properties=batch_summary(app, batch_id))
        return view


def without_retries(opened: Any) -> Any:
    """`opened` with PyIceberg's own commit retries off (the catalog's table unchanged).

    PyIceberg retries a commit another one beat by re-applying the append on the catalog's
    newest snapshot, blindly: had a second writer of this app id committed this very batch,
    the batch would be in the table twice. `BatchWriter.write` retries instead, reading the
    table's batch first. PyIceberg takes the number of retries from the table's properties
    (`commit.retry.num-retries`, which Iceberg's Java writers read too, so the table's own
    stays): here from a copy of the metadata, which is not sent."""
    from pyiceberg.table import Table, TableProperties

    properties = {**opened.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    return Table(
        opened.name(),
        metadata=opened.metadata.model_copy(update={"properties": properties}),
        metadata_location=opened.metadata_location,
        io=opened.io,
        catalog=opened.catalog,
    )


def committed_in(opened: Any, app: str) -> int | None:
    return newest_batch(app, opened.properties, ancestor_summaries(opened))


class BatchWriter:
    """One query's foreachBatch function: each batch's rows reach the driver as Arrow and
    become one Iceberg commit (PyIceberg writes the Parquet files, the manifests and the
    catalog's commit).

    The table is read once, at the query's first batch: the newest batch it holds for the app
    id, so that a restore's replay of a batch the table has writes nothing. From then on that
    batch id is kept here and every commit goes through the table loaded then. A commit that
    another writer's (compaction, expiry) beat is retried from the table as the catalog has it
    then, its batch id read again first: should the winner have been a second writer of this
    app id with this very batch (two drivers on one checkpoint), it is not written twice."""

    def __init__(self, table: IcebergTable, app: str):
        self.table, self.app = table, app
        self.crash_after = os.environ.get(CRASH_AFTER_COMMIT_ENV)
        self._read = False  # the table's state below was read (and not lost to a failure)
        self._opened: Any = None  # the loaded table; None while there is none
        self._done: int | None = None  # the newest batch of app in the table

    def __call__(self, frame, batch_id: int) -> None:
        self.write(frame.toArrow(), batch_id)
        if self.crash_after == str(batch_id):  # a test's crash between the table and commits/N
            os.killpg(os.getpgid(0), signal.SIGKILL)

    def write(self, rows: Any, batch_id: int) -> bool:
        """Appends `rows` as batch `batch_id` unless the table has it (a replay after a
        restore). True: written."""
        from pyiceberg.exceptions import CommitFailedException

        for tries_left in reversed(range(COMMIT_TRIES)):
            try:
                return self._write_once(rows, batch_id)
            except CommitFailedException as exc:
                if not tries_left:
                    raise
                log.info("batch %d: another commit came first (%s); reloading", batch_id, exc)
                self._read = False
        raise AssertionError("unreachable")

    def _write_once(self, rows: Any, batch_id: int) -> bool:
        if not self._read:
            self._opened = self.table.open()
            self._done = None if self._opened is None else committed_in(self._opened, self.app)
            self._read = True
        if self._has(batch_id):
            return False
        try:
            if self._opened is None:
                self._opened = self.table.create(rows.schema)
                # a table another writer created first may hold this batch already
                self._done = committed_in(self._opened, self.app)
                if self._has(batch_id):
                    return False
            self._opened = self.table.append(self._opened, rows, self.app, batch_id)
        except BaseException:
            self._read = False  # the commit may have landed all the same: read it again
            raise
        self._done = batch_id
        return True

    def _has(self, batch_id: int) -> bool:
        if self._done is None or self._done < batch_id:
            return False
        log.info(
            "batch %d is in the Iceberg table already (up to %d): skipped", batch_id, self._done
        )
        return True


def batch_writer(table: IcebergTable, app: str) -> BatchWriter:
    """The foreachBatch function of the query writing `app`'s batches to `table`."""
    return BatchWriter(table, app)
