"""The e2e bed's kubectl: a call that never reached the API server is made again, any other
failure fails at once (a real process in place of kubectl that fails as told)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from devbed import kind_cluster
from devbed.kind_cluster import Kube

pytestmark = pytest.mark.unit

NOT_SENT = "Unable to connect to the server: net/http: TLS handshake timeout"
NO_REPLY = (
    "Unable to connect to the server: net/http: request canceled "
    "(Client.Timeout exceeded while awaiting headers)"
)


def failing_kubectl(tmp_path: Path, errors: list[str]) -> tuple[Kube, Path]:
    """A kubectl that prints errors[i] and exits 1 on its i-th call, then succeeds; the file
    that counts its calls."""
    calls = tmp_path / "calls"
    calls.write_text("0")
    script = tmp_path / "kubectl"
    cases = "".join(f'  {i}) echo "{e}" >&2; exit 1;;\n' for i, e in enumerate(errors))
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {calls}); echo $((n + 1)) > {calls}\n"
        f'case "$n" in\n{cases}esac\necho ok\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return Kube(str(script), str(tmp_path / "kubeconfig")), calls


def test_a_call_that_never_reached_the_server_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setattr(kind_cluster, "RETRY_PAUSE_S", 0)
    kube, calls = failing_kubectl(tmp_path, [NOT_SENT, NOT_SENT])
    assert kube.run("apply", "-f", "-", input="{}") == "ok\n"
    assert calls.read_text().strip() == "3"


@pytest.mark.parametrize("error", [NO_REPLY, 'Error from server (NotFound): pods "x" not found'])
def test_a_call_the_server_may_have_seen_fails_at_once(tmp_path, monkeypatch, error):
    monkeypatch.setattr(kind_cluster, "RETRY_PAUSE_S", 0)
    kube, calls = failing_kubectl(tmp_path, [error])
    with pytest.raises(RuntimeError, match="kubectl get pod x failed"):
        kube.run("get", "pod", "x")
    assert calls.read_text().strip() == "1"


def test_an_unreachable_server_fails_the_call_after_the_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(kind_cluster, "RETRY_PAUSE_S", 0)
    monkeypatch.setattr(kind_cluster, "UNREACHABLE_S", 0)
    kube, calls = failing_kubectl(tmp_path, [NOT_SENT, NOT_SENT])
    with pytest.raises(RuntimeError, match="TLS handshake timeout"):
        kube.run("get", "nodes")
    assert calls.read_text().strip() == "1"
