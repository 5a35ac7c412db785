"""The job's query analysed before it starts, without reading a record or writing a file: the
reader schema versions pinned per epoch (read from the epoch's checkpoint, or resolved now and
written before the start), the job's frame (source, SQL or transform) and the sink's checks,
with a typed Kafka sink's schema resolved (spark_app/runner/sink_schema.py). A warm hand-over
runs it before it reports ready, so what cannot run fails there.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_app.api.manifest import RunnerManifest
from spark_app.formats import schema_pin
from spark_app.kafka.config import job_options
from spark_app.runner.checkpoint_log import CheckpointFiles
from spark_app.runner.error_text import first_line
from spark_app.runner.preflight import failure_cause
from spark_app.runner.query import InvalidJob, NotStarted, check_sink, source_frame, transformed
from spark_app.runner.sink_schema import typed_sink_options
from spark_app.runner.sql_transform import spark_message

log = logging.getLogger("spark_app.runner.runner")  # one logger: the driver's lines as before


@dataclass(frozen=True)
class JobFrame:
    """The job's DataFrame, analysed (source columns, transform or SQL, sink checks), not
    started; `workdir`: the run's work directory its source reports to."""

    frame: Any
    workdir: Path
    pins: dict[str, schema_pin.Pin]  # the reader schema versions the frame reads with
    sink_options: dict[str, str] = field(default_factory=dict)  # a typed Kafka sink's schema


def analysed_job(
    spark,
    manifest: RunnerManifest,
    args: argparse.Namespace,
    location: str,
    workdir: Path | None = None,
) -> JobFrame:
    """Everything the query needs before it starts, checked without reading a record or
    writing a file: the epoch's reader schema versions (`reader_pins`), the job's frame
    (`job_frame`) and the sink's checks on its columns (`check_sink`). `workdir`: the
    run's (a new one when None)."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="streamingjob-"))
    pins = reader_pins(spark, manifest, location)
    versions = {f"{column}SchemaVersion": str(pin.version) for column, pin in pins.items()}
    frame = job_frame(spark, manifest, args, workdir, versions)
    check_sink(spark, manifest.spec.job, frame)
    return JobFrame(frame, workdir, pins, typed_sink_options(manifest.spec.job, frame))


def reader_pins(spark, manifest: RunnerManifest, location: str) -> dict[str, schema_pin.Pin]:
    """The reader schema version of each decoded column read from a subject, for this
    epoch (`spark_app/formats/schema_pin.py`): the spec's version, the one the epoch's checkpoint
    pinned (a restore), or the subject's latest now (a fresh epoch; written by run() before
    the query starts). Reads only."""
    from spark_app.api.option_values import OptionError
    from spark_app.api.options import SourceOptions
    from spark_app.formats.decoding import ReaderSchemaError
    from spark_app.formats.typed_values import at_query_start

    try:
        parsed = SourceOptions.parse(job_options(manifest.spec.job))
    except OptionError as exc:
        raise InvalidJob(f"spec.job.source: {exc}") from None
    decodings = {
        d.column: d
        for d in (parsed.value_decoding, parsed.key_decoding)
        if d is not None and d.reader_schema is None and d.subject is not None
    }
    if not decodings:
        return {}
    where = f"{location.rstrip('/')}/{schema_pin.PIN_FILE}"
    try:
        text = CheckpointFiles(spark, location).read_text(schema_pin.PIN_FILE)
        stored = None if text is None else schema_pin.from_json(text)
    except schema_pin.PinUnreadable as exc:
        raise NotStarted(
            f"{where}: {exc}; delete it to read the subjects' latest versions again"
        ) from None
    except Exception as exc:  # py4j: denied, the store away
        first = first_line(exc)
        raise NotStarted(f"cannot read the epoch's reader schema pins {where}: {first}") from None
    requested = {column: (str(d.subject), d.version) for column, d in decodings.items()}
    pins = {}
    for column, (version, how) in schema_pin.versions(requested, stored).items():
        decoding = decodings[column]
        if version is None:  # the subject's latest, now: pinned for the epoch
            try:
                version = at_query_start(decoding).reader.version
            except ReaderSchemaError as exc:
                raise NotStarted(f"the source could not start: {exc}") from None
            assert version is not None  # a subject's schema has one
        pins[column] = schema_pin.Pin(column, str(decoding.subject), version, how)
    return pins


def write_pins(checkpoint: CheckpointFiles, pins: dict[str, schema_pin.Pin]) -> None:
    """The epoch's pins into its checkpoint; NotStarted when they cannot be written
    (nothing was read)."""
    try:
        checkpoint.write_text(schema_pin.PIN_FILE, schema_pin.to_json(pins))
    except Exception as exc:  # py4j: denied, the store away
        first = first_line(exc)
        raise NotStarted(
            f"cannot write the epoch's reader schema pins to {checkpoint.location}: {first}"
        ) from None
    log.info("reader schema versions pinned for this epoch in %s", checkpoint.location)


def job_frame(
    spark,
    manifest: RunnerManifest,
    args: argparse.Namespace,
    workdir: Path,
    versions: dict[str, str] | None = None,
):
    """The job's DataFrame, analysed. NotStarted when the source cannot resolve its
    columns (a registry away, a subject not registered yet: a later start may succeed);
    InvalidJob when the SQL query or transform cannot run. `versions`: the pinned reader
    schema versions (valueSchemaVersion, keySchemaVersion)."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    job, name = manifest.spec.job, manifest.metadata.name
    try:
        frame = source_frame(spark, job, name, args.epoch, workdir, versions)
    except (AnalysisException, IllegalArgumentException) as exc:
        raise NotStarted(f"the source could not start: {failure_cause(str(exc))}") from None
    try:
        frame = transformed(spark, job, frame)
        frame.schema  # noqa: B018 - analysis forced (a transform's plan too), nothing run
        return frame
    except (AnalysisException, IllegalArgumentException) as exc:
        raise InvalidJob(f"spec.job: Spark rejected the query: {spark_message(str(exc))}") from None
