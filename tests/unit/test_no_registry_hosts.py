"""No package registry or mirror host is written into the repository: every client (pip, mvn,
cargo, go, apt) uses the machine's own configuration. Any URL in a tracked file must name a
local or in-cluster host, or be an XML/JSON schema identifier (not fetched)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"\bhttps?://([A-Za-z0-9.\-_{}$]+)")
# streamingjob-registry: the kind bed's own registry container (scripts/kind/registry.sh)
LOCAL = re.compile(
    r"^(localhost|127\.0\.0\.1|0\.0\.0\.0|\{host\}|[a-z0-9.\-]*\.svc(\..*)?|minio\.[a-z.]+"
    r"|streamingjob-registry)$"
)
# namespace identifiers of XML and JSON Schema documents: names, never downloaded
SCHEMA_IDS = {"maven.apache.org", "www.w3.org", "json-schema.org"}
# written by the client itself, naming its default registry (cargo's lock format)
CLIENT_WRITTEN = {"native/Cargo.lock"}


def _tracked_text_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return [f for f in out.split() if not f.endswith(".md") and f not in CLIENT_WRITTEN]


def test_no_registry_host_in_the_repository():
    found = []
    for name in _tracked_text_files():
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for match in URL.finditer(text):
            host = match.group(1)
            if not LOCAL.match(host) and host not in SCHEMA_IDS:
                found.append(f"{name}: {match.group(0)}")
    assert not found, "hosts written into the repository:\n" + "\n".join(found)


def test_maven_runs_with_the_clients_own_settings():
    """No `-s <settings.xml>` and no <mirror>/<repository> in any POM: mvn resolves through
    the machine's configured default (its settings.xml, or Maven Central)."""
    for name in _tracked_text_files():
        path = ROOT / name
        if path.suffix not in (".py", ".sh", ".xml") and path.name != "Makefile":
            continue
        if path == Path(__file__).resolve():  # names what it looks for
            continue
        text = path.read_text(encoding="utf-8")
        assert "<mirror>" not in text and "<repositories>" not in text, name
        if "mvn" in text:
            assert not re.search(r"['\"]-s['\"]|\bmvn\b[^\n]*\s-s\s", text), name
