"""docs/semantics.md's rules stay true: each is a section `## Rule N: <title>` with a **Code:**
and a **Tests:** paragraph; the rules are numbered 1..N without a gap, every rule names at
least one test, and every test, test file, source file and function it names exists. A renamed
test or function, or a deleted one, fails here instead of leaving the contract pointing at
nothing."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "semantics.md"
PACKAGES = (ROOT / "operator" / "streamingjob_operator", ROOT / "spark_app")


RULE = re.compile(r"^## Rule (\d+): (.+)$", re.MULTILINE)


def parse_rules(text: str) -> list[tuple[str, str, str, str]]:
    """(number, title and rule, code, tests) of each `## Rule N: <title>` section: the code is
    the paragraph that starts with **Code:**, the tests the one that starts with **Tests:**."""
    found = []
    heads = list(RULE.finditer(text))
    for head in heads:
        rest = text[head.end() :]
        section = rest[: rest.find("\n## ")] if "\n## " in rest else rest
        paragraphs = [" ".join(p.split()) for p in section.split("\n\n") if p.strip()]
        code = [p.removeprefix("**Code:**") for p in paragraphs if p.startswith("**Code:**")]
        tests = [p.removeprefix("**Tests:**") for p in paragraphs if p.startswith("**Tests:**")]
        assert len(code) == 1, f"rule {head.group(1)}: one **Code:** paragraph, not {len(code)}"
        assert len(tests) == 1, f"rule {head.group(1)}: one **Tests:** paragraph, not {len(tests)}"
        rule = " ".join(p for p in paragraphs if not p.startswith(("**Code:**", "**Tests:**")))
        found.append((head.group(1), f"{head.group(2)}. {rule}", code[0], tests[0]))
    return found


def rows() -> list[tuple[str, str, str, str]]:
    """(number, rule, how, proven by) of each rule of docs/semantics.md."""
    return parse_rules(TABLE.read_text())


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@functools.cache
def definitions(path: Path) -> dict[str, set[str]]:
    """Top-level functions and classes of a module, and each class's members ("" holds the
    top-level names)."""
    tree = ast.parse(path.read_text())
    names: dict[str, set[str]] = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[""].add(node.name)
        if isinstance(node, ast.ClassDef):
            names[node.name] = {
                n.name
                for n in ast.walk(node)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            } | {
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
    return names


def find_test_file(name: str) -> Path:
    """A test file by its path from the repository root, or by its file name alone."""
    path = ROOT / name
    if path.is_file():
        return path
    matches = [p for p in (ROOT / "tests").rglob(Path(name).name) if p.is_file()]
    assert len(matches) == 1, f"{name}: {len(matches)} test files of that name"
    return matches[0]


def known_tests(path: Path) -> set[str]:
    return {n for n in definitions(path)[""] if n.startswith("test_")} | {
        m for cls, members in definitions(path).items() if cls for m in members
    }


def check_test_reference(token: str, last_file: Path | None) -> tuple[Path | None, bool]:
    """Checks one backticked token of the 'proven by' column: (the file it names, which a
    following `…name` refers to; whether it names a test or a test file)."""
    if token.startswith("["):  # another parameter of the test before it
        return last_file, False
    file_part, _, name = token.partition("::")
    if file_part.endswith(".py"):
        path = find_test_file(file_part)
        if name:
            assert_test_exists(path, name, token)
        return path, True
    if token.startswith("…"):
        assert last_file is not None, f"{token}: no test file before it"
        assert_test_exists(last_file, token, token)
        return last_file, True
    if token.startswith("test_"):  # a test named alone: somewhere under tests/
        assert any(
            token.split("[")[0] in known_tests(p) for p in (ROOT / "tests").rglob("test_*.py")
        ), f"{token}: no test {token}"
        return last_file, True
    return last_file, False


def assert_test_exists(path: Path, name: str, token: str) -> None:
    """`name` may be abbreviated with '…' (a part of the test's name) and carry [params]."""
    name = name.split("[")[0]
    part = name.strip("…")
    known = known_tests(path)
    if "…" in name:
        assert any(part in test for test in known), f"{token}: no test like it in {path.name}"
    else:
        assert part in known, f"{token}: no test {part} in {path.relative_to(ROOT)}"


def modules() -> dict[str, Path]:
    return {p.stem: p for package in PACKAGES for p in package.rglob("*.py")}


def check_code_reference(token: str) -> None:
    """A source file (`spark_app/api/offsets.py`), a function or class of a module
    (`decide.lost_at`, `k8s.KubeApi`), or a member of a class (`GroupOffsets.catch_up`,
    `Actor._still_wanted`). Anything else (fields, options, paths in a checkpoint) is
    not code and is not checked."""
    if token.endswith(".py"):
        found = (ROOT / token).is_file() or any(
            (package / token).is_file() or any(package.rglob(token)) for package in PACKAGES
        )
        assert found, f"{token}: no such file"
        return
    match = re.fullmatch(r"(\w+)\.(\w+)", token)
    if match is None:
        return
    owner, member = match.groups()
    if owner in modules() and re.fullmatch(r"_?[a-z][a-z0-9_]*|[A-Z][A-Za-z0-9]*", member):
        assert member in definitions(modules()[owner])[""], f"{token}: no such function"
        return
    if owner[0].isupper():
        classes = [p for p in modules().values() if owner in definitions(p)]
        assert classes, f"{token}: no class {owner}"
        assert any(member in definitions(p)[owner] for p in classes), f"{token}: no {member}"


def test_the_rules_are_numbered_without_a_gap():
    numbers = [number for number, *_ in rows()]
    assert numbers, "no rule found"
    assert numbers == [str(n) for n in range(1, len(numbers) + 1)], numbers


@pytest.mark.parametrize("row", rows(), ids=lambda row: f"rule-{row[0]}")
def test_every_rule_names_tests_that_exist(row):
    number, _rule, _how, proven = row
    last: Path | None = None
    tests = 0
    for token in ticked(proven):
        last, is_test = check_test_reference(token, last)
        tests += is_test
    assert tests, f"rule {number} names no test"


@pytest.mark.parametrize("row", rows(), ids=lambda row: f"rule-{row[0]}")
def test_every_function_and_file_a_rule_names_exists(row):
    for token in ticked(row[2]):
        check_code_reference(token)


def test_the_checker_catches_a_missing_test_and_a_missing_function():
    """The checks above can fail."""
    with pytest.raises(AssertionError, match="no test"):
        check_test_reference("rules/test_decide.py::test_that_does_not_exist", None)
    with pytest.raises(AssertionError, match="no test like it"):
        check_test_reference("…never_written…", find_test_file("rules/test_decide.py"))
    with pytest.raises(AssertionError, match="no such function"):
        check_code_reference("decide.no_such_rule")
    with pytest.raises(AssertionError, match="no such file"):
        check_code_reference("spark_app/no_such_module.py")
    with pytest.raises(AssertionError, match="no _gone"):
        check_code_reference("GroupOffsets._gone")


def test_the_parser_reads_a_rule_and_refuses_one_without_code_or_tests():
    """A section reads as a rule; one that lost its **Code:** or **Tests:** line fails."""
    rule = "## Rule 1: State\n\nThe rule.\n\n**Code:** `a.b`\nand `c.d`\n\n"
    rule += "**Tests:** `t.py::test_x`\n"
    assert parse_rules(rule) == [("1", "State. The rule.", " `a.b` and `c.d`", " `t.py::test_x`")]
    with pytest.raises(AssertionError, match="one \\*\\*Tests:\\*\\*"):
        parse_rules(rule.replace("**Tests:**", "Tests:"))
    with pytest.raises(AssertionError, match="one \\*\\*Code:\\*\\*"):
        parse_rules(rule.replace("**Code:**", "Code:"))
