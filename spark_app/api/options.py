"""Options of the `kafka_checkpointed` source, parsed once from Spark's string options.

Spark hands a data source a case-insensitive map of strings. This module turns it into a
frozen, picklable object and names the option in every error. Option names mirror Spark's
built-in Kafka source; `kafka.*` options pass through to the Kafka client.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_app.api.dead_letter_options import DeadLetterTarget, dead_letter_target
from spark_app.api.decoding_options import ValueDecoding, decodings
from spark_app.api.offsets import parse_starting_offsets
from spark_app.api.option_values import OptionError, bool_option, choice_option, int_option

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
_SECRET_KEY = re.compile(r"password|secret|token|jaas|sasl\.oauthbearer\.config|key$", re.I)


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
    commit = bool_option(options, "commitOffsetsOnCheckpoints", True)
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
    announce_task_ranges: bool = False  # for the exactly-once Kafka sink: sinks/task_ranges.py

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
        decoding, key_decoding = decodings(options, topics)
        decoded = decoding is not None or key_decoding is not None
        dead_letter = dead_letter_target(options, (bootstrap, group_id, client), decoded)
        return cls(
            bootstrap_servers=bootstrap,
            topics=topics,
            topic_pattern=pattern,
            group_id=group_id,
            starting_offsets=starting,
            offset_reset_strategy=choice_option(
                options, "offsetResetStrategy", "earliest", _RESET_STRATEGIES
            ),
            commit_offsets_on_checkpoints=commit,
            max_offsets_per_trigger=int_option(options, "maxOffsetsPerTrigger", None, 1),
            fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
            include_headers=bool_option(options, "includeHeaders", False),
            partition_discovery_interval_ms=int_option(
                options, "partitionDiscoveryIntervalMs", 30_000, 0
            )
            or 0,
            isolation_level=choice_option(
                options, "isolationLevel", "read_committed", _ISOLATION_LEVELS
            ),
            poll_timeout_ms=int_option(options, "pollTimeoutMs", 120_000, 1) or 120_000,
            min_fetch_interval_ms=int_option(options, "minFetchIntervalMs", 100, 0) or 0,
            max_records_per_batch=int_option(options, "maxRecordsPerBatch", 10_000, 1) or 10_000,
            report_path=options.get("reportpath"),
            drain_path=options.get("drainpath"),
            read_path=choice_option(
                options, "readPath", os.environ.get(READ_PATH_ENV, "auto"), READ_PATHS
            ),
            native_engine=choice_option(
                options, "nativeEngine", os.environ.get(NATIVE_ENGINE_ENV, "auto"), NATIVE_ENGINES
            ),
            value_decoding=decoding,
            key_decoding=key_decoding,
            dead_letter=dead_letter,
            client_config=client,
            announce_task_ranges=bool_option(options, "announceTaskRanges", False),
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
