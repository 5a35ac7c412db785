"""The hash locks in requirements/ (scripts/lock.sh) match pyproject.toml's pins, cover every
transitive dependency, hash every requirement, and are what the venv, the images and CI
install (`pip install --require-hashes`); no pip command installs anything unlocked."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCKS = {"dev": ("spark", "operator", "dev"), "spark": ("spark",), "operator": ("operator",)}
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;\\]+)(\s*;[^\\]*)?\s*\\?$")


def _lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """{package: (version, hashes)} of requirements/<name>.txt."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in (ROOT / "requirements" / f"{name}.txt").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if match := PIN.match(line):
            current = canonicalize_name(match.group(1))
            entries[current] = (match.group(2), [])
        else:
            hashed = re.fullmatch(r"\s+--hash=sha256:([0-9a-f]{64})\s*\\?", line)
            assert hashed and current, f"requirements/{name}.txt: not a pin or hash: {line!r}"
            entries[current][1].append(hashed.group(1))
    return entries


def _direct(extras: tuple[str, ...]) -> dict[str, str]:
    reqs = [*PROJECT["dependencies"]]
    for extra in extras:
        reqs += [
            r for r in PROJECT["optional-dependencies"][extra] if not r.startswith("streamingjob")
        ]
    pins = {}
    for text in reqs:
        req = Requirement(text)
        (spec,) = req.specifier  # every direct dependency is pinned with ==
        assert spec.operator == "==", text
        pins[canonicalize_name(req.name)] = spec.version
    return pins


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_lock_matches_pyproject_and_hashes_everything(name: str):
    lock = _lock(name)
    for package, version in _direct(LOCKS[name]).items():
        assert package in lock, f"{package} is pinned in pyproject.toml, not in {name}.txt"
        assert lock[package][0] == version, f"{package}: lock {lock[package][0]} != {version}"
    assert all(hashes for _, hashes in lock.values()), "a requirement without a hash"


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_lock_covers_the_transitive_dependencies(name: str):
    """Each direct pin's dependencies (as installed in this venv, from the dev lock), for
    this platform and Python, are in the lock at the installed version."""
    lock, dev = _lock(name), _lock("dev")
    todo, seen = list(_direct(LOCKS[name])), set()
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        assert package in lock, f"{name}.txt misses {package} (run scripts/lock.sh)"
        assert lock[package][0] == dev[package][0] == metadata.version(package)
        for text in metadata.requires(package) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))


def test_the_venv_is_exactly_the_dev_lock():
    check = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    extra = set(installed) - set(_lock("dev")) - {"pip", "streamingjob-native"}
    assert not extra, f"installed but not locked: {sorted(extra)}"


def test_every_pip_install_is_hash_checked():
    """The venv, the images and CI (which runs make → scripts/venv.sh) install with
    --require-hashes; no `pip install --upgrade pip` or other unlocked install."""
    files = subprocess.run(
        ["git", "ls-files", "scripts", "images", "Makefile", ".ci"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    installs = []
    for name in files:
        lines = (ROOT / name).read_text(errors="replace").splitlines()
        text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
        for match in re.finditer(r"pip\"? install((?:[^\n]|\\\n)*)", text):
            installs.append((name, match.group(1)))
    assert installs
    for name, args in installs:
        local = re.search(r"--no-deps[^\n]*\"\$wheel\"", args)  # a wheel built from this repo
        assert "--require-hashes" in args or local, f"{name}: pip install{args}"
        assert "--upgrade" not in args and " -U " not in args, f"{name}: pip install{args}"


def test_the_maturin_lock_matches_the_native_builds_pin():
    native = (ROOT / "scripts" / "native.sh").read_text()
    (pin,) = re.findall(r"^MATURIN_VERSION=(\S+)$", native, re.MULTILINE)
    assert _lock("maturin") == {"maturin": (pin, _lock("maturin")["maturin"][1])}
    assert _lock("maturin")["maturin"][1], "unhashed"
