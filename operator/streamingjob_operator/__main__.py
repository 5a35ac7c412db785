"""`python -m streamingjob_operator` (or the `streamingjob-operator` entry point): run the
operator with the namespaces from settings.

With leader election (the default), the replica first waits for the Lease
(leadership.py) and only then starts kopf, in a thread of its own: this process keeps the
signals, so a SIGTERM releases the Lease at once (after the writes in flight) and the next
replica takes over without waiting for it to expire. The liveness endpoint
:<STREAMINGJOB_HEALTH_PORT>/healthz answers for a waiting replica too.

Without it (STREAMINGJOB_LEADER_ELECTION=false) this is `kopf run -m streamingjob_operator
-A` (or `--namespace=...` per watched namespace) with kopf's liveness endpoint: one replica
only.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kopf

from streamingjob_operator import handlers as handlers
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.leadership import Leadership
from streamingjob_operator.settings import OperatorSettings

log = logging.getLogger("streamingjob_operator")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def main(argv: Sequence[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="streamingjob-operator",
        description="Runs the StreamingJob operator (kopf). Settings come from STREAMINGJOB_* "
        "environment variables (docs/operator/configuration.md, 'Operator settings').",
    ).parse_args(argv)
    config = OperatorSettings.from_env()
    kopf.configure(verbose=config.log_level.upper() == "DEBUG")
    if not config.leader_election:
        liveness = f"http://0.0.0.0:{config.health_port}/healthz" if config.health_port else None
        _run_kopf(config, liveness_endpoint=liveness)
        return
    code = run_elected(config)
    logging.shutdown()
    # at once: no thread pool's exit hook may wait on a call the closed gate refuses
    os._exit(code)


def _run_kopf(config: OperatorSettings, **kwargs: Any) -> None:
    kopf.run(
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        standalone=True,
        **kwargs,
    )


def run_elected(config: OperatorSettings) -> int:
    """Candidate, then leader until a signal (exit 0) or kopf's end (exit 1); a lost Lease
    ends the process from the election's threads (leadership.EXIT_LEADERSHIP_LOST)."""
    identity = config.leader_identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    namespace = config.lease_namespace or _own_namespace()
    timing = config.election_timing
    # a renewal must answer well within the deadline, or it is no renewal (timing.py)
    lease_api = KubeApi(timeout=timing.request_timeout_seconds)
    leadership = Leadership(
        lease_api, namespace=namespace, name=config.lease_name, identity=identity, timing=timing
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    metrics = Metrics()
    metrics.serve(config.metrics_port)
    operator: threading.Thread | None = None

    def alive() -> bool:
        return operator is None or operator.is_alive()

    _serve_health(config.health_port, alive)
    if not leadership.acquire(stop):
        return 0
    metrics.leader.set(1)
    memo = kopf.Memo(write_gate=leadership.gate, metrics=metrics, leading_since=time.monotonic())
    operator = threading.Thread(
        target=_run_kopf,
        args=(config,),
        kwargs={"memo": memo, "stop_flag": threading.Event()},
        name="kopf",
        daemon=True,
    )
    operator.start()
    while not stop.wait(0.5):
        if not operator.is_alive():
            log.error("the operator stopped by itself; giving the Lease up")
            break
    leadership.release(wait_seconds=timing.renew_deadline_seconds)
    return 0 if stop.is_set() else 1


def _own_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def _serve_health(port: int, alive: Callable[[], bool]) -> None:
    """/healthz: 200 while this replica waits or its operator thread runs."""
    if not port:
        return

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path.startswith("/healthz") and alive()
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if ok else b"not ok\n")

        def log_message(self, *args: Any) -> None:  # probes every few seconds: no log lines
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Health)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()


if __name__ == "__main__":
    main()
