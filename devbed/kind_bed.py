"""The end-to-end bed on kind, as `make demo` and the e2e tier both bring it up: the cluster
(`scripts/kind/up.sh`: offline node image, project images loaded), the operator by `helm
install`, the replicated Kafka of examples/kind/kafka.yaml with its SASL_SSL listener, MinIO
for checkpoints and sinks, and a job namespace that enforces the `restricted` Pod Security
Standard with the Secrets a job needs. No pytest here: tests/e2e/conftest.py wraps these in
fixtures, devbed/demo.py runs them for a person.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import subprocess
import time
import tomllib
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from devbed import polling
from devbed.tls import Authority

REPO_ROOT = Path(__file__).resolve().parents[1]
# The bed's image registry as the host and the nodes name it (scripts/kind/registry.sh)
REGISTRY = "localhost:5001"
T = TypeVar("T")
# A watch is re-established (after a fresh list) this often: a stalled watch stream costs at
# most this long instead of the whole wait.
WATCH_RELIST_S = 5


def _script(*args: str) -> str:
    """Runs a project script; its stdout is its answer, its stderr goes to the test log."""
    done = subprocess.run(
        ["bash", *args], cwd=REPO_ROOT, check=True, stdout=subprocess.PIPE, text=True
    )
    return done.stdout.strip().splitlines()[-1]


def project_version() -> str:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def kafka_version() -> str:
    pom = (REPO_ROOT / "scripts" / "kafka" / "pom.xml").read_text()
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert match, "no <kafka.version> in scripts/kafka/pom.xml"
    return match.group(1)


@dataclass(frozen=True)
class Images:
    """The project's image tags, as images/build.sh tags them and up.sh loads them."""

    spark: str
    operator: str
    kafka: str
    orders: str  # the orders job's own image (examples/user-image), FROM spark


def project_images() -> Images:
    version = project_version()
    return Images(
        spark=f"streamingjob/spark:{version}",
        orders=f"{REGISTRY}/streamingjob/orders:{version}",
        operator=f"streamingjob/operator:{version}",
        kafka=f"streamingjob/kafka:{kafka_version()}-{version}",
    )


# The test services run on the control plane, the jobs on the workers (scripts/kind/up.sh).
ON_CONTROL_PLANE = {
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [
        {
            "key": "node-role.kubernetes.io/control-plane",
            "operator": "Exists",
            "effect": "NoSchedule",
        }
    ],
}


class Kube:
    """kubectl against the e2e cluster; every call raises on failure with kubectl's stderr."""

    def __init__(self, kubectl: str, kubeconfig: str):
        self.base = [kubectl, "--kubeconfig", kubeconfig]
        self.kubeconfig = kubeconfig
        self._core = None

    def run(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        done = subprocess.run(
            [*self.base, *args], input=input, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def apply(self, manifest: str, namespace: str) -> None:
        self.run("apply", "-n", namespace, "-f", "-", input=manifest)

    def get(self, kind: str, name: str, namespace: str) -> dict:
        return json.loads(self.run("get", kind, name, "-n", namespace, "-o", "json"))

    def logs(self, pod: str, namespace: str) -> str:
        return self.run("logs", pod, "-n", namespace)

    def wait_pod_done(self, pod: str, namespace: str, timeout: float = 300) -> str:
        """Waits until the pod Succeeded or Failed and returns the phase."""
        deadline = time.monotonic() + timeout
        phase = "Unknown"
        while time.monotonic() < deadline:
            phase = self.get("pod", pod, namespace).get("status", {}).get("phase", "Unknown")
            if phase in ("Succeeded", "Failed"):
                return phase
            time.sleep(1)
        raise TimeoutError(
            f"pod {namespace}/{pod} still {phase} after {timeout}s:\n"
            + self.run("describe", "pod", pod, "-n", namespace)
        )

    def wait_configmap(
        self,
        name: str,
        namespace: str,
        accept: Callable[[dict], T | None],
        timeout: float,
        what: str,
    ) -> T:
        """The first truthy `accept(data)` of the ConfigMap, on a watch instead of a poll: the
        scenarios time restarts that are CPU-bound on a small machine, and a kubectl process
        per poll would compete with them (and add its own latency to the measurement)."""
        from kubernetes import client, config, watch

        if self._core is None:
            self._core = client.CoreV1Api(config.new_client_from_config(self.kubeconfig))
        selector = f"metadata.name={name}"
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while (remaining := deadline - time.monotonic()) > 0:
            listed = self._core.list_namespaced_config_map(namespace, field_selector=selector)
            for item in listed.items:
                last = item.data or {}
                if found := accept(last):
                    return found
            stream = watch.Watch().stream(
                self._core.list_namespaced_config_map, namespace, field_selector=selector,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=max(1, math.ceil(min(remaining, WATCH_RELIST_S))),
            )  # fmt: skip
            try:
                for event in stream:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        last = event["object"].data or {}
                        if found := accept(last):
                            return found
            except client.ApiException as exc:
                if exc.status != 410:  # 410: the resourceVersion expired; list again
                    raise
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last}")

    def wait_ready(self, pod: str, namespace: str, timeout: float = 240) -> None:
        try:
            self.run(
                "wait", "--for=condition=Ready", f"pod/{pod}", "-n", namespace,
                f"--timeout={int(timeout)}s", timeout=timeout + 30,
            )  # fmt: skip
        except RuntimeError as exc:
            detail = self.run("describe", "pod", pod, "-n", namespace)
            raise AssertionError(f"{exc}\n{detail}") from exc


def kind_up() -> str:
    """scripts/kind/up.sh: the cluster (reused when healthy) with the images; its kubeconfig."""
    return _script("scripts/kind/up.sh")


def kind_down() -> None:
    subprocess.run(["bash", "scripts/kind/down.sh"], cwd=REPO_ROOT, check=False)


def kubectl_for(kubeconfig: str) -> Kube:
    bin_dir = _script("scripts/k8s-toolchain.sh", "all")
    return Kube(str(Path(bin_dir) / "kubectl"), kubeconfig)


def helm_for(kubeconfig: str) -> Helm:
    bin_dir = _script("scripts/k8s-toolchain.sh", "helm")
    return Helm(str(Path(bin_dir) / "helm"), kubeconfig)


# -- the operator, Kafka and a client pod, shared by the scenarios ------------------------------

CLUSTER = os.environ.get("STREAMJOB_KIND_CLUSTER", "streamingjob-e2e")
OPERATOR_NAMESPACE = "streamingjob-system"
RELEASE = "streamingjob"
CHART = REPO_ROOT / "charts" / "streamingjob-operator"
KAFKA_NAMESPACE = "kafka"  # examples/kind/kafka.yaml
BOOTSTRAP = "kafka.kafka.svc.cluster.local:9092"
STORAGE_NAMESPACE = "storage"  # examples/kind/minio.yaml
BUCKET = "streamingjob"
RESTRICTED = "pod-security.kubernetes.io/enforce"  # the namespace label the PSS admission reads


def wait_for(what: str, probe, timeout: float = 180, interval: float = 0.5):
    """`devbed.polling.wait_for` with the scenarios' argument order and pace."""
    return polling.wait_for(probe, timeout, what, interval)


def committed_batch(report: dict, epoch: int, attempt: int) -> dict | None:
    """The report if the run (epoch, attempt) committed a batch after its start."""
    if (report.get("epoch"), report.get("attempt")) != (epoch, attempt):
        return None
    batch = report.get("latestBatch") or {}
    restored = report.get("restoredBatch")
    if batch.get("batchId") is None or batch["batchId"] <= (-1 if restored is None else restored):
        return None
    return report


class Helm:
    def __init__(self, helm: str, kubeconfig: str):
        self.base = [helm, "--kubeconfig", kubeconfig]

    def run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout


# Values of the e2e install: the image loaded by up.sh, never pulled, short polls, and the
# operator on the control plane (a worker it runs on may be drained or lost by a test).
OPERATOR_VALUES = [
    "--set", "image.pullPolicy=Never",
    # a lag reading at each resync (the reading in flight at the one before may take over a
    # second): the autoscaler scenario's 40 s window holds eight of them
    "--set", "config.kafkaPollSeconds=2",
    "--set", "config.resyncSeconds=5",
    "--set", "config.fencingPollSeconds=1",
    # a Lease that outlasts the bed's API server under CI's load (2 cores: renewals took over
    # 10 s and both replicas stopped, CI run 23; none within 20 s at the e2e tier's start, run
    # 43, its first job beside the chaos test and the rest); a release on SIGTERM still hands
    # it over at once
    "--set", "leaderElection.leaseDurationSeconds=45",
    "--set", "leaderElection.renewDeadlineSeconds=30",
    # every test makes a namespace of its own (e2e-<hex>), unknown at install: the operator
    # reads Secrets in all of them (the chart's documented opt-in; secretNamespaces otherwise)
    "--set", "rbac.clusterWideSecrets=true",
    "--set-json", f"nodeSelector={json.dumps(ON_CONTROL_PLANE['nodeSelector'])}",
    "--set-json", f"tolerations={json.dumps(ON_CONTROL_PLANE['tolerations'])}",
]  # fmt: skip


def install_operator(kube: Kube, helm: Helm, images: Images) -> str:
    """`helm install` of the chart (a release left by a kept cluster is uninstalled first);
    the release name."""
    if RELEASE in helm.run("list", "-n", OPERATOR_NAMESPACE, "-q"):
        helm.run("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")
    # Helm never upgrades crds/: a CRD left by an older run is replaced like the README says.
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    tag = images.operator.rsplit(":", 1)[1]
    helm.run(
        "install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--create-namespace",
        "--set", f"image.tag={tag}", *OPERATOR_VALUES, "--wait", "--timeout", "180s",
    )  # fmt: skip
    return RELEASE


def uninstall_operator(helm: Helm) -> None:
    helm.run("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")


# examples/kind/kafka.yaml: the StatefulSet kafka (kafka-0..2, each broker and controller,
# RF 3, min.insync.replicas 2) behind the bootstrap Service kafka; the brokers advertise their
# own names under the headless Service kafka-brokers, so their certificate names them too.
BROKERS = 3
BROKER_PODS = [f"kafka-{n}" for n in range(BROKERS)]
KAFKA_HOSTS = [
    "kafka.kafka.svc.cluster.local",
    "kafka.kafka.svc",
    *(f"{pod}.kafka-brokers.kafka.svc.cluster.local" for pod in BROKER_PODS),
]
SECURED_BOOTSTRAP = f"{KAFKA_HOSTS[0]}:9094"  # SASL_SSL, SCRAM-SHA-512


@dataclass(frozen=True)
class KafkaLogin:
    """The SASL_SSL listener's SCRAM user and the CA that signed the broker's certificate:
    what a job namespace gets as its Secrets kafka-login and kafka-ca."""

    username: str
    password: str
    ca_pem: str

    def give_secrets(self, kube: Kube, namespace: str) -> None:
        for name, data in (
            ("kafka-login", {"username": self.username, "password": self.password}),
            ("kafka-ca", {"ca.crt": self.ca_pem}),
        ):
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "stringData": data,
            }
            kube.apply(json.dumps(secret), namespace)


def _secret_data(kube: Kube, name: str, namespace: str) -> dict[str, str] | None:
    try:
        secret = kube.get("secret", name, namespace)
    except RuntimeError:
        return None
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def _broker_secrets(kube: Kube, workdir: Path) -> bool:
    """The broker's certificate (a CA of the test's own, SANs: the Service names) and SCRAM
    user as the Secrets examples/kind/kafka.yaml mounts; kept when a kept cluster has them.
    True when they were made now."""
    kube.run("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KAFKA_NAMESPACE}}
    ))  # fmt: skip
    tls = _secret_data(kube, "kafka-tls", KAFKA_NAMESPACE)
    hosts = ",".join(KAFKA_HOSTS)  # a kept cluster's certificate may name other hosts
    if (
        tls
        and "ca.crt" in tls
        and tls.get("hosts") == hosts
        and _secret_data(kube, "kafka-scram", KAFKA_NAMESPACE)
    ):
        return False
    server = Authority.create(workdir).issue(KAFKA_HOSTS)
    secrets = [
        ("kafka-tls", "kubernetes.io/tls", {
            "tls.crt": server.cert.read_text(),
            "tls.key": server.key.read_text(),
            "ca.crt": server.ca.read_text(),
            "hosts": hosts,
        }),
        ("kafka-scram", "Opaque", {"username": "orders", "password": uuid.uuid4().hex}),
    ]  # fmt: skip
    for name, kind, data in secrets:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": kind,
            "metadata": {"name": name, "namespace": KAFKA_NAMESPACE},
            "stringData": data,
        }
        kube.apply(json.dumps(secret), KAFKA_NAMESPACE)
    return True


def start_kafka(kube: Kube, workdir: Path) -> str:
    """The replicated cluster of examples/kind/kafka.yaml with its SASL_SSL listeners; its
    PLAINTEXT bootstrap address inside the cluster (the tests' own tools). The schema
    registry of examples/kind/schema-registry.yaml is applied first and starts while the
    brokers do (`wait_schema_registry` waits for it)."""
    made = _broker_secrets(kube, workdir)
    kube.run("apply", "-f", str(SCHEMA_REGISTRY_MANIFEST))
    # a kept cluster of an older bed may run the single broker of a Deployment
    kube.run("delete", "deployment", "kafka", "-n", KAFKA_NAMESPACE, "--ignore-not-found")
    existed = bool(kube.run("get", "statefulset", "-n", KAFKA_NAMESPACE, "-o", "name"))
    kube.run("apply", "-f", str(KAFKA_MANIFEST))
    if made and existed:  # a kept cluster's brokers started without these Secrets
        kube.run("delete", "pods", "-n", KAFKA_NAMESPACE, "-l", "app=kafka", "--wait=false")
    kube.run(
        "rollout", "status", "statefulset/kafka", "-n", KAFKA_NAMESPACE, "--timeout=240s",
        timeout=270,
    )  # fmt: skip
    return BOOTSTRAP


# examples/kind/schema-registry.yaml: Apicurio Registry (image streamingjob/schema-registry,
# images/schema-registry) in the Kafka namespace; its Confluent-compatible API
SCHEMA_REGISTRY_MANIFEST = REPO_ROOT / "examples" / "kind" / "schema-registry.yaml"
SCHEMA_REGISTRY_URL = "http://schema-registry.kafka.svc.cluster.local:8080/apis/ccompat/v7"
KAFKA_MANIFEST = REPO_ROOT / "examples" / "kind" / "kafka.yaml"
MINIO_MANIFEST = REPO_ROOT / "examples" / "kind" / "minio.yaml"


def start_services(kube: Kube, workdir: Path) -> None:
    """Kafka (its Secrets, the brokers, the registry) and MinIO applied, not waited for: CI
    starts them as soon as the cluster is up, beside the tiers that need no cluster
    (scripts/test-all.sh); the e2e fixtures (`start_kafka`, `start_object_store`) apply the
    same manifests again and find them running."""
    _broker_secrets(kube, workdir)
    for manifest in (SCHEMA_REGISTRY_MANIFEST, KAFKA_MANIFEST, MINIO_MANIFEST):
        kube.run("apply", "-f", str(manifest))


def wait_schema_registry(kube: Kube) -> str:
    """Until the registry that `start_kafka` applied is Ready (its readiness probe asks
    Apicurio's /health/ready); the URL of its Confluent-compatible API inside the cluster."""
    kube.run(
        "rollout", "status", "deployment/schema-registry", "-n", KAFKA_NAMESPACE,
        "--timeout=240s", timeout=270,
    )  # fmt: skip
    return SCHEMA_REGISTRY_URL


def read_kafka_login(kube: Kube) -> KafkaLogin:
    scram = _secret_data(kube, "kafka-scram", KAFKA_NAMESPACE) or {}
    tls = _secret_data(kube, "kafka-tls", KAFKA_NAMESPACE) or {}
    return KafkaLogin(scram["username"], scram["password"], tls["ca.crt"])


# Avro's binary encoding of the primitive types an order has (the Avro specification), part
# of KAFKA_TOOL: the source reads them with fastavro, the tool writes them without it (it runs
# in the operator's image)
AVRO_WRITER = r"""
import struct

def avro_long(n):  # zig-zag, then a varint of 7 bits a byte, the lowest first
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))

def avro_string(s):
    data = s.encode()
    return avro_long(len(data)) + data

AVRO_WRITERS = {"long": avro_long, "string": avro_string, "double": lambda x: struct.pack("<d", x)}
"""

KAFKA_TOOL = (
    AVRO_WRITER
    + r"""
import json, os, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
command, bootstrap, topic, *rest = sys.argv[1:]

def produce_ids(producer, ids, encode=lambda n: json.dumps({"id": n}).encode()):
    for n in ids:
        producer.produce(topic, key=str(n).encode(), value=encode(n))
        producer.poll(0)

def produce_loop(start, rate, stop, encode=lambda n: json.dumps({"id": n}).encode()):
    producer = make_producer()
    n, began = start, time.monotonic()
    while not os.path.exists(stop):
        due = start + int((time.monotonic() - began) * rate)
        produce_ids(producer, range(n, max(n, due)), encode)
        n = max(n, due)
        time.sleep(0.02)
    assert producer.flush(60) == 0
    print("PRODUCED", n, flush=True)

# Registers `schema` under <topic>-value (as a Confluent serializer does) and returns an
# encoder of id n: the wire format (magic 0, schema id, Avro binary) of the order
# typed_order(n) of devbed/kind_bed.py, or for every poison_every-th id a poison record:
# alternately truncated (3 bytes, shorter than the header) and a bad magic byte.
def avro_orders(registry, schema, poison_every):
    import urllib.request
    body = json.dumps({"schema": schema, "schemaType": "AVRO"}).encode()
    request = urllib.request.Request(
        f"{registry}/subjects/{topic}-value/versions", data=body, method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        schema_id = json.loads(answer.read())["id"]
    fields = [(f["name"], f["type"]) for f in json.loads(schema)["fields"]]

    def encode(n):
        if n % poison_every == 0:
            return b"\x00\x00\x00" if (n // poison_every) % 2 == 0 else b"\x01" + bytes(8)
        order = {"id": n, "item": f"item-{n % 7}", "amount": n / 4}
        body = b"".join(AVRO_WRITERS[kind](order[name]) for name, kind in fields)
        return struct.pack(">bI", 0, schema_id) + body
    return encode


def partitions(consumer):
    return sorted(consumer.list_topics(topic, timeout=20).topics[topic].partitions)

# acks=all (librdkafka's default), idempotent: a retry is written once, nearly always (a leader
# change that bumps the producer's epoch can write a record twice: librdkafka's issue #4953)
def make_producer():
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

def read_to_end(isolation, timeout):  # every message such a reader sees, from start to end
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "isolation.level": isolation})
    tps = [TopicPartition(topic, p, 0) for p in partitions(consumer)]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=20)[1] for tp in tps}
    consumer.assign([tp for tp in tps if ends[tp.partition] > 0])
    seen, deadline = [], time.monotonic() + timeout
    # a read_committed reader passes the transactions' markers too: position reaches the end
    while any(tp.offset < ends[tp.partition] for tp in consumer.position(consumer.assignment())):
        if time.monotonic() > deadline:
            sys.exit(f"{topic} not read to its end {ends} (an open transaction?)")
        seen += [m for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return seen

if command == "create-topic":  # partitions, replication factor
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, int(rest[0]), int(rest[1]))])[topic].result(60)
elif command == "produce":
    producer = make_producer()
    produce_ids(producer, range(int(rest[0]), int(rest[1])))
    assert producer.flush(60) == 0
elif command == "produce-loop":  # start, rate/s, stop file: prints the id after the last one
    produce_loop(int(rest[0]), float(rest[1]), rest[2])
elif command == "produce-avro":  # registry URL, schema, poison every, start, stop
    encode = avro_orders(rest[0], rest[1], int(rest[2]))
    producer = make_producer()
    produce_ids(producer, range(int(rest[3]), int(rest[4])), encode)
    assert producer.flush(60) == 0
elif command == "produce-avro-loop":  # registry URL, schema, poison every, start, rate, stop file
    encode = avro_orders(rest[0], rest[1], int(rest[2]))
    produce_loop(int(rest[3]), float(rest[4]), rest[5], encode)
elif command == "dead-letters":  # what a read_committed reader sees, from the start to the end
    print(json.dumps([
        {"key": m.key().decode(), "value": m.value().hex(),
         "headers": {k: v.decode() for k, v in m.headers() or [] if v is not None}}
        for m in read_to_end("read_committed", float(rest[0]))
    ]))
elif command == "keys":  # [[partition, offset, key | null]] of every record, start to end
    print(json.dumps([[m.partition(), m.offset(), m.key() and m.key().decode()]
                      for m in read_to_end("read_uncommitted", 60)]))
elif command == "offsets":  # {"group": {p: o|None}, "end": {p: o}}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": rest[0]})
    tps = [TopicPartition(topic, p) for p in partitions(consumer)]
    group = {tp.partition: (tp.offset if tp.offset >= 0 else None)
             for tp in consumer.committed(tps, timeout=20)}
    end = {tp.partition: consumer.get_watermark_offsets(tp, timeout=20)[1] for tp in tps}
    consumer.close()
    print(json.dumps({"group": group, "end": end}))
elif command == "cluster":  # {"brokers": [id], "partitions": {p: {leader, replicas, isr}}}
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20)
    found = metadata.topics.get(topic)
    partitions = {p: {"leader": m.leader, "replicas": m.replicas, "isr": m.isrs}
                  for p, m in (found.partitions if found and not found.error else {}).items()}
    print(json.dumps({"brokers": sorted(metadata.brokers), "partitions": partitions}))
"""
)


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


# The typed records of the e2e tier: orders in Avro, their schema in the bed's registry.
ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "e2e",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


def typed_order(n: int) -> dict:
    """The order of id n as KAFKA_TOOL's avro_orders writes it."""
    return {"id": n, "item": f"item-{n % 7}", "amount": n / 4}


@dataclass(frozen=True)
class AvroOrders:
    """How the client pod writes orders in the Confluent wire format: ORDER_SCHEMA
    registered under <topic>-value at `registry`, and each `poison_every`-th id a record no
    reader can decode (KAFKA_TOOL's avro_orders)."""

    registry: str
    poison_every: int

    def args(self) -> tuple[str, ...]:
        return self.registry, json.dumps(ORDER_SCHEMA), str(self.poison_every)

    def is_poison(self, n: int) -> bool:
        return n % self.poison_every == 0

    def reason(self, n: int) -> str:
        """The source's poison reason (spark_app/formats/decoding.py) of id n's record."""
        return "truncated" if (n // self.poison_every) % 2 == 0 else "bad-magic-byte"


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


class ObjectStore:
    """The in-cluster MinIO of examples/kind/minio.yaml, reached from the tests through a
    `kubectl port-forward` (loopback only) with pyarrow's S3 filesystem."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.forward: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def credentials(self) -> dict[str, str]:
        secret = self.kube.get("secret", "minio-root", STORAGE_NAMESPACE)
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        return {"accessKeyId": data["user"], "secretAccessKey": data["password"]}

    def connect(self) -> None:
        """(Re)starts the port-forward; it ends when the pod behind it restarts."""
        if self.forward is not None and self.forward.poll() is None:
            return
        self.forward = subprocess.Popen(
            [*self.kube.base, "port-forward", "-n", STORAGE_NAMESPACE, "svc/minio", ":9000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.forward.stdout is not None
        line = self.forward.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert match, f"kubectl port-forward said: {line}"
        self.port = int(match.group(1))

    def filesystem(self):
        from devbed.object_store import s3_filesystem

        self.connect()
        creds = self.credentials
        return s3_filesystem(
            f"http://127.0.0.1:{self.port}", creds["accessKeyId"], creds["secretAccessKey"]
        )

    def give_secret(self, namespace: str, name: str = "s3-credentials") -> None:
        """The job namespace's copy of the key pair (what spec.s3.credentialsSecret names)."""
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": self.credentials,
        }
        self.kube.apply(json.dumps(secret), namespace)

    def close(self) -> None:
        if self.forward is not None:
            self.forward.terminate()
            self.forward.wait(10)


def start_object_store(kube: Kube) -> ObjectStore:
    """MinIO on the control plane, bucket `streamingjob` (examples/kind/minio.yaml)."""
    kube.run("apply", "-f", str(MINIO_MANIFEST))
    kube.run(
        "rollout", "status", "deployment/minio", "-n", STORAGE_NAMESPACE, "--timeout=240s",
        timeout=270,
    )  # fmt: skip
    return ObjectStore(kube)


def worker_nodes(kube: Kube) -> list[str]:
    nodes = json.loads(kube.run("get", "nodes", "-o", "json"))["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {})
    )


def job_namespace(kube: Kube, store: ObjectStore, login: KafkaLogin, name: str) -> str:
    """A namespace for jobs that enforces the `restricted` Pod Security Standard, with the
    Secrets examples/kind/orders-job.yaml names: s3-credentials, kafka-login, kafka-ca."""
    labels = {RESTRICTED: "restricted"}
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }
    kube.run("apply", "-f", "-", input=json.dumps(namespace))
    store.give_secret(name)
    login.give_secrets(kube, name)
    return name


if __name__ == "__main__":  # python -m devbed.kind_bed start-services (STREAMJOB_E2E_KUBECONFIG)
    import sys
    import tempfile

    if sys.argv[1:] != ["start-services"]:
        sys.exit("usage: python -m devbed.kind_bed start-services")
    with tempfile.TemporaryDirectory() as certificates:
        start_services(kubectl_for(os.environ["STREAMJOB_E2E_KUBECONFIG"]), Path(certificates))
