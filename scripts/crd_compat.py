"""Fails when a CRD breaks objects written against the last released one.

    python scripts/crd_compat.py [crds/released/<latest>.yaml] [crds/streamingjob.yaml]

Compares each version served by the released CRD with the same version of the current CRD,
walking both openAPIV3Schema trees. A break is one of: a served version gone, a removed property,
a removed enum value, a changed type, a newly required field (an existing field made required, or
a new field added as required). Adding optional fields, enum values, subresources or versions is
compatible. One line per problem, naming the JSON path; exit status 1 when there is any.

Without arguments it compares crds/streamingjob.yaml with the newest copy in crds/released/ (a
release copies the CRD there: see docs/operator/configuration.md "Upgrading").
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CURRENT = ROOT / "crds" / "streamingjob.yaml"
RELEASED_DIR = ROOT / "crds" / "released"

Schema = dict[str, Any]


def _version_key(path: Path) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", path.stem.rsplit("-", 1)[-1])
    return tuple(int(n) for n in numbers)


def latest_released(directory: Path = RELEASED_DIR) -> Path:
    copies = sorted(directory.glob("*.yaml"), key=_version_key)
    if not copies:
        raise SystemExit(f"no released CRD in {directory}")
    return copies[-1]


def _schemas(crd: dict[str, Any], served_only: bool) -> dict[str, Schema]:
    return {
        v["name"]: v.get("schema", {}).get("openAPIV3Schema", {})
        for v in crd["spec"]["versions"]
        if v.get("served", True) or not served_only
    }


def _compare(old: Schema, new: Schema, path: str) -> Iterator[str]:
    if old.get("type") != new.get("type"):
        yield f"{path or '.'}: type changed from {old.get('type')} to {new.get('type')}"
        return
    if "enum" in old:
        if "enum" not in new:
            pass  # the enum restriction was lifted: every old value stays valid
        else:
            for value in old["enum"]:
                if value not in new["enum"]:
                    yield f"{path or '.'}: enum value {value!r} removed"
    old_required = set(old.get("required", []))
    for name in sorted(set(new.get("required", [])) - old_required):
        was = "optional" if name in old.get("properties", {}) else "new"
        yield f"{path}.{name}: newly required ({was} field)"
    old_props = old.get("properties", {})
    new_props = new.get("properties", {})
    for name, old_sub in old_props.items():
        if name not in new_props:
            if not new.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{path}.{name}: property removed"
            continue
        yield from _compare(old_sub, new_props[name], f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(old.get(key), dict):
            if not isinstance(new.get(key), dict):
                yield f"{path}{suffix}: {key} schema removed"
            else:
                yield from _compare(old[key], new[key], f"{path}{suffix}")


def problems(released: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Every break of `current` against `released`, one line each (empty: compatible)."""
    old_versions = _schemas(released, served_only=True)
    new_versions = _schemas(current, served_only=True)
    found: list[str] = []
    for version, old_schema in old_versions.items():
        if version not in new_versions:
            found.append(f"{version}: served version removed")
            continue
        found.extend(
            f"{version} {line}" for line in _compare(old_schema, new_versions[version], "")
        )
    return found


def main(argv: list[str]) -> int:
    released_path = Path(argv[0]) if argv else latest_released()
    current_path = Path(argv[1]) if len(argv) > 1 else CURRENT
    released = yaml.safe_load(released_path.read_text())
    current = yaml.safe_load(current_path.read_text())
    found = problems(released, current)
    for line in found:
        print(f"CRD incompatible with {released_path.name}: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
