"""Helpers for the operator's API-server tests: install the CRD, run the operator, play the
kubelet (pod phases and exit codes), and poll with deadlines instead of sleeping."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf.testing
import yaml
from kubernetes import client, config, watch

from devbed.polling import wait_for
from streamingjob_operator.api.models import API_GROUP, API_VERSION, PLURAL

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "streamingjob.yaml"
DRIVERS = "spark-role=driver"  # the label selector of every driver pod


# Fast loops for tests: the same code paths, shorter waits.
OPERATOR_ENV = {
    "STREAMINGJOB_RESYNC_SECONDS": "1",
    "STREAMINGJOB_FENCING_POLL_SECONDS": "0.2",
    "STREAMINGJOB_NODE_LOST_GRACE_SECONDS": "3.5",
    "STREAMINGJOB_KUBELET_LEASE_RENEW_SECONDS": "1",  # the grace fits: 3.5 renewals (timing.py)
    "STREAMINGJOB_KAFKA_TIMEOUT_SECONDS": "2",
    "STREAMINGJOB_KAFKA_DEADLINE_SECONDS": "6",
    "STREAMINGJOB_KAFKA_POLL_SECONDS": "1",
    "STREAMINGJOB_FAILURE_BACKOFF_BASE_SECONDS": "0.2",
    "STREAMINGJOB_FAILURE_BACKOFF_CAP_SECONDS": "1",
    "STREAMINGJOB_METRICS_PORT": "0",
    "STREAMINGJOB_WORKERS": "8",
    "STREAMINGJOB_LOG_LEVEL": "INFO",
}


class Kube:
    def __init__(self, kubeconfig: Path) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self.api_client = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.rbac = client.RbacAuthorizationV1Api(self.api_client)
        self.ext = client.ApiextensionsV1Api(self.api_client)

    def install_crd(self) -> None:
        crd = yaml.safe_load(CRD_FILE.read_text())
        try:
            self.ext.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

        def established() -> bool:
            obj = self.ext.read_custom_resource_definition(crd["metadata"]["name"])
            return any(
                c.type == "Established" and c.status == "True"
                for c in (obj.status.conditions or [])
            )

        wait_for(established, 30, "CRD established")
        # discovery of the new resource can lag a moment behind Established
        wait_for(lambda: self._list_ok(), 30, "CRD served")

    def _list_ok(self) -> bool:
        try:
            self.custom.list_cluster_custom_object(API_GROUP, API_VERSION, PLURAL)
            return True
        except client.ApiException:
            return False

    def namespace(self) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace({"metadata": {"name": name}})
        return name

    # --- jobs ---
    def create_job(self, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": "StreamingJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
        return self.custom.create_namespaced_custom_object(API_GROUP, API_VERSION, ns, PLURAL, body)

    def job(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                API_GROUP, API_VERSION, ns, PLURAL, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return (self.job(ns, name) or {}).get("status") or {}

    def patch_spec(self, ns: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            API_GROUP, API_VERSION, ns, PLURAL, name, {"spec": patch}
        )

    def delete_job(self, ns: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, PLURAL, name)

    # --- pods ---
    def pods(self, ns: str, role: str | None = None) -> list[client.V1Pod]:
        selector = f"spark-role={role}" if role else None
        return self.core.list_namespaced_pod(ns, label_selector=selector).items

    def pod(self, ns: str, name: str) -> client.V1Pod | None:
        return next((p for p in self.pods(ns) if p.metadata.name == name), None)

    def report(self, ns: str, job: str) -> dict[str, str]:
        """The job's report ConfigMap: what its runners and the operator's signals wrote."""
        return self.core.read_namespaced_config_map(f"{job}-report", ns).data or {}

    def go(self, ns: str, job: str) -> str | None:
        """The go of a warm hand-over: go.json of the job's go ConfigMap (the operator's;
        drivers may only read it), None while there is none."""
        try:
            cm = self.core.read_namespaced_config_map(f"{job}-go", ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return (cm.data or {}).get("go.json")

    def signal_ready(self, ns: str, job: str, pod: str, epoch: int, attempt: int) -> None:
        """What a waiting runner writes once warm: handover.json, by a merge patch."""
        signal = {"pod": pod, "epoch": epoch, "attempt": attempt, "state": "ready"}
        self.core.patch_namespaced_config_map(
            f"{job}-report", ns, {"data": {"handover.json": json.dumps(signal)}}
        )

    def driver_names(self, ns: str) -> list[str]:
        return sorted(p.metadata.name for p in self.pods(ns, "driver"))

    def set_running(self, ns: str, pod: str) -> None:
        self._status(
            ns,
            pod,
            {"phase": "Running", "containerStatuses": [_cs({"running": {"startedAt": _now()}})]},
        )

    def set_terminated(
        self, ns: str, pod: str, exit_code: int, reason: str = "Error", message: str = ""
    ) -> None:
        phase = "Succeeded" if exit_code == 0 else "Failed"
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": _now(),
                "finishedAt": _now(),
                **({"message": message} if message else {}),
            }
        }
        self._status(ns, pod, {"phase": phase, "containerStatuses": [_cs(state)]})

    def set_waiting(self, ns: str, pod: str, reason: str, message: str) -> None:
        state = {"waiting": {"reason": reason, "message": message}}
        self._status(ns, pod, {"phase": "Pending", "containerStatuses": [_cs(state)]})

    def set_unknown(self, ns: str, pod: str) -> None:
        self._status(ns, pod, {"phase": "Unknown"})

    def _status(self, ns: str, pod: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(pod, ns, {"status": status})

    def delete_pod(self, ns: str, pod: str) -> None:
        with contextlib.suppress(client.ApiException):
            self.core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)

    def create_secret(self, ns: str, name: str, data: dict[str, str]) -> None:
        self.core.create_namespaced_secret(
            ns, {"metadata": {"name": name}, "stringData": data, "type": "Opaque"}
        )

    def events(self, ns: str) -> list[client.CoreV1Event]:
        return self.core.list_namespaced_event(ns).items

    def wait_for_events(
        self, ns: str, name: str, reasons: set[str], timeout: float = 20
    ) -> list[client.CoreV1Event]:
        """The Events about `name` once all `reasons` are among them. A reconcile posts its
        Events after it has written status, so a status just read may not have them yet."""

        def posted() -> list[client.CoreV1Event] | None:
            events = [e for e in self.events(ns) if e.involved_object.name == name]
            return events if reasons <= {e.reason for e in events} else None

        return wait_for(posted, timeout, f"Events {sorted(reasons)} about {name}")


def _cs(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "driver",
        "ready": "running" in state,
        "restartCount": 0,
        "image": "img",
        "imageID": "",
        "state": state,
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def job_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": "repo/streamingjob:test",
        "job": {
            "source": {
                "bootstrapServers": "127.0.0.1:1",
                "subscribe": ["orders"],
                "groupId": "orders-group",
            },
            "sink": {"format": "noop"},
        },
        "checkpoint": {"location": "s3a://ckpt/base"},
        "restartPolicy": {
            "maxRestarts": 20,
            "windowSeconds": 600,
            "backoff": {"baseSeconds": 1, "capSeconds": 2},
            "stableRunSeconds": 600,
        },
    }
    spec.update(overrides)
    return spec


@contextlib.contextmanager
def operator_env(kubeconfig: Path, **extra: str) -> Iterator[dict[str, str]]:
    env = {**OPERATOR_ENV, "KUBECONFIG": str(kubeconfig), **extra}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def running_operator(kubeconfig: Path, **extra: str) -> Iterator[kopf.testing.KopfRunner]:
    """The operator in-process (kopf.testing.KopfRunner), cluster-wide, standalone."""
    with operator_env(kubeconfig, **extra):
        args = ["run", "-m", "streamingjob_operator", "-A", "--standalone"]
        with kopf.testing.KopfRunner(args, timeout=60) as runner:
            yield runner


def spawn_operator(
    kubeconfig: Path,
    stderr=subprocess.DEVNULL,
    settings: dict[str, str] = OPERATOR_ENV,
    **extra_env: str,
):
    """The operator as a real `kopf run` process (its own session, so it can be SIGKILLed).
    `settings` defaults to the tests' fast loops; the benchmark passes {} (production)."""
    env = {
        **os.environ,
        **settings,
        "KUBECONFIG": str(kubeconfig),
        "PYTHONPATH": f"{REPO}:{REPO / 'operator'}",
        **extra_env,
    }
    command = ["kopf", "run", "-m", "streamingjob_operator", "-A", "--standalone", "--quiet"]
    return subprocess.Popen(
        [sys.executable, "-m", *command],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )


class DriverWatch:
    """Follows driver pods of a namespace through a watch; records the max overlap per job."""

    def __init__(self, kube: Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.live: dict[str, set[str]] = defaultdict(set)
        self.max_live: dict[str, int] = defaultdict(int)
        self.created: list[str] = []
        self._watch = watch.Watch()
        self._stopped = False
        self._version = ""
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DriverWatch:
        # listed here, watched from the list's version: a thread that starts late under load
        # would list after a short-lived driver had come and gone, and never see it (run 89)
        listed = self.kube.core.list_namespaced_pod(self.ns, label_selector=DRIVERS)
        for pod in listed.items:
            self._added(pod)
        self._version = listed.metadata.resource_version
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._watch.stop()

    def _run(self) -> None:
        try:
            self._follow()
        except Exception:  # the stream ends when the watch is stopped
            if not self._stopped:
                raise

    def _follow(self) -> None:
        stream = self._watch.stream(
            self.kube.core.list_namespaced_pod,
            self.ns,
            label_selector=DRIVERS,
            resource_version=self._version,
            timeout_seconds=600,
        )
        for event in stream:
            pod = event["object"]
            if event["type"] == "ADDED":
                self._added(pod)
            elif event["type"] == "DELETED":
                self.live[pod.metadata.labels["sparkkafka.dev/job"]].discard(pod.metadata.name)

    def _added(self, pod: client.V1Pod) -> None:
        job, name = pod.metadata.labels["sparkkafka.dev/job"], pod.metadata.name
        self.live[job].add(name)
        self.created.append(name)
        self.max_live[job] = max(self.max_live[job], len(self.live[job]))


def rejected(kube: Kube, ns: str, spec: dict[str, Any]) -> str:
    """The API server's message for a StreamingJob spec it refuses (422)."""
    try:
        kube.create_job(ns, "invalid", spec)
    except client.ApiException as exc:
        assert exc.status == 422, exc
        return str(json.loads(exc.body)["message"])
    raise AssertionError("the API server accepted the spec")
