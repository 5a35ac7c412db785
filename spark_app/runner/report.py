"""The runner's report: how this run started and how far it got, for people and the operator.

Written as JSON to a file (local runs) and, on Kubernetes, into the job's report ConfigMap
(`data["report.json"]`), which the operator reads instead of scraping logs. The driver's Role
lets it patch only that ConfigMap. Credentials never appear here.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spark_app.sinks import sink_tally

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
HEARTBEAT_S = 30.0


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiAccess:
    """How the driver calls the Kubernetes API: the server, and the service account's token
    (read at every call: the kubelet rotates it) and CA. `in_cluster()` in a pod; tests give
    a real kube-apiserver's."""

    def __init__(self, server: str, token_file: Path, ca_file: Path):
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.context = ssl.create_default_context(cafile=str(ca_file))

    @classmethod
    def in_cluster(cls) -> ApiAccess:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return cls(f"https://{host}:{port}", SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt")

    def configmap_url(self, namespace: str, name: str) -> str:
        return f"{self.server}/api/v1/namespaces/{namespace}/configmaps/{name}"

    def call(self, method: str, url: str, merge_patch: dict[str, Any] | None = None) -> bytes:
        """One request (urllib's errors raised); `merge_patch`: a JSON merge patch body."""
        token = self.token_file.read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        body = None
        if merge_patch is not None:
            body = json.dumps(merge_patch).encode()
            headers["Content-Type"] = "application/merge-patch+json"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
            return bytes(response.read())


class ConfigMapPublisher:
    """PATCHes one key of one ConfigMap (a JSON merge patch of only that key: other writers'
    keys stay); failures are logged only: a report that cannot be published must never stop
    the job."""

    def __init__(
        self,
        name: str,
        namespace: str,
        access: ApiAccess | None = None,
        key: str = "report.json",
    ):
        self.access = access or ApiAccess.in_cluster()
        self.url = self.access.configmap_url(namespace, name)
        self.key = key

    def publish(self, text: str) -> bool:
        """True when the API server took it."""
        try:
            self.access.call("PATCH", self.url, {"data": {self.key: text}})
        except Exception as exc:
            log.warning("could not publish %s to %s: %s", self.key, self.url, exc)
            return False
        return True


class Reporter:
    def __init__(
        self,
        base: dict[str, Any],
        path: Path | None,
        publisher: ConfigMapPublisher | None,
        source_report: Path | None,
        sink_report: Path | None = None,
    ):
        self.report: dict[str, Any] = dict(base)
        self.path = path
        self.publisher = publisher
        self.source_report = source_report
        self.sink_report = sink_report  # the exactly-once Kafka sink's counts, when it writes
        # The group offsets' writer when the runner commits (else the source's counts show).
        self.commits: Callable[[], dict[str, Any]] | None = None
        self._last = ""  # the last written report, without its "updated" time
        self._written_at = 0.0

    def update(self, **fields: Any) -> dict[str, Any]:
        """Writes the report when it changed, and every HEARTBEAT_S anyway ("updated" tells
        that the runner is alive): a write per poll would be an API write per second per job."""
        self.report.update(fields)
        self._merge_source_report()
        content = json.dumps({**self.report, "updated": None}, sort_keys=True)
        now = time.monotonic()
        if content != self._last or now - self._written_at >= HEARTBEAT_S:
            self._last, self._written_at = content, now
            self.report["updated"] = now_iso()
            text = json.dumps(self.report, sort_keys=True)
            if self.path is not None:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(self.path)
            if self.publisher is not None:
                self.publisher.publish(text)
        return self.report

    def _merge_source_report(self) -> None:
        if self.sink_report is not None and self.sink_report.exists():
            self.report["sinkTransactions"] = sink_tally.read(self.sink_report)
        if self.commits is not None:
            self.report["commits"] = self.commits()
        if self.source_report is None or not self.source_report.exists():
            return
        try:
            source = json.loads(self.source_report.read_text())
        except (OSError, json.JSONDecodeError):
            return  # replaced atomically; a partial read is impossible, a missing one benign
        self.report["startOffsets"] = source.get("startOffsets", {})
        self.report["commits"] = self.commits() if self.commits else source.get("commits", {})
        self.report["dataLossSkippedOffsets"] = source.get("dataLossSkippedOffsets", 0)
        self.report["deadLetterRecords"] = source.get("deadLetterRecords", {})


class Throughput:
    """Totals over the batches of this run, from Spark's per-batch progress, and the
    executors' task time: what the operator's autoscaler measures the job's true processing
    rate with (rows per second of the executors' task time; busy time against the trigger
    interval). Counted once per batch id."""

    def __init__(self) -> None:
        self.last_batch = -1
        self.batches = self.rows = 0
        self.busy_ms = self.execution_ms = 0
        self.task_ms: int | None = None  # every executor's tasks of this run, summed

    def add(self, progresses: list[dict[str, Any]]) -> None:
        for progress in progresses:
            batch = progress.get("batchId")
            durations = progress.get("durationMs") or {}
            # an idle trigger reports the id of the batch still to come: not counted, not seen
            if (
                not isinstance(batch, int)
                or batch <= self.last_batch
                or "addBatch" not in durations
            ):
                continue
            self.last_batch = batch
            self.batches += 1
            self.rows += int(progress.get("numInputRows") or 0)
            self.busy_ms += int(durations.get("triggerExecution") or 0)
            self.execution_ms += int(durations["addBatch"] or 0)

    def as_report(self) -> dict[str, int]:
        totals = {
            "batches": self.batches,
            "rows": self.rows,
            "busyMs": self.busy_ms,
            "executionMs": self.execution_ms,
        }
        if self.task_ms is not None:
            totals["taskMs"] = self.task_ms
        return totals
