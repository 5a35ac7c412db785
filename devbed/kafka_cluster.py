"""A replicated Apache Kafka cluster (KRaft) on loopback: three nodes, each broker and
controller, replication factor 3, `min.insync.replicas` 2, unclean leader election off, as
users run Kafka. Any node can be SIGKILLed, stopped gracefully (controlled shutdown, leaders
moved first), frozen (SIGSTOP: it stops answering, as a partitioned node) and restarted with
its data. The broker version is any Apache Kafka release (`version`, jars cached per version).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from devbed.broker_config import Quorum, new_cluster_id
from devbed.kafka_broker import KafkaBroker
from devbed.kafka_jars import kafka_version, tool_jars
from devbed.ports import free_port


class KafkaCluster:
    def __init__(self, workdir: Path, size: int = 3, version: str | None = None):
        workdir = Path(workdir)
        ports = {n: free_port() for n in range(1, size + 1)}
        quorum = Quorum(
            voters=",".join(f"{n}@127.0.0.1:{p}" for n, p in ports.items()),
            cluster_id=new_cluster_id(),
            secrets=workdir / "tls",
            version=version or kafka_version(),
            replicas=min(size, 3),
        )
        self.nodes = {
            n: KafkaBroker(workdir / f"node-{n}", node_id=n, controller_port=p, quorum=quorum)
            for n, p in ports.items()
        }

    @property
    def version(self) -> str:
        return next(iter(self.nodes.values())).version

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    @property
    def secured_bootstrap(self) -> str:
        return ",".join(node.secured_bootstrap for node in self.nodes.values())

    def secured_client(self, **extra: str) -> dict[str, str]:
        first = next(iter(self.nodes.values()))
        return first.secured_client(**{"bootstrap.servers": self.secured_bootstrap, **extra})

    def start(self, timeout: float = 240.0) -> KafkaCluster:
        """All nodes side by side, until each answers and all are registered; under CI's load
        three nodes once took more than 120 s."""
        for node in self.nodes.values():  # a controller needs its quorum: all at once
            node.launch()
        for node in self.nodes.values():
            node.wait_ready(timeout)
        self.wait_brokers(len(self.nodes), timeout)
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop(kill=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        live = [n.bootstrap for n in self.nodes.values() if n.running]
        return AdminClient({"bootstrap.servers": ",".join(live), "log_level": 0})

    def wait_brokers(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` brokers are registered in the cluster's metadata."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if len(self._admin().list_topics(timeout=2).brokers) >= count:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{count} brokers not registered after {timeout}s")

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> node id of its leader (-1 while it has none)."""
        metadata = self._admin().list_topics(topic, timeout=10)
        return {p: m.leader for p, m in metadata.topics[topic].partitions.items()}

    def node_leading_most(self, topic: str, besides: Iterable[int | None] = ()) -> int:
        """The node leading most partitions of `topic`, among those not in `besides` (when
        any of them leads at all)."""
        counts: dict[int, int] = {}
        for leader in self.leaders(topic).values():
            counts[leader] = counts.get(leader, 0) + 1
        candidates = {n: c for n, c in counts.items() if n not in set(besides)} or counts
        return max(candidates, key=candidates.__getitem__)

    def quorum_leader(self) -> int | None:
        """The KRaft quorum's leader as the nodes last recorded it (the newest epoch in their
        `__cluster_metadata-0/quorum-state` files); None if no node has one yet."""
        newest: tuple[int, int] | None = None
        for node in self.nodes.values():
            path = node.workdir / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if state.get("leaderId", -1) >= 0:
                seen = (state.get("leaderEpoch", -1), state["leaderId"])
                newest = max(newest or seen, seen)
        return newest[1] if newest else None

    def wait_in_sync(self, topic: str, timeout: float = 60.0) -> None:
        """Until every partition of `topic` has a leader and all its replicas in sync."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                partitions = self._admin().list_topics(topic, timeout=5).topics[topic].partitions
                if partitions and all(
                    m.leader >= 0 and set(m.isrs) == set(m.replicas) for m in partitions.values()
                ):
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{topic} not fully in sync after {timeout}s")

    def restart(self, node_id: int, timeout: float = 180.0) -> None:
        """Starts a stopped node again with its data (a JVM start and log recovery: seconds
        on a quiet machine, over a minute on a loaded one)."""
        node = self.nodes[node_id]
        node.launch()
        node.wait_ready(timeout)

    @contextmanager
    def outage(self, node_id: int, *, kill: bool = True) -> Iterator[KafkaBroker]:
        """The node is down (SIGKILL, or a controlled shutdown) inside the block and is
        restarted with its data after it."""
        node = self.nodes[node_id]
        node.stop(kill=kill)
        try:
            yield node
        finally:
            self.restart(node_id)

    def elect_preferred_leaders(self, topic: str) -> None:
        from confluent_kafka import ElectionType, KafkaError, TopicPartition

        partitions = [TopicPartition(topic, p) for p in self.leaders(topic)]
        admin = self._admin()  # kept until the answer: a collected client cancels its requests
        answer = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(30)
        for tp, error in answer.items():
            # a partition its preferred replica already leads answers ELECTION_NOT_NEEDED
            if error is not None and error.code() != KafkaError.ELECTION_NOT_NEEDED:
                raise RuntimeError(f"preferred election of {tp.topic}-{tp.partition}: {error}")
        self._wait(lambda: self.leaders(topic) == self.preferred_leaders(topic), "leaders moved")

    def preferred_leaders(self, topic: str) -> dict[int, int]:
        metadata = self._admin().list_topics(topic, timeout=10)
        return {p: m.replicas[0] for p, m in metadata.topics[topic].partitions.items()}

    def _wait(self, condition, what: str, timeout: float = 30.0) -> None:
        """Metadata reaches each broker a moment after the controller decided."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout}s")
            time.sleep(0.2)

    def reassign(self, topic: str, replicas: dict[int, list[int]]) -> None:
        """Moves each partition's replicas (and so its preferred leader: the first) with
        Kafka's own tool, and waits until the reassignment is complete."""
        import json

        plan = {
            "version": 1,
            "partitions": [
                {"topic": topic, "partition": p, "replicas": r} for p, r in replicas.items()
            ],
        }
        node = next(n for n in self.nodes.values() if n.running)
        plan_file = node.workdir / f"reassign-{topic}.json"
        plan_file.write_text(json.dumps(plan))
        tool = _reassign_tool(self.version)
        args = ["--bootstrap-server", self._live_bootstrap(), "--reassignment-json-file",
                str(plan_file)]  # fmt: skip
        node.run_tool(tool, *args, "--execute")
        deadline = time.monotonic() + 120
        while "is still in progress" in node.run_tool(tool, *args, "--verify"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reassignment of {topic} not complete after 120s")
            time.sleep(1)
        wanted = {p: r[0] for p, r in replicas.items()}
        self._wait(lambda: self.preferred_leaders(topic) == wanted, "replicas reordered")

    def _live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.running)


def _reassign_tool(version: str) -> str:
    """Kafka moved its reassignment command from the broker to its tools in 3.7."""
    import zipfile

    moved = "org/apache/kafka/tools/reassign/ReassignPartitionsCommand.class"
    for jar in tool_jars(version).glob("kafka-tools-*.jar"):
        if moved in zipfile.ZipFile(jar).namelist():
            return moved.removesuffix(".class").replace("/", ".")
    return "kafka.admin.ReassignPartitionsCommand"
