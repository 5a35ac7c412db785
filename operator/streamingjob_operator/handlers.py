"""kopf handlers: thin adapters that wake the one reconcile of a job.

* a daemon per StreamingJob runs `Reconciler.reconcile` in a worker thread, then sleeps until
  the time the reconcile asked for (backoff expiry, fencing poll, resync) or until woken;
* spec changes (a new metadata.generation) and driver pod events wake that daemon (a job's
  reconciles never overlap), unless the reconcile has already observed exactly that state
  (`reconcile.Seen`: the echoes of the operator's own writes wake nothing);
* deletion runs the finalizer (children removed, checkpoint kept unless asked otherwise).

kopf writes only its finalizer on a StreamingJob: no handler reacts to diffs (spec changes are
seen by generation, deletion by its timestamp), so no diff-base annotation is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from streamingjob_operator.api.naming import FINALIZER, LABEL_MANAGED_BY, LABEL_ROLE, MANAGED_BY
from streamingjob_operator.finalizer import Finalizer
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaMonitor
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.io.nodes import NodeTracker
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.rules.timing import watch_quiet_seconds
from streamingjob_operator.seen import Seen
from streamingjob_operator.settings import OperatorSettings

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
            deadline=config.kafka_deadline_seconds,
            max_age=config.kafka_poll_seconds,
        )
        self.executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="rec")
        # Plain resyncs (nothing pending, nothing observed to change) get threads of their own:
        # a wave of them never delays a reaction or a launch.
        self.resync_executor = ThreadPoolExecutor(
            max_workers=resync_workers(config), thread_name_prefix="resync"
        )
        self.seen = Seen()
        self.wakeups: dict[tuple[str, str], asyncio.Event] = {}
        loop = asyncio.get_running_loop()
        self.nodes = NodeTracker(
            list_leases=api.list_node_leases,
            watch_leases=api.watch_node_leases,
            list_nodes=api.list_nodes,
            watch_nodes=api.watch_nodes,
            grace_seconds=config.node_lost_grace_seconds,
            quiet_seconds=watch_quiet_seconds(config.kubelet_lease_renew_seconds),
            wake=lambda namespace, name: loop.call_soon_threadsafe(self.poke, namespace, name),
        ).start()
        self.reconciler = Reconciler(
            api, config, kafka=self.kafka, metrics=metrics, seen=self.seen, nodes=self.nodes
        )
        self.finalizer = Finalizer(api, config, nodes=self.nodes)

    def poke(self, namespace: str, name: str) -> None:
        event = self.wakeups.get((namespace, name))
        if event is not None:
            event.set()

    def close(self) -> None:
        self.nodes.stop()
        self.kafka.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.resync_executor.shutdown(wait=False, cancel_futures=True)
        self.api.close()


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff-base: no handler here compares old and new bodies (on.delete needs none), and
    storing one would cost a PATCH per job plus the watch event it causes. Nor is the essence
    of every event built (a deep copy of the body) only to be dropped."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


def resync_workers(config: OperatorSettings) -> int:
    return max(1, config.workers // 2)


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorSettings) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
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
    """`memo` may carry, from a leader-elected start (__main__.run_elected), the write gate
    and the metrics already served."""
    config = OperatorSettings.from_env()
    logging.getLogger("streamingjob_operator").setLevel(config.log_level.upper())
    configure_kopf(settings, config)
    metrics = memo.get("metrics")
    if metrics is None:
        metrics = Metrics()
        if config.metrics_port and config.metrics_port not in _metrics_started:
            metrics.serve(config.metrics_port)
            _metrics_started.add(config.metrics_port)
    threads = config.workers + resync_workers(config)
    api = KubeApi(
        timeout=config.api_timeout_seconds,
        connections=threads + 1,
        write_gate=memo.get("write_gate"),
    )
    memo.runtime = Runtime(config, api, metrics)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime = memo.get("runtime")
    if runtime is not None:
        runtime.close()


@kopf.on.probe(id="jobs")
def probe(memo: kopf.Memo, **_: Any) -> int:
    runtime = memo.get("runtime")
    return len(runtime.wakeups) if runtime is not None else 0


FINALIZER_WAIT_SECONDS = 2.0  # then reconcile anyway


# kopf's handler protocols allow namespace=None (cluster-scoped kinds); StreamingJobs are
# namespaced, so these handlers take a str (the ignores below).
@kopf.daemon(API_GROUP, API_VERSION, PLURAL, id="reconcile", cancellation_timeout=5.0)  # type: ignore[arg-type]
async def keep_reconciled(
    namespace: str, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime: Runtime = memo.runtime
    key = (namespace, name)
    wake = runtime.wakeups.setdefault(key, asyncio.Event())
    runtime.metrics.jobs.track(key)
    loop = asyncio.get_running_loop()
    try:
        # kopf adds its finalizer in the cycle that starts this daemon: the first status write
        # would race that PATCH (a conflict, and a second try), so let it land first (the
        # job's events wake this daemon until a reconcile has read the job).
        deadline = loop.time() + FINALIZER_WAIT_SECONDS
        while FINALIZER not in (body.metadata.get("finalizers") or []):
            left = deadline - loop.time()
            if left <= 0:
                break
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=left)
        resync = False  # the first reconcile, a wake-up, a pending step: the main pool
        first = True
        while True:
            wake.clear()
            delay = await _reconcile(runtime, wake, namespace, name, resync=resync)
            if first and memo.get("leading_since") is not None:
                log.info(
                    "first reconcile of %s/%s as leader, %.2f s after taking the Lease",
                    namespace,
                    name,
                    time.monotonic() - memo.leading_since,
                )
            first = False
            if delay is None:
                delay = runtime.config.resync_seconds
            try:
                await asyncio.wait_for(wake.wait(), timeout=max(delay, 0.01))
                resync = False
            except TimeoutError:
                resync = delay >= runtime.config.resync_seconds
    finally:
        runtime.wakeups.pop(key, None)
        runtime.nodes.track(key, set())
        runtime.seen.forget(namespace, name)
        runtime.kafka.forget(key)
        runtime.metrics.jobs.forget(key)  # its series go with the job


async def _reconcile(
    runtime: Runtime, wake: asyncio.Event, namespace: str, name: str, *, resync: bool
) -> float | None:
    """One reconcile in a worker thread. A resync still queued when the job is woken is
    withdrawn and run on the main pool at once (a started one is never doubled)."""
    reconcile = runtime.reconciler.reconcile
    if not resync:
        return await asyncio.wrap_future(runtime.executor.submit(reconcile, namespace, name))
    queued = runtime.resync_executor.submit(reconcile, namespace, name)
    done = asyncio.wrap_future(queued)
    woken = asyncio.ensure_future(wake.wait())
    try:
        either: set[asyncio.Future[Any]] = {done, woken}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
    if not done.done() and queued.cancel():
        wake.clear()
        return await asyncio.wrap_future(runtime.executor.submit(reconcile, namespace, name))
    return await done


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)  # type: ignore[arg-type]
async def job_event(namespace: str, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A spec change (new generation) wakes the job; status and metadata writes do not."""
    runtime = memo.get("runtime")
    if runtime is not None and runtime.seen.job_is_news(
        namespace, name, body.metadata.get("generation")
    ):
        runtime.poke(namespace, name)


@kopf.on.event("", "v1", "pods", labels={LABEL_ROLE: "driver", LABEL_MANAGED_BY: MANAGED_BY})
async def driver_pod_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime = memo.get("runtime")
    if runtime is None:
        return
    meta = body.get("metadata") or {}
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == KIND and owner.get("apiVersion", "").startswith(API_GROUP):
            namespace, job = meta.get("namespace", ""), owner.get("name", "")
            runtime.seen.driver_event(namespace, job, body)
            if runtime.seen.pod_is_news(
                namespace,
                job,
                meta.get("name", ""),
                meta.get("resourceVersion"),
                type,
            ):
                runtime.poke(namespace, job)


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL)
async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    job = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), **dict(body)}
    job["metadata"] = dict(body.metadata)
    job["spec"] = dict(body.spec)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(runtime.executor, runtime.finalizer.finalize, job)
