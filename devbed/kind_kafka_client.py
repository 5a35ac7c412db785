"""Kafka from inside the kind cluster: a long-running client pod of the operator's image that
the tests `kubectl exec` KAFKA_TOOL in, and a producer loop that writes at a steady rate.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections import Counter

from devbed.kind_cluster import ON_CONTROL_PLANE, Images, Kube, wait_for
from devbed.kind_kafka import BROKERS, KAFKA_NAMESPACE
from devbed.kind_kafka_tool import KAFKA_TOOL, AvroOrders


class KafkaClient:
    """Kafka from inside the cluster: `kubectl exec` into a long-running client pod of the
    operator's image (it has confluent-kafka); the broker advertises its Service name only."""

    POD = "kafka-client"

    def __init__(self, kube: Kube, bootstrap: str):
        self.kube, self.bootstrap = kube, bootstrap

    def command(self, *args: str) -> list[str]:
        return [
            *self.kube.base, "exec", "-n", KAFKA_NAMESPACE, self.POD, "--",
            "python", "-c", KAFKA_TOOL, *args,
        ]  # fmt: skip

    def run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"kafka tool {args[:3]} failed: {done.stderr.strip()}")
        return done.stdout

    def create_topic(self, topic: str, partitions: int = 3, replicas: int = BROKERS) -> None:
        self.run("create-topic", self.bootstrap, topic, str(partitions), str(replicas))

    def produce(self, topic: str, start: int, stop: int) -> None:
        self.run("produce", self.bootstrap, topic, str(start), str(stop))

    def produce_avro(self, topic: str, orders: AvroOrders, start: int, stop: int) -> None:
        """Ids start..stop-1 as `orders` encodes them (the schema registered first)."""
        self.run("produce-avro", self.bootstrap, topic, *orders.args(), str(start), str(stop))

    def dead_letters(self, topic: str, timeout: float = 30) -> list[dict]:
        """Every copy a read_committed reader of the dead-letter topic sees, from its start to
        its log end: [{key, value (hex), headers}]."""
        out = self.run("dead-letters", self.bootstrap, topic, str(timeout), timeout=timeout + 60)
        return json.loads(out)

    def keys_counted(self, topic: str) -> Counter[str | None]:
        """How often each key is in the topic, from its start to its log end."""
        return Counter(key for _, _, key in json.loads(self.run("keys", self.bootstrap, topic)))

    def offsets(self, topic: str, group: str) -> tuple[dict[int, int | None], dict[int, int]]:
        answer = json.loads(self.run("offsets", self.bootstrap, topic, group))
        group_offsets = {int(p): o for p, o in answer["group"].items()}
        return group_offsets, {int(p): o for p, o in answer["end"].items()}

    def cluster(self, topic: str = "") -> dict:
        """The registered brokers' ids and, for `topic`, each partition's leader, replicas
        and in-sync replicas ({"brokers": [...], "partitions": {p: {...}}})."""
        answer = json.loads(self.run("cluster", self.bootstrap, topic or "-"))
        answer["partitions"] = {int(p): m for p, m in answer["partitions"].items()}
        return answer

    def wait_in_sync(self, topic: str = "", timeout: float = 180) -> dict:
        """Until all brokers are registered and every partition of `topic` has a leader and
        all its replicas in sync (a Ready pod is not yet a broker the cluster knows)."""

        def whole() -> dict | None:
            try:
                found = self.cluster(topic)
            except (RuntimeError, subprocess.TimeoutExpired):
                return None
            parts = found["partitions"].values()
            in_sync = all(m["leader"] >= 0 and set(m["isr"]) == set(m["replicas"]) for m in parts)
            return found if len(found["brokers"]) == BROKERS and in_sync else None

        return wait_for(f"{BROKERS} brokers, {topic or 'no topic'} in sync", whole, timeout, 1)


class ProducerLoop:
    """Produces ids start, start+1, ... at a steady rate until stopped (JSON values, or
    `avro` orders); stop() returns the id after the last one produced (all of them flushed)."""

    def __init__(
        self,
        client: KafkaClient,
        topic: str,
        start: int,
        rate: float = 20,
        avro: AvroOrders | None = None,
    ):
        self.client = client
        self.stop_file = f"/tmp/stop-{uuid.uuid4().hex[:8]}"
        loop = ("produce-loop",) if avro is None else ("produce-avro-loop",)
        given = () if avro is None else avro.args()
        args = (*loop, client.bootstrap, topic, *given, str(start), str(rate), self.stop_file)
        self.process = subprocess.Popen(
            client.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def stop(self) -> int:
        self.client.kube.run(
            "exec", "-n", KAFKA_NAMESPACE, KafkaClient.POD, "--", "touch", self.stop_file
        )
        out, err = self.process.communicate(timeout=120)
        match = re.search(r"PRODUCED (\d+)", out)
        assert match, f"producer loop failed: {out}\n{err}"
        return int(match.group(1))


def start_kafka_client(kube: Kube, bootstrap: str, images: Images) -> KafkaClient:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": KafkaClient.POD, "namespace": KAFKA_NAMESPACE},
        "spec": {
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            **ON_CONTROL_PLANE,
            "containers": [
                {
                    "name": "client",
                    "image": images.operator,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                }
            ],
        },
    }
    kube.apply(json.dumps(pod), KAFKA_NAMESPACE)
    kube.wait_ready(KafkaClient.POD, KAFKA_NAMESPACE)
    client = KafkaClient(kube, bootstrap)
    client.wait_in_sync()
    return client
