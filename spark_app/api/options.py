"""Options of the `kafka_checkpointed` source, parsed once from Spark's string options.

Spark hands a data source a case-insensitive map of strings. This module turns it into a
frozen, picklable object and names the option in every error. Option names mirror Spark's
built-in Kafka source; `kafka.*` options pass through to the Kafka client.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_app.api.offsets import parse_starting_offsets

_RESET_STRATEGIES = ("earliest", "latest", "error")
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
# Executors' read path: native (records straight into Arrow, the streamingjob_native
# module) when it can be imported, else pure Python; `native` fails without it. The driver's
# STREAMJOB_READ_PATH sets the default (for jobs whose manifest cannot name the option).
READ_PATHS = ("auto", "native", "python")
READ_PATH_ENV = "STREAMJOB_READ_PATH"
# The native path's engine: `fetch` (Kafka's Fetch protocol decoded straight into Arrow, for
# the client settings it understands), `librdkafka` (its consumer, every setting), `auto`
# (fetch when it can, else librdkafka).
NATIVE_ENGINES = ("auto", "fetch", "librdkafka")
NATIVE_ENGINE_ENV = "STREAMJOB_NATIVE_ENGINE"  # its default, as STREAMJOB_READ_PATH
# Client properties this source sets itself: letting a user override them would break
# range reads (auto.offset.reset), commits (enable.auto.commit) or planning (isolation).
RESERVED_CLIENT_KEYS = {
    "enable.auto.commit": "the source commits on checkpoints (commitOffsetsOnCheckpoints)",
    "auto.offset.reset": "use offsetResetStrategy (executors always use 'error')",
    "isolation.level": "use the isolationLevel option",
    "group.id": "use kafka.group.id",
}
# How the value and key columns are read: `raw` bytes (Spark's columns), or a format in the
# Confluent wire format (avro, json, protobuf), decoded with schemas from a schema registry
# (spark_app/formats/decoding.py, one module per format: spark_app/formats/value_formats.py). Each
# decoded column has options of its own (valueFormat, valueSubject, ...; keyFormat, keySubject, ...)
# and shares the registry's connection (schemaRegistry*).
# the formats decoded with a registry's schemas (spark_app.formats.value_formats: a module each)
FORMATS = ("avro", "json", "protobuf")
VALUE_FORMATS = ("raw", *FORMATS)
DECODED_COLUMNS = ("value", "key")
_DECODED = "valueFormat={0} (or keyFormat={0})".format(" / ".join(FORMATS))  # the registry's use
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
_SECRET_KEY = re.compile(r"password|secret|token|jaas|sasl\.oauthbearer\.config|key$", re.I)


class OptionError(ValueError):
    """An option that cannot work, named, with the fix."""


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option {name}={raw!r} must be true or false")


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name}={raw!r} must be an integer") from None
    if value < minimum:
        raise OptionError(f"option {name}={value} must be >= {minimum}")
    return value


def _choice(options: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = options.get(name.lower(), default).strip().lower()
    if value not in choices:
        raise OptionError(f"option {name}={value!r} must be one of {', '.join(choices)}")
    return value


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


def _decodings(
    options: Mapping[str, str], topics: tuple[str, ...] | None
) -> tuple[ValueDecoding | None, ValueDecoding | None]:
    """The value's and the key's decoding (each None when raw); the registry's connection
    options are shared, so they need at least one of the two decoded."""
    value, key = (_column_decoding(options, topics, column) for column in DECODED_COLUMNS)
    if value is None and key is None:
        given = [name for name in _REGISTRY_OPTIONS if name.lower() in options]
        if given:
            raise OptionError(f"option {given[0]} is used only with {_DECODED}")
    return value, key


def _column_decoding(
    options: Mapping[str, str], topics: tuple[str, ...] | None, column: str
) -> ValueDecoding | None:
    column_format = _choice(options, f"{column}Format", "raw", VALUE_FORMATS)
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
        registry_timeout_ms=_int(options, "schemaRegistryTimeoutMs", 60_000, 1) or 60_000,
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
    strategy = _choice(options, f"{column}SubjectStrategy", "topic", SUBJECT_STRATEGIES)
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


@dataclass(frozen=True)
class DeadLetterTarget:
    """deadLetterTopic: where records that cannot be decoded go (spark_app/sinks/dead_letter.py):
    the topic, its client settings (bootstrap servers, credentials), the job and epoch the
    copies name, and the group whose name keys the writers (unique per job, as its offsets)."""

    topic: str
    client: Mapping[str, str] = field(repr=False)  # credentials: never printed
    job: str
    epoch: int
    group: str

    @property
    def progress_group(self) -> str:
        return f"{self.group}.dead-letter"

    def transactional_id(self, topic: str, partition: int) -> str:
        return f"streamingjob.{self.group}.dead-letter.{topic}.{partition}"


# client properties a dead-letter producer shares with the source: how to reach and log in
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "client.dns.", "broker.address.family")


def _dead_letter(
    options: Mapping[str, str], source: tuple[str, str | None, dict[str, str]], decoded: bool
) -> DeadLetterTarget | None:
    """deadLetterTopic: where records that cannot be decoded go (spark_app/sinks/dead_letter.py),
    on the source's cluster and credentials unless deadLetterBootstrapServers names another."""
    topic = options.get("deadlettertopic", "").strip()
    if not topic:
        return None
    bootstrap, group_id, client = source
    if not decoded:
        raise OptionError(f"option deadLetterTopic is used only with {_DECODED}")
    if not group_id:
        raise OptionError(
            "option deadLetterTopic needs kafka.group.id: its progress is kept for the group "
            "<group>.dead-letter"
        )
    connection = {k: v for k, v in client.items() if k.startswith(_CONNECTION_PREFIXES)}
    bootstrap = options.get("deadletterbootstrapservers", "").strip() or bootstrap
    return DeadLetterTarget(
        topic=topic,
        client={"bootstrap.servers": bootstrap, **connection},
        job=options.get("jobname", "").strip() or group_id,
        epoch=_int(options, "jobEpoch", 0, 0) or 0,
        group=group_id,
    )


def _client_config(raw: Mapping[str, str]) -> tuple[str, str | None, dict[str, str]]:
    """The kafka.* options, their keys' case kept: bootstrap servers, group id and the
    client's other properties (none that the source sets itself)."""
    client = {k[len("kafka.") :]: v for k, v in raw.items() if k.lower().startswith("kafka.")}
    bootstrap = client.pop("bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    group_id = client.pop("group.id", None)
    for key, why in RESERVED_CLIENT_KEYS.items():
        if key in client:
            raise OptionError(f"option kafka.{key} is managed by the source: {why}")
    return bootstrap, group_id, client


def _subscription(options: Mapping[str, str]) -> tuple[tuple[str, ...] | None, str | None]:
    """The topics (subscribe) or the pattern (subscribePattern): exactly one is set."""
    subscribe = options.get("subscribe")
    pattern = options.get("subscribepattern")
    if (subscribe is None) == (pattern is None):
        raise OptionError("set exactly one of the options subscribe and subscribePattern")
    topics = None
    if subscribe is not None:
        topics = tuple(sorted({t.strip() for t in subscribe.split(",") if t.strip()}))
        if not topics:
            raise OptionError("option subscribe must name at least one topic")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option subscribePattern={pattern!r}: {exc}") from None
    return topics, pattern


def _starting_offsets(options: Mapping[str, str]) -> str:
    starting = options.get("startingoffsets", "committed").strip()
    try:
        parse_starting_offsets(starting)
    except ValueError as exc:
        raise OptionError(f"option {exc}") from None
    return starting


def _commit_offsets(options: Mapping[str, str], group_id: str | None, starting: str) -> bool:
    """commitOffsetsOnCheckpoints; committing, and starting from committed offsets, need a
    group."""
    commit = _bool(options, "commitOffsetsOnCheckpoints", True)
    if commit and not group_id:
        raise OptionError(
            "option kafka.group.id is required while commitOffsetsOnCheckpoints is true "
            "(or set commitOffsetsOnCheckpoints=false)"
        )
    if starting == "committed" and not group_id:
        raise OptionError(
            "startingOffsets=committed needs kafka.group.id to know whose offsets to use"
        )
    return commit


def redact(config: Mapping[str, str]) -> dict[str, str]:
    """A copy of client properties that is safe to log."""
    return {k: ("***" if _SECRET_KEY.search(k) else v) for k, v in config.items()}


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    group_id: str | None
    starting_offsets: str
    offset_reset_strategy: str
    commit_offsets_on_checkpoints: bool
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    partition_discovery_interval_ms: int
    isolation_level: str
    poll_timeout_ms: int
    min_fetch_interval_ms: int
    max_records_per_batch: int
    report_path: str | None
    drain_path: str | None
    read_path: str = "auto"
    native_engine: str = "auto"
    value_decoding: ValueDecoding | None = None
    key_decoding: ValueDecoding | None = None  # keyFormat avro/json; the same registry
    dead_letter: DeadLetterTarget | None = None
    client_config: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # never print credentials passed through kafka.*
        return (
            f"SourceOptions(bootstrap={self.bootstrap_servers!r}, topics={self.topics!r}, "
            f"pattern={self.topic_pattern!r}, group={self.group_id!r}, "
            f"start={self.starting_offsets!r}, client={redact(self.client_config)!r})"
        )

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        # Spark's option map is case-insensitive; keep kafka.* keys' case for the client.
        options = {k.lower(): v for k, v in raw.items()}
        bootstrap, group_id, client = _client_config(raw)
        topics, pattern = _subscription(options)
        starting = _starting_offsets(options)
        commit = _commit_offsets(options, group_id, starting)
        decoding, key_decoding = _decodings(options, topics)
        decoded = decoding is not None or key_decoding is not None
        dead_letter = _dead_letter(options, (bootstrap, group_id, client), decoded)
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            topic_pattern=pattern,
            group_id=group_id,
            starting_offsets=starting,
            offset_reset_strategy=_choice(
                options, "offsetResetStrategy", "earliest", _RESET_STRATEGIES
            ),
            commit_offsets_on_checkpoints=commit,
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            partition_discovery_interval_ms=_int(options, "partitionDiscoveryIntervalMs", 30_000, 0)
            or 0,
            isolation_level=_choice(options, "isolationLevel", "read_committed", _ISOLATION_LEVELS),
            poll_timeout_ms=_int(options, "pollTimeoutMs", 120_000, 1) or 120_000,
            min_fetch_interval_ms=_int(options, "minFetchIntervalMs", 100, 0) or 0,
            max_records_per_batch=_int(options, "maxRecordsPerBatch", 10_000, 1) or 10_000,
            report_path=options.get("reportpath"),
            drain_path=options.get("drainpath"),
            read_path=_choice(
                options, "readPath", os.environ.get(READ_PATH_ENV, "auto"), READ_PATHS
            ),
            native_engine=_choice(
                options, "nativeEngine", os.environ.get(NATIVE_ENGINE_ENV, "auto"), NATIVE_ENGINES
            ),
            value_decoding=decoding,
            key_decoding=key_decoding,
            dead_letter=dead_letter,
            client_config=client,
        )

    def client(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka configuration shared by every client this source creates (overrides may
        include callbacks such as `error_cb`)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "isolation.level": self.isolation_level,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # librdkafka's own log lines go to stderr; errors still surface as exceptions.
            "log_level": 3,
        }
        config.update(self.client_config)
        config.update(overrides)
        return config
