"""Prometheus metrics of the operator (served on settings.metrics_port)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter(
            "streamingjob_reconciles",
            "Reconciles run, by result (ok, retry, error).",
            ["result"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "streamingjob_reconcile_seconds",
            "Duration of one reconcile.",
            registry=self.registry,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.restarts = Counter(
            "streamingjob_restarts",
            "Automatic driver restarts scheduled, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.launches = Counter(
            "streamingjob_launches",
            "Driver pods created, by start kind (fresh: attempt 1, restore: later attempts).",
            ["kind"],
            registry=self.registry,
        )
        self.errors = Counter(
            "streamingjob_errors",
            "Reconcile errors, by error type.",
            ["type"],
            registry=self.registry,
        )

    def serve(self, port: int) -> None:
        if port:
            start_http_server(port, registry=self.registry)
