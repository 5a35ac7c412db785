"""The kind bed works: the Spark image runs a job as the Spark user. Services, the Kafka image
and executor pods from the Spark image are the scenarios' first steps (test_scenarios.py)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.bed import ON_CONTROL_PLANE, Images, Kube

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
    # the Spark image is on the control plane only (the workers have the orders image FROM it)
    pod = _pod("spark-local", images.spark, ["python", "-c", LOCAL_JOB], **ON_CONTROL_PLANE)
    kube.apply(pod, namespace)
    logs = _assert_succeeded(kube, "spark-local", namespace)
    assert "UID 185 COUNT 499500" in logs
