"""Free loopback ports for the bed's servers (brokers, registry, MinIO, kube-apiserver), each
handed out once per process and below the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_HANDED_OUT: set[int] = set()
_PORTS = random.SystemRandom()  # never the tests' seeded sequence: sessions pick apart


def _below_ephemeral_ports() -> range:
    """Ports the kernel never picks as an outgoing connection's local port (those come from
    ip_local_port_range, as bind(0)'s do)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10_000, max(low, 10_001))


def free_port() -> int:
    """A port nothing listens on now, that this process has not handed out before, below the
    kernel's ephemeral range: a port bind(0) gives is one an outgoing connection may take
    before the server binds it (a test broker's SSL listener found its port taken beside CI's
    thousands of loopback connections, run 45), and a released one comes back (a broker once
    got one port for two listeners)."""
    candidates = _below_ephemeral_ports()
    while True:
        port = _PORTS.choice(candidates)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
