"""`make demo`: the orders job running on kind, in one command, then what to try.

    python -m devbed.demo        # up: cluster, images, operator, Kafka, MinIO, the job
    python -m devbed.demo down   # the cluster goes (the caches stay)

The same bed as the e2e tier (devbed/kind_bed.py, which the tier's fixtures call): the kind
cluster of scripts/kind/up.sh, the operator by `helm install`, the replicated Kafka with its
SASL_SSL listener, MinIO, and examples/kind/orders-job.yaml in namespace `orders`, which
enforces the `restricted` Pod Security Standard. Idempotent: a second run reuses the cluster.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from devbed.kind_bed import job_namespace
from devbed.kind_cluster import (
    REGISTRY,
    REPO_ROOT,
    Kube,
    kind_down,
    kind_up,
    kubectl_for,
    project_images,
    wait_for,
)
from devbed.kind_kafka import KAFKA_NAMESPACE, read_kafka_login, start_kafka
from devbed.kind_kafka_client import KafkaClient, start_kafka_client
from devbed.kind_operator import OPERATOR_NAMESPACE, RELEASE, helm_for, install_operator
from devbed.kind_storage import BUCKET, STORAGE_NAMESPACE, start_object_store

NAMESPACE, JOB, TOPIC = "orders", "orders", "orders"
ORDERS = 20_000  # produced before the job starts: its first batches have work


def say(line: str) -> None:
    print(f"demo: {line}", file=sys.stderr, flush=True)


def up() -> None:
    say("kind cluster and images (scripts/kind/up.sh; the first run builds them, minutes)")
    kubeconfig = kind_up()
    kube, helm, images = kubectl_for(kubeconfig), helm_for(kubeconfig), project_images()
    say("the operator (helm install)")
    install_operator(kube, helm, images)
    say("Kafka: 3 brokers, SASL_SSL with a CA of this bed's own")
    with tempfile.TemporaryDirectory() as workdir:
        bootstrap = start_kafka(kube, Path(workdir))
    kafka = start_kafka_client(kube, bootstrap, images)
    say("MinIO: checkpoints and the Parquet output")
    store = start_object_store(kube)
    job_namespace(kube, store, read_kafka_login(kube), NAMESPACE)
    _orders_topic(kafka)
    say(f"the job: kubectl apply -n {NAMESPACE} -f examples/kind/orders-job.yaml")
    kube.run("apply", "-n", NAMESPACE, "-f", str(REPO_ROOT / "examples/kind/orders-job.yaml"))
    status = wait_for("the job's first committed batch", lambda: _first_batch(kube), 600, 2)
    print(guide(kube, status))


def _orders_topic(kafka: KafkaClient) -> None:
    if kafka.cluster(TOPIC)["partitions"]:
        say(f"topic {TOPIC} exists: not produced again")
        return
    say(f"topic {TOPIC} (3 partitions, RF 3) and {ORDERS} orders")
    kafka.create_topic(TOPIC)
    kafka.produce(TOPIC, 0, ORDERS)


def _first_batch(kube: Kube) -> dict | None:
    job = json.loads(kube.run("get", "streamingjob", JOB, "-n", NAMESPACE, "-o", "json"))
    status = job.get("status") or {}
    batch = status.get("latestBatch") or {}
    return status if status.get("phase") == "Running" and batch.get("batchId") is not None else None


def guide(kube: Kube, status: dict) -> str:
    """Where the job is, what to look at and what to do to it, as commands to paste."""
    kubectl, kubeconfig = kube.base[0], kube.base[2]
    produce = (
        f"kubectl -n {KAFKA_NAMESPACE} exec {KafkaClient.POD} -- python -c 'from confluent_kafka "
        'import Producer; p = Producer({"bootstrap.servers": "kafka:9092"}); '
        '[p.produce("orders", value=b"{}") for _ in range(1000)]; p.flush()\''
    )
    batch = status["latestBatch"]
    images = project_images()
    mine = images.orders.rsplit(":", 1)[0] + ":mine"  # a new tag: the old one stays as it was
    return f"""
The orders job runs: epoch {status["epoch"]}, batch {batch["batchId"]} committed, driver \
{status["driverPod"]}. In your shell:

  export KUBECONFIG={kubeconfig}
  export PATH={Path(kubectl).parent}:$PATH    # kubectl and helm, as built here

Watch
  kubectl -n {NAMESPACE} get sj {JOB} -w        phase, epoch, restarts, start path, lag, executors
  kubectl -n {NAMESPACE} describe sj {JOB}      conditions, history, Events
  kubectl -n {NAMESPACE} get pods -o wide -w     the driver and executors, by node
  kubectl -n {OPERATOR_NAMESPACE} logs deploy/{RELEASE}-streamingjob-operator -f

Try (each is an e2e scenario: tests/e2e/test_scenarios.py)
  restore   kubectl -n {NAMESPACE} delete pod -l spark-role=driver --force --grace-period=0
            attempt + 1 in the same epoch: the checkpoint's next batch, nothing read twice
  drain     kubectl drain <the driver's node> --ignore-daemonsets --delete-emptydir-data
            the job moves between batches, then the drain completes (`kubectl uncordon` after)
  redeploy  kubectl -n {NAMESPACE} patch sj {JOB} --type merge -p '{{"spec":{{"redeployNonce":1}}}}'
            epoch + 1, a fresh checkpoint from the group's committed offsets (next time: 2)
  scale     kubectl -n {NAMESPACE} scale sj {JOB} --replicas 3
            a restore in the same epoch with one more executor
  new code  edit examples/user-image/orders_transform.py, then
            docker build --build-arg SPARK_IMAGE={images.spark} -t {mine} examples/user-image
            docker push {mine}
            kubectl -n {NAMESPACE} patch sj {JOB} --type merge -p '{{"spec":{{"image":"{mine}"}}}}'
            a redeploy onto your image, pulled from the bed's registry ({REGISTRY})
  produce   {produce}

Output: s3a://{BUCKET}/output/orders/epoch-<n> (kubectl -n {STORAGE_NAMESPACE} port-forward \
svc/minio 9000; the key pair is in Secret minio-root). Remove it all: make demo-down
"""


def main(argv: list[str]) -> int:
    if argv[1:] == ["down"]:
        kind_down()
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    up()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
