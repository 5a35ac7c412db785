"""The operator's own view of Kafka: the group's committed offsets and the log end offsets.

Reads run on a small dedicated thread pool with bounded timeouts; a reconcile never waits
for Kafka: it takes the latest cached reading and asks for a fresh one when it is old. An
unreachable broker or an unknown topic becomes a `problem` naming the spec field, never an
exception in the reconcile. Credentials are used to connect and are never logged or stored.
"""

from __future__ import annotations

import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .status import KafkaView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaTarget:
    """What to read. `username`/`password` are excluded from repr (never logged)."""

    bootstrap_servers: str
    group_id: str | None
    topics: tuple[str, ...]
    pattern: str | None
    extra: tuple[tuple[str, str], ...] = ()
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        return (
            f"KafkaTarget(bootstrap_servers={self.bootstrap_servers!r}, "
            f"group_id={self.group_id!r}, topics={self.topics!r}, pattern={self.pattern!r})"
        )

    def client_config(self, timeout: float) -> dict[str, Any]:
        conf: dict[str, Any] = {k: v for k, v in self.extra if not k.startswith("sasl.")}
        conf.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "socket.timeout.ms": int(timeout * 1000),
                "socket.connection.setup.timeout.ms": int(timeout * 1000),
                "reconnect.backoff.max.ms": 2000,
                # failures are reported in status; librdkafka's own stderr log is noise here
                "log_level": 0,
            }
        )
        if self.username is not None:
            conf.update(
                {
                    "security.protocol": self.security_protocol or "SASL_SSL",
                    "sasl.mechanism": self.sasl_mechanism or "PLAIN",
                    "sasl.username": self.username,
                    "sasl.password": self.password or "",
                }
            )
        return conf


def read_offsets(target: KafkaTarget, timeout: float) -> KafkaView:
    """One blocking reading (run it on a worker thread)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    now = datetime.now(UTC)
    try:
        admin = AdminClient(target.client_config(timeout))
        metadata = admin.list_topics(timeout=timeout)
        if target.pattern:
            regex = re.compile(target.pattern)
            topics = sorted(t for t in metadata.topics if regex.fullmatch(t))
        else:
            missing = [t for t in target.topics if t not in metadata.topics]
            if missing:
                return KafkaView(
                    read_at=now,
                    problem=f"spec.job.source.subscribe: unknown topic(s) {', '.join(missing)}",
                )
            topics = list(target.topics)
        partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(metadata.topics[topic].partitions)
        ]
        end: dict[str, dict[str, int]] = {}
        if partitions:
            futures = admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in partitions}, request_timeout=timeout
            )
            for tp, future in futures.items():
                info = future.result(timeout=timeout)
                end.setdefault(tp.topic, {})[str(tp.partition)] = info.offset
        committed: dict[str, dict[str, int]] = {}
        if target.group_id:
            request = ConsumerGroupTopicPartitions(target.group_id, partitions or None)
            futures = admin.list_consumer_group_offsets([request], request_timeout=timeout)
            result = futures[target.group_id].result(timeout=timeout)
            for tp in result.topic_partitions or []:
                if tp.offset is not None and tp.offset >= 0:
                    committed.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
        return KafkaView(committed=committed, end=end, read_at=now)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        text = getattr(error, "str", lambda: str(error))()
        return KafkaView(
            read_at=now, problem=f"spec.job.source.bootstrapServers: Kafka unavailable ({text})"
        )
    except Exception as exc:  # a timeout or anything else: report, never crash the caller
        return KafkaView(
            read_at=now,
            problem=f"spec.job.source.bootstrapServers: Kafka unavailable ({type(exc).__name__}"
            f": {exc})",
        )


class KafkaMonitor:
    """Cached readings per job, refreshed in the background."""

    def __init__(self, *, workers: int, timeout: float, max_age: float) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kafka")
        self._timeout = timeout
        self._max_age = max_age
        self._lock = threading.Lock()
        self._views: dict[tuple[str, str], KafkaView] = {}
        self._inflight: set[tuple[str, str]] = set()

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

    def refresh(self, key: tuple[str, str], target: KafkaTarget) -> None:
        with self._lock:
            if key in self._inflight:
                return
            self._inflight.add(key)
        self._pool.submit(self._run, key, target)

    def _run(self, key: tuple[str, str], target: KafkaTarget) -> None:
        try:
            view = read_offsets(target, self._timeout)
        finally:
            with self._lock:
                self._inflight.discard(key)
        with self._lock:
            self._views[key] = view
        if view.problem:
            log.info("kafka reading for %s/%s: %s", *key, view.problem)

    def forget(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._views.pop(key, None)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
