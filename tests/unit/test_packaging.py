"""The project installs as a package: `pip wheel .` builds it, and the installed entry points
exist and work, importing the installed package (not the checked-out tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of the tree, installed with `pip install --target` (no deps: they
    are the venv's)."""
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src"  # what the build reads (setuptools writes build/ and *.egg-info there)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in ("spark_app", "operator/streamingjob_operator"):
        shutil.copytree(ROOT / part, src / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels, target = tmp / "wheels", tmp / "site"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
        check=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("streamingjob-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "spark_app/runner/runner.py" in names and "streamingjob_operator/handlers.py" in names
    assert not [n for n in names if n.startswith(("tests/", "operator/"))]
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        timeout=120,
    )
    return target


def _run(target: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(target)}  # the installed package, not the tree
    return subprocess.run(
        argv, env=env, cwd=target, capture_output=True, text=True, timeout=60, check=False
    )


def test_entry_points_exist_and_work(installed: Path):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {
        "streamingjob-run",
        "streamingjob-operator",
        "streamingjob-offsets",
        "streamingjob-delta-maintenance",
        "streamingjob-iceberg-maintenance",
    }
    for name in scripts:
        proc = _run(installed, str(installed / "bin" / name), "--help")
        assert proc.returncode == 0, (name, proc.stderr)
        assert "usage:" in proc.stdout, (name, proc.stdout)


def test_the_installed_package_is_imported(installed: Path):
    code = (
        "import spark_app, streamingjob_operator.api.crd as c; "
        "print(spark_app.__file__, c.__file__)"
    )
    proc = _run(installed, sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert all(path.startswith(str(installed)) for path in proc.stdout.split())


def test_images_install_the_package_not_sources_on_a_path():
    for image in ("spark", "operator"):
        dockerfile = (ROOT / "images" / image / "Dockerfile").read_text()
        assert ".pth" not in dockerfile and "PYTHONPATH" not in dockerfile, image
        assert "-r /tmp/project.txt" in dockerfile, image  # the project's hashed wheel
    build = (ROOT / "images" / "build.sh").read_text()
    assert 'project_wheel "$CTX/project"' in build
