"""Code short enough to read at once (issue 42): no function of the product, the dev bed or
the simulation over 60 lines, in Python or in the native crate's Rust; no module of theirs over
400 lines (Python, and Rust but the crate's `*_tests.rs` test modules), no class over 300."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60
MODULE_LIMIT, CLASS_LIMIT = 400, 300
PYTHON = ("operator/streamingjob_operator", "spark_app", "devbed", "simulation")
# a Rust `fn` item's first line, at any indentation (methods too); a declaration ends in ';'
RUST_FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|unsafe\s+)*fn\s+(\w+)")


def python_lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    return {
        f"{path.relative_to(ROOT)}::{n.name}": n.end_lineno - n.lineno + 1  # type: ignore[operator]
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def rust_lengths(text: str, name: str) -> dict[str, int]:
    """Each fn's lines, from its signature to the `}` at its own indentation (rustfmt's
    layout, which CI's `cargo fmt --check` holds the crate to)."""
    lines = text.splitlines()
    found: dict[str, int] = {}
    for i, line in enumerate(lines):
        match = RUST_FN.match(line)
        if not match or line.rstrip().endswith(";"):
            continue
        close = match.group(1) + "}"
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == close), i)
        found[f"{name}::{match.group(2)}:{i + 1}"] = end - i + 1
    return found


def rust_sources() -> list[Path]:
    """The native crate's Rust files except its test modules (`*_tests.rs`: tables of cases)."""
    paths = sorted((ROOT / "native" / "src").rglob("*.rs"))
    return [p for p in paths if not p.name.endswith("_tests.rs")]


def test_the_scan_of_rust_counts_a_function_from_its_signature_to_its_brace():
    text = "impl A {\n    pub fn a(&self) -> u8 {\n        1\n    }\n}\nfn b();\nfn c() {\n}\n"
    assert rust_lengths(text, "x") == {"x::a:2": 3, "x::c:7": 2}


def test_no_function_is_over_60_lines():
    lengths: dict[str, int] = {}
    for package in PYTHON:
        for path in sorted((ROOT / package).rglob("*.py")):
            lengths.update(python_lengths(path))
    for path in rust_sources():
        lengths.update(rust_lengths(path.read_text(), str(path.relative_to(ROOT))))
    assert len(lengths) > 500  # the scan found the code
    long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert not long, f"functions over {LIMIT} lines: {long}"


def test_no_module_is_over_400_lines_nor_a_python_class_over_300():
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for package in PYTHON:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            name = str(path.relative_to(ROOT))
            modules[name] = len(text.splitlines())
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ClassDef):
                    classes[f"{name}::{node.name}"] = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    assert len(modules) > 150 and len(classes) > 100  # the scan found the code
    rust = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in rust_sources()}
    assert len(rust) > 15  # the scan found the crate
    modules.update(rust)
    long = {n: lines for n, lines in modules.items() if lines > MODULE_LIMIT}
    assert not long, f"modules over {MODULE_LIMIT} lines: {long}"
    large = {n: lines for n, lines in classes.items() if lines > CLASS_LIMIT}
    assert not large, f"classes over {CLASS_LIMIT} lines: {large}"
