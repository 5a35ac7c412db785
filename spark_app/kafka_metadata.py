"""Kafka look-ups of the driver-side source and of the operator: partitions, watermarks,
committed offsets, commits.

Every call has a bounded timeout and raises `KafkaUnavailable` naming the broker, so an
unreachable cluster is a clear error rather than a hang. A broker that refuses the client's
SASL credentials or whose certificate does not verify is told apart (`KafkaAuthFailed`,
`KafkaTLSFailed`, both `KafkaUnavailable`): librdkafka reports these only through its error
callback while the request itself just times out with a transport error, so the clients
record them and a metadata request gives up as soon as one is seen.

Clients are created on first use: the reader that owns this object is pickled and must not
hold a live client. An owner keeps one `KafkaMetadata` per connection setting and calls
`close()` once no look-up is in flight.

Committed offsets are read through a consumer of the group, never with the admin API's
ListConsumerGroupOffsets: librdkafka's admin client dereferences the (absent) consumer group
handle when an OffsetFetch answer asks it to re-query the coordinator (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE: a broker whose offsets topic was just created or is reloading),
and the process dies with SIGSEGV in its main thread.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from spark_app.offsets import Positions, TopicPartition
from spark_app.options import SourceOptions

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

INTERNAL_TOPIC = re.compile(r"^__")


def matching_topics(pattern: str, topics: Iterable[str]) -> list[str]:
    """The topics `subscribePattern` selects: Python `re` syntax, matched against the whole
    name (`re.fullmatch`, as Spark's own Kafka source matches a Java Pattern), internal `__`
    topics never."""
    compiled = re.compile(pattern)
    return [t for t in topics if compiled.fullmatch(t) and not INTERNAL_TOPIC.match(t)]


class KafkaUnavailable(RuntimeError):
    pass


class KafkaAuthFailed(KafkaUnavailable):
    """The broker refused the SASL credentials (wrong user name, password or mechanism)."""


class KafkaTLSFailed(KafkaUnavailable):
    """The TLS handshake failed: most often the broker's certificate does not verify
    against the configured CA (or the host name is not among its names)."""


class UnknownTopic(RuntimeError):
    pass


class SecurityErrors:
    """librdkafka's error callback: keeps the last authentication or TLS error (its text
    names the broker and the cause, never a credential)."""

    def __init__(self) -> None:
        self.last: tuple[type[KafkaUnavailable], str] | None = None

    def __call__(self, error) -> None:
        from confluent_kafka import KafkaError

        kinds = {KafkaError._AUTHENTICATION: KafkaAuthFailed, KafkaError._SSL: KafkaTLSFailed}
        kind = kinds.get(error.code())
        if kind is not None:
            self.last = (kind, error.str())

    def error(self, bootstrap: str) -> KafkaUnavailable | None:
        if self.last is None:
            return None
        kind, text = self.last
        cause = (
            "authentication failed (SASL): the broker refused the user name or password"
            if kind is KafkaAuthFailed
            else "certificate verify failed (TLS): the broker's certificate is not signed by "
            "the configured CA or does not name the host"
        )
        return kind(f"Kafka at {bootstrap}: {cause} ({text})")


class KafkaMetadata:
    def __init__(
        self,
        options: SourceOptions,
        timeout_s: float = 30.0,
        client_overrides: dict[str, str | int | bool] | None = None,
    ):
        self.options = options
        self.timeout_s = timeout_s
        self._overrides = dict(client_overrides or {})  # e.g. the operator's socket timeouts
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._security = SecurityErrors()
        self._lock = threading.Lock()  # librdkafka handles are shared by two threads here

    def _clients(self):
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        with self._lock:
            if self._consumer is None:
                group = self.options.group_id or "kafka-checkpointed-metadata"
                overrides = {**self._overrides, "error_cb": self._security}
                self._consumer = Consumer(self.options.client(**{**overrides, "group.id": group}))
                self._admin = AdminClient(
                    {
                        k: v
                        for k, v in self.options.client(**overrides).items()
                        if not k.startswith(("enable.auto", "isolation"))
                    }
                )
        return self._admin, self._consumer

    def security_error(self) -> KafkaUnavailable | None:
        """The authentication or TLS error the clients saw, if any (served from their
        queues first: librdkafka calls the error callback only inside poll)."""
        with self._lock:
            for client in (self._admin, self._consumer):
                if client is not None:
                    client.poll(0)
        return self._security.error(self.options.bootstrap_servers)

    def _unavailable(self, what: str, exc: BaseException) -> KafkaUnavailable:
        security = self.security_error()
        if security is not None:
            return security
        return KafkaUnavailable(
            f"Kafka at {self.options.bootstrap_servers} did not answer {what} within "
            f"{self.timeout_s:.0f}s ({exc}); check kafka.bootstrap.servers and that the "
            "brokers are reachable"
        )

    def topic_partitions(self) -> list[TopicPartition]:
        """Partitions of the subscribed topics (or of the topics matching the pattern)."""
        admin, _ = self._clients()
        deadline = time.monotonic() + self.timeout_s
        while True:  # short tries: a refused login or certificate ends the wait early
            try:
                metadata = admin.list_topics(
                    timeout=min(1.0, max(0.1, deadline - time.monotonic()))
                )
                break
            except Exception as exc:
                if time.monotonic() >= deadline or self.security_error() is not None:
                    raise self._unavailable("a metadata request", exc) from exc
        if self.options.topics is not None:
            missing = [t for t in self.options.topics if t not in metadata.topics]
            if missing:
                raise UnknownTopic(
                    f"topic(s) {', '.join(missing)} not found at "
                    f"{self.options.bootstrap_servers} (option subscribe); create them or "
                    "fix the topic names"
                )
            names: Iterable[str] = self.options.topics
        else:
            names = matching_topics(self.options.topic_pattern or "", metadata.topics)
        return sorted(
            (topic, partition) for topic in names for partition in metadata.topics[topic].partitions
        )

    def watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) per partition; the end is the LSO under read_committed."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaTP
        from confluent_kafka.admin import OffsetSpec

        tps = list(tps)
        if not tps:
            return {}
        admin, _ = self._clients()
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.options.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        result: dict[TopicPartition, list[int]] = {}
        for index, spec in enumerate((OffsetSpec.earliest(), OffsetSpec.latest())):
            request = {KafkaTP(t, p): spec for t, p in tps}

            def list_offsets(left: float, request=request):
                futures = admin.list_offsets(
                    request, isolation_level=isolation, request_timeout=left
                )
                return {k: f.result(timeout=left).offset for k, f in futures.items()}

            for ktp, offset in self._retrying("a ListOffsets request", list_offsets).items():
                result.setdefault((ktp.topic, ktp.partition), [0, 0])[index] = offset
        return {tp: (low, high) for tp, (low, high) in result.items()}

    def _retrying(self, what: str, call, timeout_s: float | None = None):
        """Retries transient errors (a broker restarting, a leader or coordinator moving)
        until the timeout (`timeout_s`, else the client's); then the error names the broker
        and the fix."""
        from confluent_kafka import KafkaError, KafkaException

        # Leaders and coordinators move (a broker restarts, a partition fails over):
        # librdkafka does not flag all of these as retriable in admin results.
        transient = {
            KafkaError.NOT_COORDINATOR,
            KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
            KafkaError.FENCED_LEADER_EPOCH,
            KafkaError.UNKNOWN_LEADER_EPOCH,
            KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT,
            KafkaError._NOENT,  # "No leaders found": partitions without a leader for a moment
        }
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        delay = 0.05
        while True:
            try:
                return call(max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = isinstance(error, KafkaError) and (
                    error.retriable() or error.code() in transient
                )
                if not retriable or time.monotonic() + delay >= deadline:
                    raise self._unavailable(what, exc) from exc
            except Exception as exc:
                raise self._unavailable(what, exc) from exc
            time.sleep(delay)
            delay = min(1.0, delay * 2)

    def committed(
        self, tps: Iterable[TopicPartition], timeout_s: float | None = None
    ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import TopicPartition as KafkaTP

        _, consumer = self._clients()
        request = [KafkaTP(t, p) for t, p in tps]
        answer = self._retrying(
            "an OffsetFetch request",
            lambda left: consumer.committed(request, timeout=left),
            timeout_s,
        )
        return {(k.topic, k.partition): (k.offset if k.offset >= 0 else None) for k in answer}

    def offsets_for_time(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import TopicPartition as KafkaTP

        _, consumer = self._clients()
        try:
            answer = consumer.offsets_for_times(
                [KafkaTP(t, p, timestamp_ms) for t, p in tps], timeout=self.timeout_s
            )
        except Exception as exc:
            raise self._unavailable("a ListOffsets-by-time request", exc) from exc
        return {(k.topic, k.partition): (k.offset if k.offset >= 0 else None) for k in answer}

    def commit(self, offsets: Positions) -> None:
        """A synchronous standalone commit of the group (no subscription, no rebalance).
        Raises the client's KafkaException as it comes: the broker refuses it while the
        group has live members (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS),
        and the caller says what that means."""
        from confluent_kafka import TopicPartition as KafkaTP

        _, consumer = self._clients()
        answer = consumer.commit(
            offsets=[KafkaTP(t, p, o) for (t, p), o in sorted(offsets.items())],
            asynchronous=False,
        )
        failed = [tp for tp in answer or () if tp.error is not None]
        if failed:
            from confluent_kafka import KafkaException

            raise KafkaException(failed[0].error)

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
            self._consumer = self._admin = None


def group_committer(options: SourceOptions, timeout_s: float = 30.0):
    """A commit function for OffsetCommitter: a standalone commit to the group (no
    subscription, so no rebalance), with its own client so it never blocks planning."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTP

    if options.group_id is None:  # commits are only made for a group (SourceOptions)
        raise ValueError("no kafka.group.id to commit to")
    consumer = Consumer(options.client(**{"group.id": options.group_id}))

    def commit(offsets: Positions) -> None:
        consumer.commit(
            offsets=[KafkaTP(t, p, o) for (t, p), o in sorted(offsets.items())],
            asynchronous=False,
        )

    return commit
