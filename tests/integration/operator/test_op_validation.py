"""Manifests the API server itself rejects: the generated schema and its CEL rules."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.integration.operator.kube_helpers import Kube, job_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _rejected(kube: Kube, ns: str, spec: dict) -> str:
    with pytest.raises(client.ApiException) as info:
        kube.create_job(ns, "invalid", spec)
    assert info.value.status == 422
    return json.loads(info.value.body)["message"]


def test_schema_rejects_bad_enum_naming_the_field(kube: Kube, ns: str):
    spec = job_spec()
    spec["restartPolicy"]["type"] = "Sometimes"
    body = _rejected(kube, ns, spec)
    assert "spec.restartPolicy.type" in body


def test_schema_rejects_missing_required_and_unknown_types(kube: Kube, ns: str):
    spec = job_spec()
    del spec["image"]
    assert "spec.image" in _rejected(kube, ns, spec)
    spec = job_spec(executor={"instances": 0})
    assert "spec.executor.instances" in _rejected(kube, ns, spec)


def test_cel_rules(kube: Kube, ns: str):
    spec = job_spec()
    spec["job"]["source"]["subscribePattern"] = "orders.*"
    body = _rejected(kube, ns, spec)
    assert "spec.job.source" in body and "exactly one of subscribe or subscribePattern" in body

    spec = job_spec()
    spec["restartPolicy"]["backoff"] = {"baseSeconds": 10, "capSeconds": 5}
    body = _rejected(kube, ns, spec)
    assert "spec.restartPolicy.backoff" in body and "capSeconds must be >= baseSeconds" in body

    spec = job_spec()
    spec["job"]["sink"] = {"format": "parquet"}
    assert "path is required for file sinks" in _rejected(kube, ns, spec)


def test_defaults_are_applied(kube: Kube, ns: str):
    spec = job_spec()
    del spec["restartPolicy"]
    created = kube.create_job(ns, "defaults", spec)
    s = created["spec"]
    assert s["upgradeMode"] == "stateless" and s["suspend"] is False
    assert s["restartPolicy"]["type"] == "Always"
    assert s["restartPolicy"]["backoff"] == {"baseSeconds": 10, "capSeconds": 300}
    assert s["job"]["source"]["startingOffsets"] == "committed"
    assert "kafkaCredentials" not in s


def test_examples_are_accepted(kube: Kube, ns: str):
    import yaml

    from tests.integration.operator.kube_helpers import REPO

    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "StreamingJob":
                kube.create_job(kube.namespace(), doc["metadata"]["name"], doc["spec"])
