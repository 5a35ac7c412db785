"""scripts/crd_compat.py: the CRD stays compatible with the last released one; each kind of break
is caught and named by its JSON path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from scripts import crd_compat

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _released():
    return yaml.safe_load(crd_compat.latest_released().read_text())


def _schema(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _broken(edit):
    crd = copy.deepcopy(_released())
    edit(_schema(crd)["properties"]["spec"]["properties"])
    return crd


def test_the_current_crd_is_compatible_with_the_released_one():
    assert crd_compat.problems(_released(), yaml.safe_load(crd_compat.CURRENT.read_text())) == []
    assert crd_compat.main([]) == 0


def test_the_baseline_is_the_newest_released_copy(tmp_path):
    for name in ("streamingjob-0.2.0.yaml", "streamingjob-0.10.0.yaml", "streamingjob-0.9.1.yaml"):
        (tmp_path / name).write_text("{}")
    assert crd_compat.latest_released(tmp_path).name == "streamingjob-0.10.0.yaml"


def test_a_removed_property_is_a_break():
    crd = _broken(lambda spec: spec["executor"]["properties"].pop("instances"))
    assert crd_compat.problems(_released(), crd) == [
        "v1alpha1 .spec.executor.instances: property removed"
    ]


def test_a_removed_enum_value_is_a_break():
    crd = _broken(lambda spec: spec["upgradeMode"]["enum"].remove("stateless"))
    assert crd_compat.problems(_released(), crd) == [
        "v1alpha1 .spec.upgradeMode: enum value 'stateless' removed"
    ]


def test_a_type_change_is_a_break():
    crd = _broken(lambda spec: spec["executor"]["properties"]["instances"].update(type="string"))
    assert crd_compat.problems(_released(), crd) == [
        "v1alpha1 .spec.executor.instances: type changed from integer to string"
    ]


def test_a_type_change_inside_a_list_is_a_break():
    def edit(spec):
        spec["tolerations"]["items"]["properties"]["effect"]["type"] = "integer"

    assert crd_compat.problems(_released(), _broken(edit)) == [
        "v1alpha1 .spec.tolerations[].effect: type changed from string to integer"
    ]


def test_an_optional_field_made_required_is_a_break():
    def edit(spec):
        spec["executor"].setdefault("required", []).append("instances")

    crd = _broken(edit)
    assert crd_compat.problems(_released(), crd) == [
        "v1alpha1 .spec.executor.instances: newly required (optional field)"
    ]


def test_a_new_required_field_is_a_break():
    def edit(spec):
        spec["executor"]["properties"]["zone"] = {"type": "string", "description": "z"}
        spec["executor"].setdefault("required", []).append("zone")

    assert crd_compat.problems(_released(), _broken(edit)) == [
        "v1alpha1 .spec.executor.zone: newly required (new field)"
    ]


def test_a_removed_served_version_is_a_break():
    crd = copy.deepcopy(_released())
    crd["spec"]["versions"][0]["name"] = "v1beta1"
    assert crd_compat.problems(_released(), crd) == ["v1alpha1: served version removed"]


def test_additions_are_compatible():
    def edit(spec):
        spec["executor"]["properties"]["zone"] = {"type": "string", "description": "z"}
        spec["upgradeMode"]["enum"].append("savepoint")

    crd = _broken(edit)
    crd["spec"]["versions"][0]["subresources"]["scale"] = {
        "specReplicasPath": ".spec.executor.instances"
    }
    assert crd_compat.problems(_released(), crd) == []


def test_the_cli_prints_one_line_per_problem_and_fails(tmp_path, capsys):
    crd = _broken(lambda spec: spec["executor"]["properties"].pop("instances"))
    broken = tmp_path / "crd.yaml"
    broken.write_text(yaml.safe_dump(crd))
    released = crd_compat.latest_released()
    assert crd_compat.main([str(released), str(broken)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"CRD incompatible with {released.name}: v1alpha1 .spec.executor.instances: "
        "property removed"
    ]
