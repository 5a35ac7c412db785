"""The operator's own view of Kafka: the group's committed offsets and the log end offsets.

The look-ups are the source's (`spark_app.kafka.metadata.KafkaMetadata`), built from the
options the driver's source gets (`spark_app.kafka.config.source_options`, credentials from
the job's Secret as the pod gets them): the same partitions (internal `__` topics hidden from
patterns), log ends (the LSO under read_committed) and committed offsets, read through a
consumer of the group. Never the admin API's ListConsumerGroupOffsets: librdkafka's admin
client crashes the process (SIGSEGV in its main thread) when an OffsetFetch answer asks it to
re-query the coordinator, as a broker whose offsets topic was just created does.

Clients: one long-lived `KafkaMetadata` per connection setting, shared by the jobs that use
it, closed once no job uses it and no reading is in flight; never dropped under a request.

Readings run on a small dedicated thread pool, each request retried in fresh bounded
attempts through a leader or coordinator change under one deadline
(`spark_app.kafka.retry`); a reconcile never waits for Kafka: it takes the latest cached
reading and asks for a fresh one when it is old. An unreachable broker or an unknown topic
becomes a `problem` naming the spec field, never an exception in the reconcile (after good
readings, only once it has lasted the deadline: `held_back`); a broker
that refuses the job's SASL credentials or whose certificate does not verify against the
job's CA is a problem of its own (KafkaAuthFailed, KafkaTLSFailed) naming the Secret.
Credentials (and the CA, passed as `ssl.ca.pem` in memory) are used to connect and are never
logged or stored outside the client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from spark_app.api.offsets_admin import OffsetsRequest, OffsetsResult
from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.api.source_spec import SourceSpec
from spark_app.kafka import offsets_run
from spark_app.kafka.config import source_options
from spark_app.kafka.errors import (
    KafkaAuthFailed,
    KafkaTLSFailed,
    KafkaUnavailable,
    UnknownTopic,
)
from spark_app.kafka.metadata import KafkaMetadata
from spark_app.kafka.retry import DEADLINE_S
from streamingjob_operator.rules.status import KafkaView

log = logging.getLogger(__name__)

ConnectionKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class KafkaTarget:
    """What to read: a job's source as the source's Spark options (credentials included,
    never shown by repr)."""

    options: ConnectionKey
    # how problems name the job's Secrets: (SASL credentials, CA); not part of the connection
    secrets: tuple[str, str] = field(
        default=("spec.kafkaCredentials", "spec.kafkaCredentials.caSecret"), compare=False
    )

    @classmethod
    def of(
        cls,
        source: SourceSpec,
        credentials: Mapping[str, str],
        secrets: tuple[str, str] | None = None,
    ) -> KafkaTarget:
        """`credentials`: the KAFKA_* environment the driver pod gets from the Secret (the
        CA as KAFKA_SSL_CA_PEM)."""
        options = tuple(sorted(source_options(source, credentials).items()))
        return cls(options, secrets) if secrets else cls(options)

    def __repr__(self) -> str:
        shown = ("kafka.bootstrap.servers", "subscribe", "subscribePattern", "kafka.group.id")
        return f"KafkaTarget({ {k: v for k, v in self.options if k in shown} })"


def client_overrides(timeout: float) -> dict[str, Any]:
    """The operator's client settings on top of the source's."""
    return {
        "socket.timeout.ms": int(timeout * 1000),
        "socket.connection.setup.timeout.ms": int(timeout * 1000),
        "reconnect.backoff.max.ms": 2000,
        # failures are reported in status; librdkafka's own stderr log is noise here
        "log_level": 0,
    }


def run_offsets_action(
    target: KafkaTarget, request: OffsetsRequest, timeout: float, deadline: float = DEADLINE_S
) -> OffsetsResult:
    """One offsets action (spec.offsetsAction) with a client of its own, closed afterwards:
    actions are rare and must not wait behind, or hold up, the shared readings. Blocking;
    each request is retried in attempts (sockets bounded by `timeout`) within `deadline`
    (through a leader or coordinator change); raises OffsetsRefused, KafkaUnavailable,
    UnknownTopic or OptionError."""
    options = SourceOptions.parse(dict(target.options))
    metadata = KafkaMetadata(options, deadline, client_overrides(timeout))
    try:
        return offsets_run.run(metadata, request)
    finally:
        metadata.close()


def read_offsets(metadata: KafkaMetadata, target: KafkaTarget | None = None) -> KafkaView:
    """One blocking reading with a long-lived client (run it on a worker thread)."""
    now = datetime.now(UTC)
    sasl_field, ca_field = (target or KafkaTarget(())).secrets
    try:
        tps = metadata.topic_partitions()
        end: dict[str, dict[str, int]] = {}
        for (topic, partition), (_low, high) in sorted(metadata.watermarks(tps).items()):
            end.setdefault(topic, {})[str(partition)] = high
        committed: dict[str, dict[str, int]] = {}
        if metadata.options.group_id and tps:
            for (topic, partition), offset in sorted(metadata.committed(tps).items()):
                if offset is not None:
                    committed.setdefault(topic, {})[str(partition)] = offset
        return KafkaView(committed=committed, end=end, read_at=now)
    except UnknownTopic as exc:
        return KafkaView(read_at=now, problem=f"spec.job.source.subscribe: {exc}")
    except KafkaAuthFailed as exc:
        return KafkaView(read_at=now, problem=f"{sasl_field}: {exc}", reason="KafkaAuthFailed")
    except KafkaTLSFailed as exc:
        return KafkaView(read_at=now, problem=f"{ca_field}: {exc}", reason="KafkaTLSFailed")
    except KafkaUnavailable as exc:
        return KafkaView(read_at=now, problem=f"spec.job.source.bootstrapServers: {exc}")
    except Exception as exc:  # anything else: report, never crash the caller
        return KafkaView(
            read_at=now,
            problem=f"spec.job.source.bootstrapServers: Kafka unavailable ({type(exc).__name__}"
            f": {exc})",
        )


def held_back(view: KafkaView, good_at: datetime | None, grace_s: float) -> KafkaView:
    """`view` as status should see it: a problem within `grace_s` of the last good reading
    (`good_at`) is held back (problem None, nothing read: status keeps the last readings).
    Brokers that restart answer wrongly for a moment: a connection closed mid-handshake, a
    topic not known yet. A rolling restart of the cluster is no Degraded job; a problem that
    lasts, or one a job has had from its first reading (a wrong address, Secret or topic),
    shows."""
    if view.problem is None or good_at is None or view.read_at is None:
        return view
    if (view.read_at - good_at).total_seconds() >= grace_s:
        return view
    return replace(view, problem=None, committed=None, end=None)


@dataclass(eq=False)
class _Client:
    metadata: KafkaMetadata
    users: set[tuple[str, str]] = field(default_factory=set)
    busy: int = 0  # readings in flight


class KafkaMonitor:
    """Cached readings per job, refreshed in the background with shared clients."""

    def __init__(
        self, *, workers: int, timeout: float, max_age: float, deadline: float = DEADLINE_S
    ) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kafka")
        self._timeout = timeout
        self._deadline = deadline  # one reading rides out a leader change (spark_app.kafka.retry)
        self._max_age = max_age
        self._lock = threading.Lock()
        self._views: dict[tuple[str, str], KafkaView] = {}
        self._good_at: dict[tuple[str, str], datetime] = {}  # the last reading without a problem
        self._inflight: set[tuple[str, str]] = set()
        self._clients: dict[ConnectionKey, _Client] = {}
        self._uses: dict[tuple[str, str], ConnectionKey] = {}  # job → its connection
        self._targets: dict[tuple[str, str], KafkaTarget] = {}  # job → its latest target
        self._closed = False

    def view(self, key: tuple[str, str]) -> KafkaView | None:
        with self._lock:
            return self._views.get(key)

    def is_due(self, key: tuple[str, str], now: datetime) -> bool:
        with self._lock:
            if key in self._inflight:
                return False
            view = self._views.get(key)
        return (
            view is None
            or view.read_at is None
            or ((now - view.read_at).total_seconds() >= self._max_age)
        )

    def clients(self) -> int:
        """Live connection settings (for tests and metrics)."""
        with self._lock:
            return len(self._clients)

    def refresh(self, key: tuple[str, str], target: KafkaTarget) -> None:
        unused: list[_Client] = []
        with self._lock:
            if self._closed or key in self._inflight:
                return
            try:
                client = self._attach(key, target, unused)
            except OptionError as exc:
                now = datetime.now(UTC)
                self._views[key] = KafkaView(read_at=now, problem=f"spec.job.source: {exc}")
                client = None
            if client is not None:
                self._inflight.add(key)
                self._targets[key] = target
                client.busy += 1
        self._close_later(unused)
        if client is not None:
            self._pool.submit(self._run, key, client, target)

    def _attach(self, key: tuple[str, str], target: KafkaTarget, unused: list[_Client]) -> _Client:
        """The job's client for this connection setting (held under the lock)."""
        previous = self._uses.get(key)
        if previous == target.options:
            return self._clients[previous]
        client = self._clients.get(target.options)
        if client is None:
            options = SourceOptions.parse(dict(target.options))
            overrides = client_overrides(self._timeout)
            metadata = KafkaMetadata(options, self._deadline, overrides)
            client = self._clients[target.options] = _Client(metadata)
        if previous is not None:
            unused += self._release(key, previous)
        client.users.add(key)
        self._uses[key] = target.options
        return client

    def _release(self, key: tuple[str, str], connection: ConnectionKey) -> list[_Client]:
        """Drops the job from its client; returns the client when nobody needs it any more
        (under the lock; the caller closes it outside)."""
        client = self._clients.get(connection)
        if client is None:
            return []
        client.users.discard(key)
        if client.users or client.busy:
            return []  # still used, or the last reading in flight closes it
        del self._clients[connection]
        return [client]

    def _run(self, key: tuple[str, str], client: _Client, target: KafkaTarget) -> None:
        view: KafkaView | None = None
        try:
            view = read_offsets(client.metadata, target)
        finally:
            unused: list[_Client] = []
            with self._lock:
                self._inflight.discard(key)
                client.busy -= 1
                if view is not None and key in self._uses:
                    if view.problem is None and view.read_at is not None:
                        self._good_at[key] = view.read_at
                    self._views[key] = held_back(view, self._good_at.get(key), self._deadline)
                if not client.users and not client.busy:
                    for connection, live in list(self._clients.items()):
                        if live is client:
                            del self._clients[connection]
                            unused.append(client)
            for idle in unused:
                idle.metadata.close()
        if view is not None and view.problem:
            log.info("kafka reading for %s/%s: %s", *key, view.problem)

    def _close_later(self, clients: list[_Client]) -> None:
        for client in clients:
            try:
                self._pool.submit(client.metadata.close)
            except RuntimeError:  # the pool is shut down
                client.metadata.close()

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._views.pop(key, None)
            self._good_at.pop(key, None)
            self._targets.pop(key, None)
            connection = self._uses.pop(key, None)
            unused = self._release(key, connection) if connection is not None else []
        self._close_later(unused)

    def close(self) -> None:
        """Stops the readings in flight after their current attempt and waits for them, then
        closes every client: none is destroyed under a request, and a shutdown waits for one
        attempt (the socket timeout), not a reading's whole deadline of retries."""
        with self._lock:
            self._closed = True
            clients = list(self._clients.values())
        for client in clients:
            client.metadata.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.metadata.close()
