"""The kind bed works: our images run in it, pods reach each other through Services, and Spark
starts executor pods from our Spark image through its entrypoint."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.e2e.conftest import ON_CONTROL_PLANE, Images, Kube

pytestmark = pytest.mark.e2e


def _pod(name: str, image: str, command: list[str], **extra: object) -> str:
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}
        ],
    }
    spec.update(extra)
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def _assert_succeeded(kube: Kube, pod: str, namespace: str, timeout: float = 300) -> str:
    phase = kube.wait_pod_done(pod, namespace, timeout)
    logs = kube.logs(pod, namespace)
    assert phase == "Succeeded", f"pod {pod} {phase}:\n{logs}"
    return logs


LOCAL_JOB = """
import os
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").appName("smoke").getOrCreate()
print("UID", os.getuid(), "COUNT", spark.range(1000).selectExpr("sum(id)").first()[0])
spark.stop()
"""


def test_spark_image_runs_a_local_pyspark_job(kube: Kube, namespace: str, images: Images) -> None:
    kube.apply(_pod("spark-local", images.spark, ["python", "-c", LOCAL_JOB]), namespace)
    logs = _assert_succeeded(kube, "spark-local", namespace)
    assert "UID 185 COUNT 499500" in logs


KAFKA_CLIENT = """
import sys, uuid
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap = sys.argv[1]
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic("smoke", 1, 1)])["smoke"].result(60)
producer = Producer({"bootstrap.servers": bootstrap})
for i in range(5):
    producer.produce("smoke", value=f"record-{i}".encode())
assert producer.flush(60) == 0
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                     "auto.offset.reset": "earliest"})
consumer.subscribe(["smoke"])
seen = []
for _ in range(120):
    message = consumer.poll(1.0)
    if message is not None and message.error() is None:
        seen.append(message.value().decode())
    if len(seen) == 5:
        break
consumer.close()
print("KAFKA", " ".join(seen))
"""


def test_kafka_image_serves_clients_through_a_service(
    kube: Kube, namespace: str, images: Images
) -> None:
    service_host = f"kafka.{namespace}.svc.cluster.local"
    broker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kafka", "labels": {"app": "kafka"}},
        "spec": {
            # the test services' images are on the control plane only; the client on a
            # worker reaches it across nodes
            **ON_CONTROL_PLANE,
            "containers": [
                {
                    "name": "kafka",
                    "image": images.kafka,
                    "imagePullPolicy": "Never",
                    "env": [{"name": "KAFKA_ADVERTISED_HOST", "value": service_host}],
                    "ports": [{"name": "kafka", "containerPort": 9092}],
                    "readinessProbe": {
                        "tcpSocket": {"port": 9092},
                        "periodSeconds": 2,
                        "failureThreshold": 120,
                    },
                }
            ],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kafka"},
        "spec": {"selector": {"app": "kafka"}, "ports": [{"name": "kafka", "port": 9092}]},
    }
    manifest = {"apiVersion": "v1", "kind": "List", "items": [broker, service]}
    kube.apply(json.dumps(manifest), namespace)
    kube.wait_ready("kafka", namespace)

    kube.apply(
        _pod("client", images.spark, ["python", "-c", KAFKA_CLIENT, f"{service_host}:9092"]),
        namespace,
    )
    logs = _assert_succeeded(kube, "client", namespace, timeout=180)
    assert "KAFKA record-0 record-1 record-2 record-3 record-4" in logs


EXECUTOR_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("smoke-executors").getOrCreate()
rdd = spark.sparkContext.parallelize(range(100), 2)
hosts = rdd.map(lambda x: __import__("socket").gethostname()).distinct().collect()
print("SUM", rdd.map(lambda x: x * 2).sum(), "EXECUTOR_HOSTS", len(hosts))
spark.stop()
"""


def test_spark_starts_executor_pods_from_the_image(
    kube: Kube, namespace: str, images: Images
) -> None:
    """A driver pod runs spark-submit against the API server; Spark creates an executor pod
    from the same image with `executor` and SPARK_* env, which our entrypoint must start."""
    rbac = textwrap.dedent(f"""
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: ServiceAccount
          metadata: {{name: spark}}
        - apiVersion: rbac.authorization.k8s.io/v1
          kind: Role
          metadata: {{name: spark-driver}}
          rules:
          - apiGroups: [""]
            resources: [pods, services, configmaps, persistentvolumeclaims]
            verbs: [create, get, list, watch, delete, deletecollection, patch, update]
        - apiVersion: rbac.authorization.k8s.io/v1
          kind: RoleBinding
          metadata: {{name: spark-driver}}
          roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: spark-driver}}
          subjects: [{{kind: ServiceAccount, name: spark, namespace: {namespace}}}]
        - apiVersion: v1
          kind: ConfigMap
          metadata: {{name: job}}
          data:
            job.py: {json.dumps(EXECUTOR_JOB)}
        """)
    kube.apply(rbac, namespace)
    submit = [
        "spark-submit",
        "--master", "k8s://https://kubernetes.default.svc",
        "--deploy-mode", "client",
        "--conf", "spark.driver.host=$(POD_IP)",
        "--conf", "spark.kubernetes.driver.pod.name=driver",
        "--conf", f"spark.kubernetes.namespace={namespace}",
        "--conf", f"spark.kubernetes.container.image={images.spark}",
        "--conf", "spark.kubernetes.container.image.pullPolicy=Never",
        "--conf", "spark.executor.instances=1",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.kubernetes.executor.request.cores=100m",
        "--conf", "spark.kubernetes.executor.deleteOnTermination=false",
        "/job/job.py",
    ]  # fmt: skip
    driver = _pod(
        "driver",
        images.spark,
        submit,
        serviceAccountName="spark",
        volumes=[{"name": "job", "configMap": {"name": "job"}}],
    )
    pod = json.loads(driver)
    main = pod["spec"]["containers"][0]
    main["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    main["volumeMounts"] = [{"name": "job", "mountPath": "/job"}]
    kube.apply(json.dumps(pod), namespace)
    logs = _assert_succeeded(kube, "driver", namespace, timeout=400)
    assert "SUM 9900 EXECUTOR_HOSTS 1" in logs
    executors = json.loads(
        kube.run("get", "pods", "-n", namespace, "-l", "spark-role=executor", "-o", "json")
    )["items"]
    assert executors, "no executor pod was created"
    assert executors[0]["spec"]["containers"][0]["args"] == ["executor"]
