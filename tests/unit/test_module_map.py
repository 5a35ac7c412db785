"""docs/modules.md is what scripts/module_map.py writes now (`make docs`): every module of the
operator, the Spark side, the simulation and the native crate with its opening line, so a new,
moved or re-described module cannot be missing from it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


module_map = _script()


def test_the_committed_map_is_what_the_script_writes():
    assert (ROOT / "docs" / "modules.md").read_text() == module_map.render(), (
        "docs/modules.md is out of date: run `make docs`"
    )


def test_every_module_is_in_the_map():
    text = (ROOT / "docs" / "modules.md").read_text()
    files = [
        p
        for top in (*module_map.PYTHON_ROOTS, module_map.RUST_ROOT)
        for p in (ROOT / top).rglob("*.[pr][ys]")
        if "__pycache__" not in p.parts
    ]
    assert len(files) > 100
    missing = [str(p.relative_to(ROOT)) for p in files if f"[`{p.relative_to(ROOT)}`]" not in text]
    assert not missing, missing


def test_a_new_module_a_changed_line_and_one_without_a_docstring_show(tmp_path):
    for top in (*module_map.PYTHON_ROOTS, module_map.RUST_ROOT):
        (tmp_path / top).mkdir(parents=True)
    rules = tmp_path / "operator" / "streamingjob_operator" / "rules"
    rules.mkdir()
    (rules / "new.py").write_text('"""A new rule: pure.\n\nMore about it."""\n')
    (tmp_path / "spark_app" / "bare.py").write_text("x = 1\n")
    (tmp_path / "native" / "src" / "lib.rs").write_text("//! The crate: fast.\n//! More.\n")
    text = module_map.render(tmp_path)
    assert "## `operator/streamingjob_operator/rules/`" in text
    assert "| A new rule: pure. |" in text
    assert "[`spark_app/bare.py`](../spark_app/bare.py) | *(no opening line)* |" in text
    assert "| The crate: fast. |" in text
    (rules / "new.py").write_text('"""A changed rule."""\n')
    assert module_map.render(tmp_path) != text


def test_the_opening_sentence_runs_past_the_first_line_to_its_end():
    wrapped = "The one module that talks to the Kubernetes\nAPI, with its errors. More text."
    assert module_map.opening_sentence(wrapped) == (
        "The one module that talks to the Kubernetes API, with its errors."
    )
    assert module_map.opening_sentence("a | b") == "a \\| b"
