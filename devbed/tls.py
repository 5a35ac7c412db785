"""Test certificates made with the openssl CLI: a CA of the test's own and a server
certificate it signs, PEM files, for the broker's SASL_SSL and SSL listeners (and a client
certificate for the latter: mutual TLS).

A second, unrelated CA (`Authority.create` again) is what an "untrusted certificate" test
gives the client: the broker's chain then does not verify.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Authority:
    directory: Path

    @property
    def cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def pem(self) -> str:
        return self.cert.read_text()

    @classmethod
    def create(cls, directory: Path, name: str = "streamingjob test CA") -> Authority:
        directory.mkdir(parents=True, exist_ok=True)
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            "-subj", f"/CN={name}", "-keyout", "ca.key", "-out", "ca.crt",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )  # fmt: skip
        return cls(directory)

    def issue(
        self, hosts: list[str], stem: str = "server", usage: str = "serverAuth"
    ) -> ServerCertificate:
        """A certificate for `hosts` (DNS names or IP addresses as SANs): a server's, or with
        `usage="clientAuth"` a client's (mutual TLS)."""
        sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
        d = self.directory
        (d / f"{stem}.ext").write_text(
            f"subjectAltName={sans}\nextendedKeyUsage={usage}\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
        )
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={hosts[0]}",
            "-keyout", f"{stem}.key", "-out", f"{stem}.csr", cwd=d,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-extfile", f"{stem}.ext", "-out", f"{stem}.crt",
            cwd=d,
        )  # fmt: skip
        return ServerCertificate(d / f"{stem}.crt", d / f"{stem}.key", self.cert)


@dataclass(frozen=True)
class ServerCertificate:
    cert: Path
    key: Path  # unencrypted PKCS#8 ("BEGIN PRIVATE KEY"), as Kafka's PEM keystore reads it
    ca: Path

    def keystore_pem(self) -> str:
        """Key and chain in one PEM file: Kafka's `ssl.keystore.type=PEM` location."""
        return self.key.read_text() + self.cert.read_text() + self.ca.read_text()
