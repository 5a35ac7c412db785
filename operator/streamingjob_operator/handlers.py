"""kopf handlers: thin adapters that wake the one reconcile of a job.

* a daemon per StreamingJob runs `Reconciler.reconcile` in a worker thread, then sleeps until
  the time the reconcile asked for (backoff expiry, fencing poll, resync) or until woken;
* spec updates and driver pod events wake that daemon (a job's reconciles never overlap);
* deletion runs the finalizer (children removed, checkpoint kept unless asked otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from .k8s import KubeApi
from .kafka import KafkaMonitor
from .metrics import Metrics
from .models import API_GROUP, API_VERSION, KIND, PLURAL
from .naming import FINALIZER, LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY
from .reconcile import Finalizer, Reconciler
from .settings import OperatorSettings

log = logging.getLogger(__name__)

_metrics_started: set[int] = set()


class Runtime:
    """What the handlers share (kept on kopf's memo)."""

    def __init__(self, config: OperatorSettings, api: KubeApi, metrics: Metrics) -> None:
        self.config = config
        self.api = api
        self.metrics = metrics
        self.kafka = KafkaMonitor(
            workers=config.kafka_workers,
            timeout=config.kafka_timeout_seconds,
            max_age=config.kafka_poll_seconds,
        )
        self.executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="rec")
        self.reconciler = Reconciler(api, config, kafka=self.kafka, metrics=metrics)
        self.finalizer = Finalizer(api, config)
        self.wakeups: dict[tuple[str, str], asyncio.Event] = {}

    def poke(self, namespace: str, name: str) -> None:
        event = self.wakeups.get((namespace, name))
        if event is not None:
            event.set()

    def close(self) -> None:
        self.kafka.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.api.close()


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.posting.enabled = False  # our own Events, with a fixed reason vocabulary
    settings.watching.server_timeout = config.watch_server_timeout_seconds
    settings.watching.client_timeout = config.watch_server_timeout_seconds + 30
    settings.networking.request_timeout = config.api_timeout_seconds
    settings.execution.max_workers = config.workers
    settings.peering.standalone = True
    settings.scanning.disabled = True  # no cluster-wide CRD/namespace scans: least-privilege RBAC


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account, else $KUBECONFIG read at login time (not import time)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = OperatorSettings.from_env()
    logging.getLogger("streamingjob_operator").setLevel(config.log_level.upper())
    configure_kopf(settings, config)
    metrics = Metrics()
    if config.metrics_port and config.metrics_port not in _metrics_started:
        metrics.serve(config.metrics_port)
        _metrics_started.add(config.metrics_port)
    memo.runtime = Runtime(config, KubeApi(timeout=config.api_timeout_seconds), metrics)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime = memo.get("runtime")
    if runtime is not None:
        runtime.close()


@kopf.on.probe(id="jobs")
def probe(memo: kopf.Memo, **_: Any) -> int:
    runtime = memo.get("runtime")
    return len(runtime.wakeups) if runtime is not None else 0


@kopf.daemon(API_GROUP, API_VERSION, PLURAL, id="reconcile", cancellation_timeout=5.0)
async def keep_reconciled(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    key = (namespace, name)
    wake = runtime.wakeups.setdefault(key, asyncio.Event())
    loop = asyncio.get_running_loop()
    try:
        while True:
            wake.clear()
            delay = await loop.run_in_executor(
                runtime.executor, runtime.reconciler.reconcile, namespace, name
            )
            if delay is None:
                delay = runtime.config.resync_seconds
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=max(delay, 0.01))
    finally:
        runtime.wakeups.pop(key, None)
        runtime.kafka.forget(key)


@kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec")
async def spec_changed(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.runtime.poke(namespace, name)


@kopf.on.event("", "v1", "pods", labels={LABEL_ROLE: "driver", LABEL_MANAGED_BY: MANAGED_BY})
async def driver_pod_event(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime = memo.get("runtime")
    if runtime is None:
        return
    meta = body.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == KIND and owner.get("apiVersion", "").startswith(API_GROUP):
            runtime.poke(meta.get("namespace", ""), owner.get("name", ""))


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL)
async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    job = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), **dict(body)}
    job["metadata"] = dict(body.metadata)
    job["spec"] = dict(body.spec)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(runtime.executor, runtime.finalizer.finalize, job)
