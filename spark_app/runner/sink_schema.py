"""The typed Kafka sink's schema, resolved on the driver before the query starts (before it
reads, and during a warm hand-over's analysis): `spec.job.sink.value`'s pinned version, checked
against the query's value column, or the query's own schema registered under the subject
(spark_app/formats/writer_schemas.py). The executors get the schema, its id and the column's
type as the sink's options (spark_app/formats/value_encoder.py) and never ask the registry.

A registry that does not answer is NotStarted (the start is retried with backoff); a schema
that cannot take the query's value, a missing version, a registration the subject's
compatibility rule refuses, or a column with no place in the format is InvalidJob, naming
`spec.job.sink.value`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from typing import Any

from spark_app.api.job_spec import JobSpec
from spark_app.api.options import SourceOptions
from spark_app.formats.protobuf_values import ProtobufReaderSchema, column_type, pinned_reader
from spark_app.formats.protobuf_writer import protobuf_schema
from spark_app.formats.schema_registry_client import (
    RegisteredSchema,
    RegistryRefused,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRegistryClient,
    client_for,
)
from spark_app.formats.value_formats import InvalidSchema, UnsupportedSchema
from spark_app.formats.writer_schemas import (
    UnwritableType,
    avro_schema,
    json_schema,
    pinned_problems,
    record_name,
)
from spark_app.kafka.config import job_options
from spark_app.runner.query import InvalidJob, NotStarted

FIELD = "spec.job.sink.value"
SCHEMA_TYPES = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}


def registry_client(job: JobSpec, env: Mapping[str, str]) -> SchemaRegistryClient:
    """The source's registry, as the source reaches it (URL, credentials, CA, timeout)."""
    decoding = SourceOptions.parse(job_options(job, env)).value_decoding
    assert decoding is not None  # a typed sink needs the source's registry (JobSpec's rule)
    return client_for(decoding)


def typed_sink_options(job: JobSpec, frame) -> dict[str, str]:
    """`writer_options` of the query `frame` (analysed; its sink's checks passed)."""
    if job.sink.value_format == "raw":
        return {}
    return writer_options(job, frame.schema["value"].dataType.jsonValue(), os.environ)


def writer_options(job: JobSpec, column: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The sink's options for the value column (`column`: its Spark type's JSON form): none
    for a raw value; else the format, the schema, its id and the column's type."""
    value = job.sink.value
    if value is None or value.format == "raw":  # (value_format, narrowed for the type checker)
        return {}
    if column.get("type") != "struct":
        raise InvalidJob(
            f"{FIELD}.format {value.format} writes a struct value column; the query's value is "
            f"{json.dumps(column)}: build it with struct(...) AS value in spec.job.sql"
        )
    subject = value.subject or f"{job.sink.topic}-value"
    client = registry_client(job, env)
    schema_type = SCHEMA_TYPES[value.format]
    try:
        if value.version is not None:
            found = _pinned(client, value.format, subject, value.version, column)
        else:
            schema = _derived(value.format, column, record_name(subject))
            found = RegisteredSchema(client.register(subject, schema, schema_type), None, schema)
    except RegistryUnavailable as exc:
        retried = "the start is retried with restartPolicy.backoff"
        raise NotStarted(f"{FIELD}: {exc}; {retried}") from None
    except (RegistryRefused, SchemaNotFound) as exc:
        raise InvalidJob(f"{FIELD}: subject {subject}: {exc}") from None
    options = {
        "valueFormat": value.format,
        "valueSchemaId": str(found.schema_id),
        "valueSchema": found.schema,
        "valueType": json.dumps(column),
    }
    if value.format == "protobuf":
        descriptors = _compiled(client, found, subject).compiled.descriptor_set
        options["valueDescriptors"] = base64.b64encode(descriptors).decode()
    return options


def _derived(schema_format: str, column: dict[str, Any], name: str) -> str:
    """The schema text a Confluent serializer would register for the column."""
    try:
        if schema_format == "protobuf":
            return protobuf_schema(column, name)
        derive = avro_schema if schema_format == "avro" else json_schema
        return json.dumps(derive(column, name))
    except UnwritableType as exc:
        raise InvalidJob(
            f"{FIELD}: the query's value cannot be written as {schema_format}: {exc}; cast it "
            "in spec.job.sql"
        ) from None


def _pinned(
    client: SchemaRegistryClient, schema_format: str, subject: str, version: int, column: dict
) -> RegisteredSchema:
    found = client.subject_version(subject, version)
    if found.schema_type != SCHEMA_TYPES[schema_format]:
        raise InvalidJob(
            f"{FIELD}.version: {subject} version {version} is a {found.schema_type} schema, "
            f"not {SCHEMA_TYPES[schema_format]}: set value.format to match or another subject"
        )
    if schema_format == "protobuf":
        found = _compiled(client, found, subject)  # compiled once: checked, then shipped
        problems = protobuf_problems(found, column, record_name(subject))
    else:
        problems = pinned_problems(schema_format, found.schema, column)
    if problems:
        raise InvalidJob(
            f"{FIELD}.version: {subject} version {version} cannot take the query's value: "
            f"{'; '.join(problems)}. Pin a version that does, or unset version to register "
            "the query's schema"
        )
    return found


def _compiled(
    client: SchemaRegistryClient, found: RegisteredSchema, subject: str
) -> ProtobufReaderSchema:
    """The Protobuf schema compiled by protoc, its first message chosen (a schema compiled
    already is returned as it is); InvalidJob where it does not compile."""
    try:
        return pinned_reader(found, client, None)
    except (InvalidSchema, UnsupportedSchema) as exc:
        raise InvalidJob(f"{FIELD}: subject {subject}: {exc}") from None


def protobuf_problems(pinned: ProtobufReaderSchema, column: dict[str, Any], name: str) -> list[str]:
    """Why a pinned Protobuf schema's first message cannot take the column: compared as the
    two read back (the reader's mapping of each), field by field."""
    try:
        theirs = column_type(pinned).jsonValue()
    except UnsupportedSchema as exc:
        return [str(exc)]
    ours_text = protobuf_schema(column, name)
    ours = column_type(RegisteredSchema(None, None, ours_text, "PROTOBUF")).jsonValue()
    fields = {f["name"]: f for f in theirs["fields"]}
    problems = []
    for field in ours["fields"]:
        their = fields.get(field["name"])
        if their is None:
            problems.append(f"it has no field {field['name']}")
        elif their["type"] != field["type"]:
            problems.append(f"its field {field['name']} is {json.dumps(their['type'])}, the "
                            f"query's is {json.dumps(field['type'])}")  # fmt: skip
        elif field["nullable"] and not their["nullable"]:
            problems.append(f"its field {field['name']} has no presence (a null would be "
                            "written as its default); the query's may be null")  # fmt: skip
    return problems
