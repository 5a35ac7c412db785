"""Renders the StreamingJob CRD from the pydantic models.

    python -m streamingjob_operator.api.crd > crds/streamingjob.yaml

The output is a structural schema: `$ref`s inlined, Optional fields as plain types left out of
`required` (no anyOf/nullable; `nullable` only on the values of string maps, whose nulls a CEL
rule refuses instead of the API server dropping them), descriptions everywhere, defaults,
enums, CEL rules.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml
from pydantic import BaseModel

from streamingjob_operator.api.models import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    SHORT_NAME,
    SINGULAR,
    StreamingJobSpec,
    StreamingJobStatus,
)

REGENERATE = "python -m streamingjob_operator.api.crd > crds/streamingjob.yaml"
CRD_PATH = "crds/streamingjob.yaml"

_DROP_KEYS = {"title", "additionalProperties_false"}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = copy.deepcopy(defs[node.pop("$ref").split("/")[-1]])
        target.update(node)  # the use site's description and default win
        node = target
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        inner = _inline(inner, defs)
        inner.update(node)
        node = inner
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf structurally: {node['anyOf']}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_inline(options[0], defs), **rest, "_optional": True}
        if node.get("default", "missing") is None:
            del node["default"]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "description" and isinstance(value, str):
            out[key] = " ".join(value.split())
            continue
        if key == "properties":
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _inline(value, defs)
        else:
            out[key] = value
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if out.get("additionalProperties") is False:
        del out["additionalProperties"]
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("type") == "object" and out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    return out


def _object_defaults(node: dict[str, Any]) -> None:
    """Nested objects that are not required default to {} so the API server fills in their
    own defaults (a missing restartPolicy still gets restartPolicy.type: Always)."""
    props = node.get("properties", {})
    required = set(node.get("required", []))
    for name, sub in props.items():
        if sub.get("type") == "object" and "properties" in sub:
            _object_defaults(sub)
            optional = sub.pop("_optional", False)
            if name not in required and not optional and not sub.get("required"):
                sub.setdefault("default", {})
        items = sub.get("items")
        if sub.get("type") == "array" and isinstance(items, dict) and "properties" in items:
            _object_defaults(items)


def _drop_markers(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_markers(v) for k, v in node.items() if k != "_optional"}
    if isinstance(node, list):
        return [_drop_markers(v) for v in node]
    return node


def _strip_defaults(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_strip_defaults(v) for v in node]
    return node


def _check_descriptions(node: dict[str, Any], path: str) -> None:
    for name, sub in node.get("properties", {}).items():
        if path == "" and name == "metadata":
            continue
        if not sub.get("description"):
            raise ValueError(f"{path}.{name} has no description")
        _check_descriptions(sub, f"{path}.{name}")
        if isinstance(sub.get("items"), dict):
            _check_descriptions(sub["items"], f"{path}.{name}[]")


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _inline(raw, defs)
    return schema


def spec_schema() -> dict[str, Any]:
    schema = model_schema(StreamingJobSpec)
    _object_defaults(schema)
    dropped: dict[str, Any] = _drop_markers(schema)
    return dropped


def status_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _drop_markers(_strip_defaults(model_schema(StreamingJobStatus)))
    return schema


def build_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["all", "spark"],
            },
            "versions": [_version(_root_schema())],
        },
    }


def _root_schema() -> dict[str, Any]:
    """The object's schema: spec and status from the models, every field described."""
    spec = spec_schema()
    status = status_schema()
    root = {
        "type": "object",
        "description": "A Spark Structured Streaming job that reads Kafka, kept running by "
        "the streamingjob operator: automatic restarts restore from the checkpoint, manual "
        "redeploys start a new epoch from the consumer group's committed offsets.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion of the object."},
            "kind": {"type": "string", "description": "Kind of the object."},
            # the API server allows nothing but the type here (it owns metadata's schema)
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }
    _check_descriptions(root, "")
    return root


def _version(root: dict[str, Any]) -> dict[str, Any]:
    """The one served version: its subresources, kubectl's columns and the schema."""
    return {
        "name": API_VERSION,
        "served": True,
        "storage": True,
        "subresources": {
            "status": {},
            # kubectl scale, the HorizontalPodAutoscaler and KEDA drive the executor count; a
            # change restarts the job in its epoch (restore)
            "scale": {
                "specReplicasPath": ".spec.executor.instances",
                "statusReplicasPath": ".status.executors",
                "labelSelectorPath": ".status.selector",
            },
        },
        "additionalPrinterColumns": [
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Epoch", "type": "integer", "jsonPath": ".status.epoch"},
            {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
            {"name": "Start", "type": "string", "jsonPath": ".status.startPath"},
            {"name": "Lag", "type": "integer", "jsonPath": ".status.lag"},
            {"name": "Executors", "type": "integer", "jsonPath": ".status.executors"},
            {"name": "Standby", "type": "string", "jsonPath": ".status.standby.state"},
            {"name": "Sink", "type": "string", "jsonPath": ".status.sink", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        "schema": {"openAPIV3Schema": root},
    }


def render() -> str:
    header = (
        "# Generated from operator/streamingjob_operator/api/models.py and "
        "spark_app/api/manifest.py."
        f"\n# Do not edit: regenerate with `{REGENERATE}`.\n"
    )
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
