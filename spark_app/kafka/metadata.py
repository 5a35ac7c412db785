"""Kafka look-ups of the driver-side source and of the operator: partitions, watermarks,
committed offsets, commits.

Every call is a series of fresh bounded attempts under one deadline (`spark_app.kafka.retry`:
it rides out a leader or coordinator change, a broker restart) and then raises
`KafkaUnavailable` naming the broker, so an unreachable cluster is a clear error rather than a
hang. A broker that refuses the client's
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
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, TypeVar

from spark_app.api.offsets import Epochs, Positions, TopicPartition
from spark_app.api.options import SourceOptions
from spark_app.kafka.errors import (
    KafkaUnavailable,
    SecurityErrors,
    UnknownTopic,
)
from spark_app.kafka.group_commits import commit_retried
from spark_app.kafka.retry import (
    DEADLINE_S,
    Attempts,
    GaveUp,
    NoAnswerYet,
    is_transient,
    kafka_error,
    retrying,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import (
        AdminClient,
        ClusterMetadata,
        ListOffsetsResultInfo,
        OffsetSpec,
    )

T = TypeVar("T")

INTERNAL_TOPIC = re.compile(r"^__")
# A topic (or partition) the answering broker does not know: deleted, or its metadata not
# there yet (UNKNOWN_TOPIC_OR_PART, librdkafka's _UNKNOWN_TOPIC and _UNKNOWN_PARTITION).
_UNKNOWN_TOPIC_CODES = frozenset({3, -188, -190})


def matching_topics(pattern: str, topics: Iterable[str]) -> list[str]:
    """The topics `subscribePattern` selects: Python `re` syntax, matched against the whole
    name (`re.fullmatch`, as Spark's own Kafka source matches a Java Pattern), internal `__`
    topics never."""
    compiled = re.compile(pattern)
    return [t for t in topics if compiled.fullmatch(t) and not INTERNAL_TOPIC.match(t)]


# How long a subscribed topic missing from the metadata is asked for again before it is
# unknown: brokers learn a newly created topic from the controller within a second or two.
METADATA_SETTLE_S = 5.0


class KafkaMetadata:
    def __init__(
        self,
        options: SourceOptions,
        timeout_s: float = DEADLINE_S,
        client_overrides: dict[str, str | int | bool] | None = None,
    ):
        self.options = options
        self.timeout_s = timeout_s
        self._overrides = dict(client_overrides or {})  # e.g. the operator's socket timeouts
        self._admin: AdminClient | None = None
        self._consumer: Consumer | None = None
        self._security = SecurityErrors()
        self._lock = threading.Lock()  # librdkafka handles are shared by two threads here
        self._stopping = threading.Event()

    def _clients(self) -> tuple[AdminClient, Consumer]:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        overrides = {**self._overrides, "error_cb": self._security}
        with self._lock:
            if self._consumer is None:
                group = self.options.group_id or "kafka-checkpointed-metadata"
                self._consumer = Consumer(self.options.client(**{**overrides, "group.id": group}))
            if self._admin is None:  # dropped after a failed attempt: fresh metadata
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

    def _unavailable(
        self, what: str, exc: BaseException, gave_up: GaveUp | None = None
    ) -> KafkaUnavailable:
        security = self.security_error()
        if security is not None:
            return security
        tries = f"{gave_up.attempts} attempt(s) in {gave_up.waited_s:.0f}s" if gave_up else ""
        return KafkaUnavailable(
            f"Kafka at {self.options.bootstrap_servers} did not answer {what} within "
            f"{self.timeout_s:.0f}s ({tries}{'; last: ' if tries else ''}{exc}); check "
            "kafka.bootstrap.servers and that the brokers are reachable"
        )

    def _call(
        self,
        what: str,
        call: Callable[[float], T],
        refresh_admin: bool = False,
        topics: Collection[str] = (),
        deadline_s: float | None = None,
    ) -> T:
        """`call(timeout)` as fresh bounded attempts under the one deadline (spark_app.kafka.retry):
        between attempts a refused login or certificate ends the wait, a topic found deleted
        ends it naming the topic, and with `refresh_admin` the admin client is replaced, so
        the next attempt starts from fresh metadata instead of a leader that moved."""

        def refresh(failure: BaseException) -> None:
            if self._stopping.is_set() or self.security_error() is not None:
                raise failure
            error = kafka_error(failure)
            if topics and error is not None and error.code() in _UNKNOWN_TOPIC_CODES:
                self._check_topics(topics)
            if refresh_admin:
                with self._lock:
                    self._admin = None  # no close(): another thread may still use the old one

        def transient(failure: BaseException) -> bool:
            error = kafka_error(failure)
            unknown = bool(topics) and error is not None and error.code() in _UNKNOWN_TOPIC_CODES
            return unknown or is_transient(failure)

        if self._stopping.is_set():
            raise KafkaUnavailable(f"{what}: not asked, the client is stopping")
        try:
            deadline = self.timeout_s if deadline_s is None else deadline_s
            return retrying(call, Attempts(deadline_s=deadline), refresh, transient)
        except GaveUp as exc:
            raise self._unavailable(what, exc.last, exc) from exc.last
        except UnknownTopic:
            raise
        except Exception as exc:  # refresh stopped early (a refused login or certificate)
            raise self._unavailable(what, exc) from exc

    def _check_topics(self, topics: Iterable[str]) -> None:
        """Raises UnknownTopic when a topic is gone from the cluster's metadata (a metadata
        request that fails itself decides nothing: the call is retried)."""
        admin, _ = self._clients()
        try:
            known = admin.list_topics(timeout=5).topics
        except Exception:
            return
        missing = sorted({t for t in topics if t not in known})
        if missing:
            raise UnknownTopic(
                f"topic(s) {', '.join(missing)} not found at {self.options.bootstrap_servers}"
                " (deleted while the job reads it?); recreate it, or change subscribe and "
                "start from a fresh checkpoint"
            )

    def topic_partitions(self) -> list[TopicPartition]:
        """Partitions of the subscribed topics (or of the topics matching the pattern)."""
        metadata = self._metadata()
        if self.options.topics is not None:
            missing = self._missing(metadata)
            settled = time.monotonic() + METADATA_SETTLE_S
            while missing and time.monotonic() < settled:
                # each broker learns a new topic a moment after the controller created it:
                # ask again, from fresh metadata, before calling the topic unknown
                time.sleep(0.5)
                with self._lock:
                    self._admin = None
                metadata = self._metadata()
                missing = self._missing(metadata)
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

    def _metadata(self) -> ClusterMetadata:
        return self._call(
            "a metadata request",
            lambda timeout: self._clients()[0].list_topics(timeout=timeout),
            refresh_admin=True,
        )

    def _missing(self, metadata: ClusterMetadata) -> list[str]:
        return [t for t in self.options.topics or () if t not in metadata.topics]

    def watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) per partition; the end is the LSO under read_committed."""
        return self.log_ends(tps)[0]

    def log_ends(
        self, tps: Iterable[TopicPartition]
    ) -> tuple[dict[TopicPartition, tuple[int, int]], Epochs]:
        """`watermarks`, and the leader epoch each log end came with (where the broker gave
        one): the epoch of the leader whose log held every offset below that end, so an
        offset up to it and this epoch can be validated later (KIP-320)."""
        from confluent_kafka.admin import OffsetSpec

        tps = list(tps)
        if not tps:
            return {}, {}
        low = self._list_offsets(tps, OffsetSpec.earliest(), "a ListOffsets request")
        epochs: Epochs = {}
        high = self._list_offsets(tps, OffsetSpec.latest(), "a ListOffsets request", epochs=epochs)
        return {tp: (low[tp], high[tp]) for tp in tps}, epochs

    def _list_offsets(
        self,
        tps: list[TopicPartition],
        spec: OffsetSpec,
        what: str,
        lowest: int = 0,
        epochs: Epochs | None = None,
    ) -> dict[TopicPartition, int]:
        """One ListOffsets of `spec` for every partition, through the admin client: a failed
        attempt replaces it, so the next one asks the leaders of fresh metadata (a consumer
        was seen asking a dead leader until its deadline). An offset below `lowest` is no
        answer (librdkafka gave -1001 without an error for a partition whose leader was just
        killed): retried, never taken for a log end. `epochs` receives the leader epoch of
        each answer that has one (of the same answer as its offset)."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as KafkaTP

        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.options.isolation_level == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        request = {KafkaTP(t, p): spec for t, p in tps}

        def list_offsets(timeout: float) -> dict[KafkaTP, ListOffsetsResultInfo]:
            admin, _ = self._clients()  # a fresh one after a failed attempt
            futures = admin.list_offsets(
                request, isolation_level=isolation, request_timeout=timeout
            )
            answer = {k: f.result(timeout=timeout + 1) for k, f in futures.items()}
            invalid = {
                f"{k.topic}-{k.partition}": a.offset for k, a in answer.items() if a.offset < lowest
            }
            if invalid:  # a leader just lost: a log end of -1001 would look like data loss
                raise NoAnswerYet(f"ListOffsets answered no offset for {invalid}")
            return answer

        answer = self._call(what, list_offsets, refresh_admin=True, topics={t for t, _ in tps})
        if epochs is not None:
            epochs.update(
                {
                    (k.topic, k.partition): a.leader_epoch
                    for k, a in answer.items()
                    if a.leader_epoch is not None and a.leader_epoch >= 0
                }
            )
        return {(k.topic, k.partition): a.offset for k, a in answer.items()}

    def committed(
        self,
        tps: Iterable[TopicPartition],
        timeout_s: float | None = None,
        epochs: Epochs | None = None,
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets, within `timeout_s` (else the client's deadline).
        `epochs` receives the leader epoch committed with each offset that has one (KIP-320:
        none for offsets set by hand or committed by an older version)."""
        from confluent_kafka import TopicPartition as KafkaTP

        _, consumer = self._clients()
        request = [KafkaTP(t, p) for t, p in tps]
        answer = self._call(
            "an OffsetFetch request",
            lambda timeout: consumer.committed(request, timeout=timeout),
            deadline_s=timeout_s,
        )
        if epochs is not None:
            epochs.update(
                {
                    (k.topic, k.partition): k.leader_epoch
                    for k in answer
                    if k.offset >= 0 and k.leader_epoch is not None and k.leader_epoch >= 0
                }
            )
        return {(k.topic, k.partition): (k.offset if k.offset >= 0 else None) for k in answer}

    def offsets_for_time(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is at or after `timestamp_ms`, per partition;
        None where no record is that recent."""
        from confluent_kafka.admin import OffsetSpec

        spec = OffsetSpec.for_timestamp(timestamp_ms)
        # -1: no record that recent
        answer = self._list_offsets(list(tps), spec, "a ListOffsets-by-time request", lowest=-1)
        return {tp: (offset if offset >= 0 else None) for tp, offset in answer.items()}

    def commit(self, offsets: Positions) -> None:
        """A synchronous standalone commit of the group (no subscription, no rebalance),
        retried through a coordinator move. Raises the client's KafkaException as it comes
        when the broker refuses it while the group has live members (UNKNOWN_MEMBER_ID,
        ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), and the caller says what that means."""
        _, consumer = self._clients()
        commit_retried(consumer, offsets, self.timeout_s)

    def stop(self) -> None:
        """Ends the calls in flight after their current attempt and refuses new ones: a
        shutdown waits for one attempt, not for a whole deadline of retries."""
        self._stopping.set()

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
            self._consumer = self._admin = None
