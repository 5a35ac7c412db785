"""The options of a decoded column (valueFormat, keyFormat: avro, json, protobuf): the format,
the schema registry's connection, and which reader schema (a subject's version by a subject
name strategy, or one given inline), parsed into one `ValueDecoding` per column.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_app.api.option_values import OptionError, choice_option, int_option

# How the value and key columns are read: `raw` bytes (Spark's columns), or a format in the
# Confluent wire format (avro, json, protobuf), decoded with schemas from a schema registry
# (spark_app/formats/decoding.py, one module per format: spark_app/formats/value_formats.py).
# Each decoded column has options of its own (valueFormat, valueSubject, ...; keyFormat,
# keySubject, ...) and shares the registry's connection (schemaRegistry*).
FORMATS = ("avro", "json", "protobuf")
VALUE_FORMATS = ("raw", *FORMATS)
DECODED_COLUMNS = ("value", "key")
DECODED_USE = "valueFormat={0} (or keyFormat={0})".format(" / ".join(FORMATS))  # the registry's use
_COLUMN_OPTION_SUFFIXES = (
    "Subject",
    "SchemaVersion",
    "Schema",
    "SubjectStrategy",
    "RecordName",
    "MessageName",
)
_REGISTRY_OPTIONS = (
    "schemaRegistryUrl",
    "schemaRegistryUser",
    "schemaRegistryPassword",
    "schemaRegistryTimeoutMs",
    "schemaRegistryCaFile",
)
# Confluent's subject name strategies: the subject a producer's serializer registers a
# value's schema under, so the one the reader schema is looked up in (valueSubjectStrategy).
SUBJECT_STRATEGIES = ("topic", "record", "topic-record")
# An Avro full name: dotted names of letters, digits and underscores (not starting a digit);
# the spec's schemaRegistry.recordName has the same pattern.
RECORD_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
RECORD_NAME = re.compile(RECORD_NAME_PATTERN)


@dataclass(frozen=True)
class ValueDecoding:
    """A decoded column (the value's, or the key's: `column`) in a format such as avro, json
    or protobuf: the registry (basic auth and a CA file optional; one connection for both
    columns) and the reader schema: a subject's pinned version or its latest at query start,
    or a schema given inline (<column>Schema; `subject` is then None and the registry only
    serves writer schemas by id); with protobuf, the message in it (`message_name`; None: the
    first)."""

    registry_url: str
    subject: str | None
    version: int | str  # a version number, or "latest"
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never printed
    registry_timeout_ms: int = 60_000
    reader_schema: str | None = field(default=None, repr=False)  # <column>Schema; long
    ca_file: str | None = None  # schemaRegistryCaFile: the CA an https registry is verified with
    format: str = "avro"  # one of FORMATS
    message_name: str | None = None  # <column>MessageName: Protobuf's reader message
    column: str = "value"  # DECODED_COLUMNS: the column decoded, and its options' prefix

    def option(self, suffix: str) -> str:
        """This column's option of that suffix: option("Format") is valueFormat or keyFormat."""
        return f"{self.column}{suffix}"


def decodings(
    options: Mapping[str, str], topics: tuple[str, ...] | None
) -> tuple[ValueDecoding | None, ValueDecoding | None]:
    """The value's and the key's decoding (each None when raw); the registry's connection
    options are shared, so they need at least one of the two decoded."""
    value, key = (_column_decoding(options, topics, column) for column in DECODED_COLUMNS)
    if value is None and key is None:
        given = [name for name in _REGISTRY_OPTIONS if name.lower() in options]
        if given:
            raise OptionError(f"option {given[0]} is used only with {DECODED_USE}")
    return value, key


def _column_decoding(
    options: Mapping[str, str], topics: tuple[str, ...] | None, column: str
) -> ValueDecoding | None:
    column_format = choice_option(options, f"{column}Format", "raw", VALUE_FORMATS)
    if column_format == "raw":
        given = [name for name in _column_options(column) if name.lower() in options]
        if given:
            raise OptionError(
                f"option {given[0]} is used only with {column}Format={' / '.join(FORMATS)}"
            )
        return None
    url = _registry_url(options, f"{column}Format={column_format}")
    user, password = options.get("schemaregistryuser"), options.get("schemaregistrypassword")
    if password is not None and user is None:
        raise OptionError("option schemaRegistryPassword needs schemaRegistryUser")
    reader_schema = _inline_reader_schema(options, column, column_format)
    return ValueDecoding(
        registry_url=url,
        subject=None
        if reader_schema is not None
        else _subject(options, topics, column, column_format),
        version=_schema_version(options.get(f"{column}schemaversion", "latest"), column),
        username=user,
        password=password,
        registry_timeout_ms=int_option(options, "schemaRegistryTimeoutMs", 60_000, 1) or 60_000,
        reader_schema=reader_schema,
        ca_file=_ca_file(options, url),
        format=column_format,
        message_name=_message_name(options, column, column_format),
        column=column,
    )


def _column_options(column: str) -> tuple[str, ...]:
    """The options of one decoded column (valueSubject, keySubject, ...)."""
    return tuple(f"{column}{suffix}" for suffix in _COLUMN_OPTION_SUFFIXES)


def _registry_url(options: Mapping[str, str], used_with: str) -> str:
    url = options.get("schemaregistryurl", "").strip()
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise OptionError(
            f"option schemaRegistryUrl is required with {used_with}: the registry's "
            "Confluent-compatible API, http(s)://host:port[/path]"
        )
    if parsed.username is not None or parsed.password is not None:  # never echo the URL
        raise OptionError(
            "option schemaRegistryUrl must not hold credentials: use schemaRegistryUser "
            "and schemaRegistryPassword"
        )
    return url.rstrip("/")


def _ca_file(options: Mapping[str, str], url: str) -> str | None:
    """schemaRegistryCaFile: only for an https registry (an http one has no certificate)."""
    ca_file = options.get("schemaregistrycafile", "").strip() or None
    if ca_file is not None and not url.lower().startswith("https://"):
        raise OptionError(
            "option schemaRegistryCaFile needs an https schemaRegistryUrl (an http registry "
            "has no certificate to verify): use https or remove schemaRegistryCaFile"
        )
    return ca_file


def _message_name(options: Mapping[str, str], column: str, fmt: str) -> str | None:
    """<column>MessageName: the Protobuf message the column decodes to (a full name); unset,
    the <column>RecordName a record subject strategy names (Confluent's Protobuf serializer
    names the message it wrote), else the schema's first message (`protobuf_values`)."""
    option = f"{column}MessageName"
    name = options.get(option.lower(), "").strip() or None
    if fmt != "protobuf":
        if name is not None:
            raise OptionError(f"option {option} is used only with {column}Format=protobuf")
        return None
    if name is not None and not RECORD_NAME.fullmatch(name):
        raise OptionError(
            f"option {option}={name!r} is not a Protobuf message's full name "
            "(package.Message, e.g. shop.Order)"
        )
    return name or options.get(f"{column}RecordName".lower(), "").strip() or None


def _inline_reader_schema(options: Mapping[str, str], column: str, fmt: str) -> str | None:
    """<column>Schema: the reader schema as text (Avro's JSON, a JSON Schema, a `.proto`
    file), instead of a subject's version. Checked here as JSON only (.proto text not at
    all); `decoding.inline_reader_schema` checks it as a schema of the format."""
    name = f"{column}Schema"
    text = options.get(name.lower())
    if text is None:
        return None
    # a message name picks the message of an inline .proto too
    others = [o for o in _column_options(column) if o not in (name, f"{column}MessageName")]
    given = [o for o in others if o.lower() in options]
    if given:
        raise OptionError(
            f"options {name} and {given[0]} exclude each other: {name} is the reader "
            f"schema itself (no subject is looked up); remove one of them"
        )
    if fmt == "protobuf":
        return text  # .proto source: protoc checks it at query start
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise OptionError(
            f"option {name} is not JSON ({exc}): give the {fmt} schema's JSON"
        ) from None
    if fmt == "json" and not isinstance(parsed, dict):
        raise OptionError(f"option {name} must be a JSON Schema: a JSON object")
    if fmt == "avro" and (not isinstance(parsed, dict) or parsed.get("type") != "record"):
        raise OptionError(
            f'option {name} must be an Avro record schema ({{"type": "record", "name": ..., '
            f'"fields": [...]}}): the {column} column is a struct of its fields'
        )
    return text


def _subject(
    options: Mapping[str, str], topics: tuple[str, ...] | None, column: str, fmt: str
) -> str:
    """The reader schema's subject: <column>Subject if given, else the one the strategy
    (<column>SubjectStrategy, Confluent's) names, as a producer's serializer registers it."""
    strategy = choice_option(options, f"{column}SubjectStrategy", "topic", SUBJECT_STRATEGIES)
    record = _record_name(options, strategy, column)
    subject = options.get(f"{column}subject", "").strip()
    if subject:
        return subject  # an explicit subject wins over the strategy
    if strategy == "record":
        assert record is not None
        return record  # RecordNameStrategy: the record's full name, whatever the topic
    topic = _single_topic(topics, strategy, column, fmt)
    # TopicNameStrategy: <topic>-value (-key); TopicRecordNameStrategy: <topic>-<record name>
    return f"{topic}-{column}" if strategy == "topic" else f"{topic}-{record}"


def _record_name(options: Mapping[str, str], strategy: str, column: str) -> str | None:
    name = f"{column}RecordName"
    record = options.get(name.lower(), "").strip() or None
    if strategy == "topic":
        if record is not None:
            raise OptionError(
                f"option {name} is used only with {column}SubjectStrategy record or topic-record"
            )
        return None
    if record is None or not RECORD_NAME.fullmatch(record):
        raise OptionError(
            f"option {name} (the {column} record's full name, namespace.Name) is "
            f"required with {column}SubjectStrategy={strategy}"
            + (f"; {record!r} is not an Avro full name" if record else "")
        )
    return record


def _single_topic(topics: tuple[str, ...] | None, strategy: str, column: str, fmt: str) -> str:
    """The one subscribed topic a topic-based subject is named after: the reader schema is
    one for the whole query, so several topics (or a pattern) are refused, not guessed."""
    if topics is not None and len(topics) == 1:
        return topics[0]
    form = f"<topic>-{column}" if strategy == "topic" else f"<topic>-<{column}RecordName>"
    raise OptionError(
        f"option {column}Subject is required with {column}Format={fmt} unless exactly one "
        f"topic is subscribed ({column}SubjectStrategy={strategy}: then it is {form}); the "
        f"reader schema is one for the query, so name its subject, or use "
        f"{column}SubjectStrategy=record"
    )


def _schema_version(raw: str, column: str = "value") -> int | str:
    value = raw.strip().lower()
    if value == "latest":
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise OptionError(
        f"option {column}SchemaVersion={raw!r} must be latest or a version number >= 1"
    )
