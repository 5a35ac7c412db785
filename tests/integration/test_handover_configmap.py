"""The warm hand-over's ConfigMap transport (spark_app/runner/handover_signals.py) against a real
kube-apiserver, as the driver's service account with the driver Role's rights on the job's
report ConfigMap (get, patch) and go ConfigMap (get): handover.json published next to the
running driver's report.json, go.json read from the go ConfigMap (which the driver cannot
write), another driver's go ignored. No Spark here."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from devbed.kube_apiserver import KubeAPIServer, running_apiserver
from devbed.polling import wait_for
from spark_app.runner.handover_signals import (
    GO_KEY,
    HANDOVER_KEY,
    ConfigMapSignals,
    Identity,
    await_go,
)
from spark_app.runner.report import ApiAccess, ConfigMapPublisher

pytestmark = pytest.mark.integration

DRIVER, DRIVERS = "driver", "streamingjob:drivers"
REPORT, GO = "orders-report", "orders-go"
ME = Identity("orders-driver-2-1", 2, 1)


@pytest.fixture(scope="module")
def apiserver() -> Iterator[KubeAPIServer]:
    yield from running_apiserver(users={DRIVER: ("driver-token", [DRIVERS])})


@pytest.fixture
def namespace(apiserver: KubeAPIServer) -> str:
    """A namespace of its own with the report ConfigMap (the running driver's report in
    it) and the driver Role's rule on it (builders.build_role)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    api = admin(apiserver)
    api.create_namespace({"metadata": {"name": name}})
    api.create_namespaced_config_map(
        name, {"metadata": {"name": REPORT}, "data": {"report.json": '{"state": "running"}'}}
    )
    api.create_namespaced_config_map(name, {"metadata": {"name": GO}})
    rbac = client.RbacAuthorizationV1Api(api.api_client)
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [REPORT],
         "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [GO], "verbs": ["get"]},
    ]  # fmt: skip
    rbac.create_namespaced_role(name, {"metadata": {"name": DRIVER}, "rules": rules})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": DRIVER}
    subject = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DRIVERS}
    rbac.create_namespaced_role_binding(
        name, {"metadata": {"name": DRIVER}, "roleRef": ref, "subjects": [subject]}
    )
    return name


def admin(server: KubeAPIServer) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(server.kubeconfig)))


@pytest.fixture
def access(apiserver: KubeAPIServer, tmp_path: Path) -> ApiAccess:
    """The driver's service account as a pod mounts it: a token file and the server's CA."""
    assert apiserver.workdir is not None
    token = tmp_path / "token"
    token.write_text(apiserver.users[DRIVER][0])
    return ApiAccess(apiserver.url, token, apiserver.workdir / "certs" / "apiserver.crt")


def data(server: KubeAPIServer, namespace: str) -> dict[str, str]:
    return admin(server).read_namespaced_config_map(REPORT, namespace).data or {}


def write_go(server: KubeAPIServer, namespace: str, pod: str) -> None:
    """What the operator does: a merge patch of go.json only, into the go ConfigMap."""
    go = {"pod": pod, "epoch": ME.epoch, "attempt": ME.attempt, "time": "2026-11-25T10:00:00Z"}
    body = {"data": {GO_KEY: json.dumps(go)}}
    admin(server).patch_namespaced_config_map(GO, namespace, body)


def signals_once_rbac_allows(access: ApiAccess, namespace: str) -> ConfigMapSignals:
    """The driver's signals, once the Role reached the authorizer's cache (a moment after
    it was created): a GET as the driver answers."""
    url = access.configmap_url(namespace, REPORT)

    def allowed() -> bool:
        try:
            access.call("GET", url)
            return True
        except OSError:  # 403 until the grant lands
            return False

    wait_for(allowed, 15, "the driver Role to apply")
    return ConfigMapSignals(REPORT, namespace, access, go_configmap=GO)


def test_ready_is_published_and_only_this_drivers_go_is_taken(
    apiserver: KubeAPIServer, namespace: str, access: ApiAccess, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="spark_app.runner.handover_signals")
    signals = signals_once_rbac_allows(access, namespace)
    assert signals.go_text() is None
    stop, outcome = threading.Event(), []
    waiting = threading.Thread(target=lambda: outcome.append(await_go(signals, ME, 12.5, stop)))
    waiting.start()
    try:
        wait_for(lambda: HANDOVER_KEY in data(apiserver, namespace), 10, "handover.json")
        found = data(apiserver, namespace)
        ready = json.loads(found[HANDOVER_KEY])
        assert (ready["pod"], ready["epoch"], ready["attempt"]) == (ME.pod, 2, 1)
        assert ready["state"] == "ready" and ready["warmSeconds"] == 12.5
        assert found["report.json"] == '{"state": "running"}'  # the running driver's key

        write_go(apiserver, namespace, "orders-driver-1-1")
        wait_for(
            lambda: any("ignoring a go for orders-driver-1-1" in r.message for r in caplog.records),
            10,
            "the foreign go seen",
        )
        assert waiting.is_alive() and not outcome
        # the running driver goes on reporting: its key and ours stay side by side
        ConfigMapPublisher(REPORT, namespace, access).publish('{"state": "stopped"}')
        write_go(apiserver, namespace, ME.pod)
        waiting.join(10)
        assert outcome == [True]
        # the driver cannot give itself a go: the go ConfigMap is read only to it
        forged = {"data": {GO_KEY: "{}"}}
        with pytest.raises(OSError, match="403"):
            access.call("PATCH", access.configmap_url(namespace, GO), forged)
    finally:
        stop.set()
        waiting.join(10)
    found = data(apiserver, namespace)
    assert found["report.json"] == '{"state": "stopped"}'
    assert json.loads(found[HANDOVER_KEY])["state"] == "ready"


def test_a_configmap_out_of_reach_is_logged_never_raised(
    apiserver: KubeAPIServer, namespace: str, access: ApiAccess, caplog
) -> None:
    """Another ConfigMap than the Role names: forbidden, so no go is ever found (the
    operator's deadline then falls back to a cold start); one log line, no exception."""
    signals_once_rbac_allows(access, namespace)
    other = ConfigMapSignals("someone-elses", namespace, access)
    assert other.publish({"state": "ready"}) is False
    assert [other.go_text() for _ in range(3)] == [None, None, None]
    read_failures = [r for r in caplog.records if f"cannot read {GO_KEY}" in r.message]
    assert len(read_failures) == 1 and "403" in read_failures[0].message
    with pytest.raises(ApiException) as denied:  # and the Role really is that narrow
        client.CoreV1Api(
            config.new_client_from_config(config_file=str(apiserver.kubeconfig_for(DRIVER)))
        ).read_namespaced_config_map("someone-elses", namespace)
    assert denied.value.status == 403
