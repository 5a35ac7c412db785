"""The operator's docs say what the code does: its settings, the Event reasons it posts, the
regular-expression dialect of subscribePattern, and the broker-version table's tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from devbed.kafka_versions import BROKER_VERSIONS, OLDEST
from spark_app.api.source_spec import SourceSpec
from spark_app.kafka.metadata import matching_topics
from streamingjob_operator.rules.decide import REASONS, Event
from streamingjob_operator.settings import OperatorSettings

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_DOC = (ROOT / "docs" / "operator" / "configuration.md").read_text()
STATUS_DOC = (ROOT / "docs" / "operator" / "status.md").read_text()
PACKAGE = ROOT / "operator" / "streamingjob_operator"
DRIVER_ENV = {"NAMESPACE", "NAME", "EPOCH", "ATTEMPT"}  # set in driver pods (builders.py)


def _paragraph(doc: str, start: str, end: str) -> str:
    return doc[doc.index(start) : doc.index(end, doc.index(start))]


def test_settings_in_the_docs_are_the_settings_with_their_defaults():
    text = _paragraph(SETTINGS_DOC, "Environment variables `STREAMINGJOB_*`", "\n## ")
    documented = dict(re.findall(r"`([A-Z][A-Z_]+)`\s+\(([^;)]*)", text))
    defaults = OperatorSettings()
    expected = {name.upper(): getattr(defaults, name) for name in OperatorSettings.model_fields}
    assert set(documented) == set(expected)
    for name, shown in documented.items():
        value = expected[name]
        if isinstance(value, tuple) or value == "":
            assert not value and shown.startswith("empty"), name
        elif isinstance(value, bool):
            assert shown == str(value).lower(), name
        elif isinstance(value, float):
            assert float(shown) == value, name
        else:
            assert shown == str(value), name
    # every STREAMINGJOB_* variable any doc names exists
    docs = [*ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md"), *ROOT.glob("charts/*/README.md")]
    for doc in docs:
        for name in re.findall(r"STREAMINGJOB_([A-Z_]+[A-Z])", doc.read_text()):
            assert name in expected or name in DRIVER_ENV, f"{doc.name}: STREAMINGJOB_{name}"


def _string_literals() -> list[str]:
    """Every string literal of the operator package, with repeats."""
    return [
        node.value
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_event_reasons_in_the_docs_are_the_ones_posted():
    text = _paragraph(STATUS_DOC, "Event reasons (every reason", "\n\n")
    listed = text.split("against it):", 1)[1].split(".", 1)[0]
    documented = {r.strip() for r in listed.replace("\n", " ").split(",")}
    assert documented == set(REASONS)
    # no Event of another reason: Events are built from decide.Event, which refuses one ...
    with pytest.raises(ValueError, match=r"not in decide\.REASONS"):
        Event("Normal", "Deleting", "")
    # ... or posted directly with a literal reason from REASONS
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "post_event":
                reason = node.args[2]
                if isinstance(reason, ast.Constant):
                    assert reason.value in REASONS, (path.name, reason.value)
    # every listed reason is used somewhere besides the list itself
    literals = _string_literals()
    unused = [r for r in REASONS if literals.count(r) < 2]
    assert not unused, f"reasons never posted: {unused}"


def test_subscribe_pattern_is_a_python_regex_matched_against_the_whole_name():
    topics = ["orders", "orders-eu", "xorders", "__consumer_offsets", "payments.eu"]
    assert matching_topics("orders", topics) == ["orders"]  # whole name, not a prefix/search
    assert matching_topics("orders.*", topics) == ["orders", "orders-eu"]
    assert matching_topics(r"payments\..*", topics) == ["payments.eu"]
    assert matching_topics(".*", topics) == ["orders", "orders-eu", "xorders", "payments.eu"]
    assert matching_topics(r"(?P<region>\w+)", ["eu", "a-b"]) == ["eu"]  # Python's syntax
    source = {"bootstrapServers": "k:9092", "groupId": "g"}
    SourceSpec.model_validate({**source, "subscribePattern": r"orders-(?P<r>eu|us)"})
    for java_only in (r"orders-(?<r>eu|us)", r"\p{Alpha}+"):
        with pytest.raises(ValidationError, match="not a Python regular expression"):
            SourceSpec.model_validate({**source, "subscribePattern": java_only})
    doc = (ROOT / "docs" / "source.md").read_text()
    assert "Python `re` syntax that must match the whole topic name" in doc


DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "bench").rglob("*.md")),
]


def test_every_make_target_the_docs_name_exists():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for doc in DOCS:
        text = doc.read_text()
        named = re.findall(r"`make ([a-z][\w-]*)", text) + re.findall(
            r"^make ([a-z][\w-]*)", text, re.M
        )
        missing = sorted(set(named) - targets)
        assert not missing, f"{doc.name} names make targets the Makefile lacks: {missing}"
    readme = (ROOT / "README.md").read_text()
    assert readme.index("make run ") < readme.index("```mermaid"), "the two commands come first"
    assert readme.index("make test ") < readme.index("```mermaid")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation gone, spaces → '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_between_the_docs_reaches_a_file_and_heading():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, fragment = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            assert linked.exists(), f"{doc.name}: {target}"
            if fragment and linked.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
                assert fragment in {_anchor(h) for h in headings}, f"{doc.name}: {target}"


def test_the_readmes_diagrams_render_and_name_real_fields():
    """GitHub renders ```mermaid blocks; these two diagram kinds were checked with mermaid-cli.
    The spec fields a diagram names (camelCase words) are fields of the CRD."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```mermaid\n(.*?)```", readme, re.S)
    assert len(blocks) == 2, "the restore-vs-redeploy picture and the architecture"
    crd = (ROOT / "crds" / "streamingjob.yaml").read_text()
    for block in blocks:
        assert block.split(None, 1)[0] in ("flowchart", "stateDiagram-v2")
        labels = " ".join(re.findall(r'"([^"]*)"', block))
        for field in set(re.findall(r"\b[a-z]+(?:[A-Z][a-z]+)+\b", labels)):
            assert f" {field}:" in crd, f"the README's diagram names {field}, no CRD field"


def _test_functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_the_broker_version_table_names_real_tests_on_the_supported_versions():
    """docs/source/kafka-versions.md's compatibility table: its versions are the tested ones, the
    oldest is named with its reason, and every test it names exists; the per-engine reads take
    the version fixture (so they run on every version)."""
    doc = (ROOT / "docs" / "source" / "kafka-versions.md").read_text()
    text = _paragraph(doc, "## Broker versions and security modes", "\n## ")
    table_versions = {v for v in re.findall(r"^\| ([\d., ]+) \|", text, re.MULTILINE)}
    listed = {v.strip() for row in table_versions for v in row.split(",")}
    assert listed == set(BROKER_VERSIONS)
    assert f"{OLDEST} is the oldest because" in text and "KIP-900" in text
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)`", text)
    assert len(named) >= 5
    for module, name in named:
        functions = _test_functions(ROOT / "tests" / "integration" / "spark_app" / module)
        assert name in functions, f"{module}::{name} named in the docs does not exist"
    for letter, module, name in re.findall(r"\*\*([ICLST])\*\* `(\w+\.py)::(test_\w+)`", text):
        functions = _test_functions(ROOT / "tests" / "integration" / "spark_app" / module)
        args = [a.arg for a in functions[name].args.args]
        assert "versioned_kafka" in args, f"{letter} {name} does not run on every version"


def test_every_page_is_short_enough_to_read():
    """A page of the docs is at most 500 lines, the README at most 200 (issue 42)."""
    long = {doc.name: n for doc in DOCS[1:] if (n := len(doc.read_text().splitlines())) > 500}
    assert not long, f"pages over 500 lines: {long}"
    assert len(DOCS[0].read_text().splitlines()) <= 200, "the README is over 200 lines"
