"""The CRD is generated from the models; the committed copy and the examples agree with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spark_app.api.field_rules import NO_NULL_VALUES
from streamingjob_operator.api.crd import REGENERATE, build_crd, render
from streamingjob_operator.api.models import StreamingJob
from streamingjob_operator.children.validation import check_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[4]


def test_committed_crd_matches_the_models():
    committed = (ROOT / "crds" / "streamingjob.yaml").read_text()
    assert committed == render(), f"crds/streamingjob.yaml is stale; regenerate: {REGENERATE}"


def _walk(node, path="$"):
    """Every schema of the tree (a `properties` map is walked into, not taken for a schema:
    a field may be named `properties` or `type`)."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    yield from _walk(sub, f"{path}.{name}")
                continue
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def test_schema_is_structural_and_documented():
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        if isinstance(node, dict):
            for bad in ("$ref", "anyOf", "allOf", "oneOf", "title", "$defs"):
                assert bad not in node, f"{bad} at {path}"
            for name, sub in node.items():
                if isinstance(sub, dict) and sub.get("nullable"):
                    # only the values of string maps, where a CEL rule refuses the null that
                    # the API server would otherwise drop without a word
                    assert name == "additionalProperties", f"nullable at {path}.{name}"
                    assert NO_NULL_VALUES in node["x-kubernetes-validations"], path
            if "properties" in node:
                assert node.get("type") == "object", path
                for name, sub in node["properties"].items():
                    if path == "$" and name == "metadata":
                        continue  # the API server forbids anything but its type
                    assert sub.get("description"), f"{path}.{name} has no description"
                    assert "type" in sub or sub.get("x-kubernetes-preserve-unknown-fields"), (
                        f"{path}.{name} has no type"
                    )


def test_crd_metadata_columns_and_rules():
    crd = build_crd()
    assert crd["metadata"]["name"] == "streamingjobs.sparkkafka.dev"
    assert crd["spec"]["names"]["shortNames"] == ["sj"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.executor.instances",
            "statusReplicasPath": ".status.executors",
            "labelSelectorPath": ".status.selector",
        },
    }
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Phase"] == ".status.phase"
    assert columns["Restarts"] == ".status.restarts"
    assert columns["Start"] == ".status.startPath"
    assert columns["Lag"] == ".status.lag"
    assert columns["Age"] == ".metadata.creationTimestamp"
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    source = spec["properties"]["job"]["properties"]["source"]
    assert source["x-kubernetes-validations"]
    assert spec["properties"]["upgradeMode"]["enum"] == ["stateless", "last-state"]
    assert spec["properties"]["upgradeMode"]["default"] == "stateless"
    assert "default" not in spec["properties"]["kafkaCredentials"]  # optional, no {}
    assert spec["properties"]["restartPolicy"]["default"] == {}
    assert spec["required"] == ["image", "job", "checkpoint"]


def _examples():
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "StreamingJob":
                yield pytest.param(
                    doc, id=f"{path.relative_to(ROOT / 'examples')}:{doc['metadata']['name']}"
                )


@pytest.mark.parametrize("doc", list(_examples()))
def test_examples_validate_against_the_models(doc):
    job = StreamingJob.model_validate(doc)
    assert job.spec.image
    # and the operator's own rules pass: no reserved sparkConf key (spark.ui.enabled is
    # spec.sparkUI now), no credential in the driver's arguments
    assert [str(p) for p in check_spec(job.spec)] == []
