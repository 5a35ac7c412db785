"""A real etcd + kube-apiserver for tests, without kubelet, scheduler or controller-manager.

Tests that need a node play the kubelet themselves by patching the pod status subresource.
What is missing because no controller runs: namespaces stay Terminating after deletion, owner
references do not cascade (no garbage collector), no default ServiceAccount is created, and a
pod with a ``spec.nodeName`` is only gone once it is deleted with ``grace_period_seconds=0``.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import secrets
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from devbed.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[1]

# ServiceAccount admission rejects every pod until the "default" ServiceAccount exists, and only
# the controller-manager creates it; envtest disables it for the same reason.
DISABLED_ADMISSION_PLUGINS = ("ServiceAccount",)

ADMIN = "admin"
ADMIN_GROUPS = ("system:masters",)


class KubeAPIServerError(RuntimeError):
    """etcd or kube-apiserver did not come up; the message ends with the component's log."""


def find_bin_dir() -> Path:
    """The directory with etcd, kube-apiserver and kubectl: $STREAMJOB_K8S_BIN or a build."""
    if env := os.environ.get("STREAMJOB_K8S_BIN"):
        return Path(env)
    # The toolchain script is idempotent: after the first build this costs well under a second.
    out = subprocess.run(
        [str(REPO_ROOT / "scripts" / "k8s-toolchain.sh"), "apiserver"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


class KubeAPIServer:
    """etcd and kube-apiserver on free loopback ports, in a temporary directory.

    ``users`` adds static-token users, ``{"name": ("token", ["group", ...])}``; the static token
    file is read once at startup, so every user a test needs must be declared here. The admin
    user (group system:masters) always exists. Authorization is RBAC, as in a real cluster.
    """

    def __init__(
        self,
        users: Mapping[str, tuple[str, Sequence[str]]] | None = None,
        *,
        bin_dir: str | Path | None = None,
        extra_args: Sequence[str] = (),
        # etcd and the API server's post-start hooks: seconds on a quiet machine; over 90 s
        # beside the kind bed's image builds on a loaded one (CI run 58: /readyz still 500)
        start_timeout: float = 180.0,
    ) -> None:
        self.users = {ADMIN: (secrets.token_hex(16), ADMIN_GROUPS), **(users or {})}
        self.token = self.users[ADMIN][0]
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self.extra_args = tuple(extra_args)
        self.start_timeout = start_timeout
        self.workdir: Path | None = None
        self.url = ""
        self.kubeconfig: Path | None = None
        self._ca_data = ""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> KubeAPIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KubeAPIServer:
        self.bin_dir = self.bin_dir or find_bin_dir()
        self.workdir = Path(tempfile.mkdtemp(prefix="kube-apiserver-"))
        try:
            self._start(self.bin_dir, self.workdir)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, bin_dir: Path, work: Path) -> None:
        deadline = time.monotonic() + self.start_timeout
        etcd_port, peer_port, api_port = (free_port() for _ in range(3))
        etcd_url = self._start_etcd(bin_dir, work, etcd_port, peer_port, deadline)
        self._start_apiserver(bin_dir, work, etcd_url, api_port, deadline)
        self.kubeconfig = self.kubeconfig_for(ADMIN)

    def _start_etcd(
        self, bin_dir: Path, work: Path, port: int, peer_port: int, deadline: float
    ) -> str:
        """etcd, once it answers /health; its client URL."""
        etcd_url = f"http://127.0.0.1:{port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            [
                str(bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={work / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # Test data is disposable; fsync dominates etcd latency on small VMs.
                "--unsafe-no-fsync",
            ],
        )
        self._wait("etcd", f"{etcd_url}/health", deadline)
        return etcd_url

    def _write_credentials(self, work: Path) -> Path:
        """The service-account key pair and the static token file; the token file."""
        _openssl("genrsa", "-out", work / "sa.key", "2048")
        _openssl("rsa", "-in", work / "sa.key", "-pubout", "-out", work / "sa.pub")
        token_file = work / "tokens.csv"
        token_file.write_text(
            "".join(
                f'{token},{name},{name},"{",".join(groups)}"\n'
                for name, (token, groups) in self.users.items()
            )
        )
        return token_file

    def _start_apiserver(
        self, bin_dir: Path, work: Path, etcd_url: str, port: int, deadline: float
    ) -> None:
        """kube-apiserver over `etcd_url`, once it answers /readyz (its URL and CA kept)."""
        token_file = self._write_credentials(work)
        cert_dir = work / "certs"
        self._spawn(
            "kube-apiserver",
            [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                # Without cert files the apiserver writes a self-signed pair (and its CA) here.
                f"--cert-dir={cert_dir}",
                f"--token-auth-file={token_file}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={work / 'sa.pub'}",
                f"--service-account-signing-key-file={work / 'sa.key'}",
                f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
                "--allow-privileged=true",
                # The default lease reconciler would publish 127.0.0.1 as the endpoint of the
                # "kubernetes" Service, which endpoint validation rejects on every retry.
                "--endpoint-reconciler-type=none",
                *self.extra_args,
            ],
        )
        self.url = f"https://127.0.0.1:{port}"
        ca_file = cert_dir / "apiserver.crt"  # serving cert followed by its self-signed CA
        self._wait("kube-apiserver", f"{self.url}/readyz", deadline, ca_file=ca_file)
        self._ca_data = base64.b64encode(ca_file.read_bytes()).decode()

    def kubeconfig_for(self, user: str) -> Path:
        """Write (once) and return a kubeconfig that authenticates as ``user``."""
        assert self.workdir is not None, "server not started"
        path = self.workdir / f"kubeconfig-{user}"
        if not path.exists():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "test",
                        "cluster": {
                            "server": self.url,
                            "certificate-authority-data": self._ca_data,
                        },
                    }
                ],
                "users": [{"name": user, "user": {"token": self.users[user][0]}}],
                "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
                "current-context": user,
            }
            path.write_text(json.dumps(config, indent=2))  # JSON is valid YAML
        return path

    def stop(self) -> None:
        # SIGKILL: the data is thrown away, and a graceful kube-apiserver shutdown waits up to
        # 15 s for open watches. apiserver first: it holds connections to etcd.
        for name in reversed(list(self._procs)):
            proc = self._procs.pop(name)
            proc.kill()
            proc.wait()
        if self.workdir is not None:
            subprocess.run(["rm", "-rf", str(self.workdir)], check=False)
            self.workdir = None

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.workdir is not None
        with open(self.workdir / f"{name}.log", "wb") as log:
            self._procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )

    def _wait(self, name: str, url: str, deadline: float, ca_file: Path | None = None) -> None:
        """Poll ``url`` until it answers 200, the process exits, or the deadline passes."""
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if (code := self._procs[name].poll()) is not None:
                raise self._failure(name, f"exited with code {code}")
            # The apiserver writes its certificate only shortly before it starts listening, and
            # not at once: a file read half-written has no certificate yet (ssl.SSLError, an
            # OSError; CI run 45).
            if ca_file is None or ca_file.exists():
                try:
                    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
                    with urllib.request.urlopen(request, timeout=5, context=context) as resp:
                        if resp.status == 200:
                            return
                except OSError as exc:  # URLError and HTTPError are OSErrors
                    last_error = str(exc)
            time.sleep(0.2)
        raise self._failure(name, f"not ready after {self.start_timeout}s ({last_error})")

    def _failure(self, name: str, what: str) -> KubeAPIServerError:
        assert self.workdir is not None
        lines = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()
        tail = "\n".join(lines[-40:])
        return KubeAPIServerError(f"{name} {what}; last log lines:\n{tail}")


def running_apiserver(**kwargs: Any) -> Iterator[KubeAPIServer]:
    """Body of a pytest fixture: ``yield from running_apiserver(users=...)``."""
    with KubeAPIServer(**kwargs) as server:
        yield server


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _die_with_parent() -> None:
    # If the test process is killed, the kernel stops etcd and the apiserver too, instead of
    # leaving them holding ports and temp dirs.
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
