"""The chart's RBAC is enough, and exactly what the operator uses.

The chart is rendered with `helm template`; its ServiceAccount and (Cluster)Role + binding are
installed into a real kube-apiserver, and the operator runs in-process with the args and
environment of the rendered Deployment, authenticated with a token of that ServiceAccount
(TokenRequest: a real service-account identity, no static user). A job then goes through
launch, children (the driver Role is only accepted if the operator holds all it grants),
status updates, a failure and restore, Events, and deletion with the checkpoint cleanup Job.
OwnerReferencesPermissionEnforcement is enabled, as on hardened clusters and OpenShift.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, utils

from devbed.kube_apiserver import KubeAPIServer, find_bin_dir
from streamingjob_operator.api.naming import driver_pod_name
from streamingjob_operator.children.rbac import (
    build_role,
    build_role_binding,
    build_service_account,
)
from tests.integration.operator.kube_helpers import (
    OPERATOR_ENV,
    Kube,
    job_spec,
    operator_env,
    wait_for,
)
from tests.unit.test_chart import container, of_kind, render

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RELEASE_NS = "streamingjob-system"
NODE_VIEW = ("-nodes", "-node-leases")  # the read-only node view, in both modes
LEADER = ("-leader",)  # the leader-election Lease Role, in the release namespace
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# kopf's cluster scanning (a watch on CRDs; a list of namespaces when watching a list) is not
# granted: the operator turns it off (settings.scanning.disabled in handlers.configure_kopf).
# Left on, kopf logs 403s, and with watchNamespaces serves nothing until ~1 min of retries end.
SCANNING_HINT = "kopf's cluster scanning must be off: settings.scanning.disabled"


@pytest.fixture(scope="module")
def apiserver() -> Iterator[KubeAPIServer]:
    plugins = "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"
    with KubeAPIServer(extra_args=[plugins]) as server:
        yield server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _install_chart_rbac(kube: Kube, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Creates the chart's RBAC objects as the admin; returns the ServiceAccount."""
    with contextlib.suppress(client.ApiException):  # 409: the second test
        kube.core.create_namespace({"metadata": {"name": RELEASE_NS}})
    for kind in RBAC_KINDS:
        for doc in of_kind(docs, kind):
            utils.create_from_dict(kube.api_client, doc)
    (account,) = of_kind(docs, "ServiceAccount")
    return account


def _kubeconfig_as(apiserver: KubeAPIServer, kube: Kube, account: dict[str, Any]) -> Path:
    meta = account["metadata"]
    token = kube.core.create_namespaced_service_account_token(
        meta["name"], meta["namespace"], {"spec": {"expirationSeconds": 3600}}
    ).status.token
    assert apiserver.kubeconfig is not None
    config = json.loads(apiserver.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path = apiserver.kubeconfig.parent / f"kubeconfig-sa-{meta['name']}"
    path.write_text(json.dumps(config))
    return path


@contextlib.contextmanager
def _operator_as_deployed(
    docs: list[dict[str, Any]], kubeconfig: Path, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """The rendered Deployment's command and env as a real process (test-speed loops): the
    pod's own fields filled in as the kubelet would. It elects itself through the chart's
    Lease Role, and on SIGTERM releases the Lease (get, create, update all used)."""
    c = container(docs)
    assert c["args"] == ["streamingjob-operator"]
    pod_fields = {"metadata.namespace": RELEASE_NS, "metadata.name": "operator-0"}

    def value(e: dict[str, Any]) -> str:
        return e["value"] if "value" in e else pod_fields[e["valueFrom"]["fieldRef"]["fieldPath"]]

    env = {e["name"]: value(e) for e in c["env"]}
    # the entry point is streamingjob_operator.__main__:main (tests/unit/test_packaging.py)
    command = [sys.executable, "-m", "streamingjob_operator"]
    with operator_env(kubeconfig, **{**env, **OPERATOR_ENV}) as full_env, log.open("wb") as out:
        proc = subprocess.Popen(
            command, env={**os.environ, **full_env}, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
    output = log.read_text(errors="replace")
    assert code == 0 and "released the Lease" in output, output[-3000:]
    problems = [
        line
        for line in output.splitlines()
        if re.search(r"forbidden|(?<![,.:\d])\b403\b|permission", line, re.IGNORECASE)
    ]
    assert not problems, f"the operator hit RBAC denials ({SCANNING_HINT}?):\n" + "\n".join(
        line[:400] for line in problems
    )


# an operator's start (imports, the Lease, the first watch) beside CI's other tiers: 28 s in
# run 44, where a 30 s wait failed the namespaced twin
HEALTHZ_SECONDS = 90


def _healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _exercise(kube: Kube, ns: str, name: str) -> None:
    """One job through every API call the operator makes."""
    kube.core.create_namespaced_secret(
        ns, {"metadata": {"name": "creds"}, "stringData": {"username": "u", "password": "p"}}
    )
    spec = job_spec(
        kafkaCredentials={"secretName": "creds"},
        checkpoint={"location": "file:///mnt/ckpt/jobs", "deleteOnJobDeletion": True},
        volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
        volumeMounts=[{"name": "ckpt", "mountPath": "/mnt/ckpt"}],
    )
    kube.create_job(ns, name, spec)
    first, second = f"{name}-e1-a1-driver", f"{name}-e1-a2-driver"
    wait_for(lambda: kube.driver_names(ns) == [first], 40, f"driver {first} ({SCANNING_HINT}?)")
    # the driver's RBAC: accepted only because the operator holds what it grants
    role = kube.rbac.read_namespaced_role(f"{name}-driver", ns)
    assert role.rules
    kube.rbac.read_namespaced_role_binding(f"{name}-driver", ns)
    kube.core.read_namespaced_service_account(f"{name}-driver", ns)
    kube.core.read_namespaced_service(f"{name}-driver", ns)

    kube.set_running(ns, first)
    wait_for(lambda: kube.status(ns, name).get("phase") == "Running", 30, "Running")
    kube.set_terminated(ns, first, 1)
    wait_for(lambda: kube.driver_names(ns) == [second], 40, f"restored as {second}")
    kube.wait_for_events(ns, name, {"Launched", "DriverFailed"})

    kube.delete_job(ns, name)
    wait_for(lambda: kube.job(ns, name) is None, 40, "job deleted (finalizer released)")
    assert kube.pods(ns) == []
    roles = [r.metadata.name for r in kube.rbac.list_namespaced_role(ns).items]
    assert f"{name}-driver" not in roles
    # the checkpoint cleanup Job: created by the operator, not owned by the job
    jobs = client.BatchV1Api(kube.api_client).list_namespaced_job(ns).items
    assert [j.metadata.name for j in jobs] == [f"{name}-ckpt-cleanup"]


def test_operator_runs_with_the_cluster_wide_chart_rbac(
    apiserver: KubeAPIServer, kube: Kube, tmp_path: Path
):
    health, ns = _free_port(), kube.namespace()
    docs = render(
        "--set", f"health.port={health}",
        "--set", "metrics.enabled=false",
        "--set-json", f'rbac.secretNamespaces=["{ns}"]',  # the job's Secret: here only
    )  # fmt: skip
    main = [d for d in docs if not d["metadata"]["name"].endswith(NODE_VIEW + LEADER)]
    assert of_kind(main, "ClusterRole")
    assert [r["metadata"]["namespace"] for r in of_kind(main, "Role")] == [ns]
    account = _install_chart_rbac(kube, docs)
    kubeconfig = _kubeconfig_as(apiserver, kube, account)
    with _operator_as_deployed(docs, kubeconfig, tmp_path / "operator.log"):
        wait_for(lambda: _healthz(health), HEALTHZ_SECONDS, "/healthz on the chart's health port")
        _exercise(kube, ns, "orders")


def test_operator_runs_with_the_namespaced_chart_rbac(
    apiserver: KubeAPIServer, kube: Kube, tmp_path: Path
):
    watched, other = kube.namespace(), kube.namespace()
    health = _free_port()
    docs = render(
        "--set-json", f'watchNamespaces=["{watched}"]',
        "--set", "fullnameOverride=sj-namespaced",
        "--set", f"health.port={health}",
        "--set", "metrics.enabled=false",
    )  # fmt: skip
    main = [d for d in docs if not d["metadata"]["name"].endswith(NODE_VIEW + LEADER)]
    assert not of_kind(main, "ClusterRole")
    assert [r["metadata"]["namespace"] for r in of_kind(main, "Role")] == [watched]
    account = _install_chart_rbac(kube, docs)
    kubeconfig = _kubeconfig_as(apiserver, kube, account)
    kube.create_job(other, "elsewhere", job_spec())
    with _operator_as_deployed(docs, kubeconfig, tmp_path / "operator.log"):
        wait_for(lambda: _healthz(health), HEALTHZ_SECONDS, "/healthz")
        _exercise(kube, watched, "orders")
        # jobs outside the watched namespaces are not the operator's (and it could not act)
        assert kube.pods(other) == [] and kube.status(other, "elsewhere") == {}


def _can_i(apiserver: KubeAPIServer, account: str, ns: str, verb: str, what: str) -> bool:
    """`kubectl auth can-i` as a service account: the API server's own RBAC answer."""
    assert apiserver.kubeconfig is not None
    proc = subprocess.run(
        [
            str(find_bin_dir() / "kubectl"),
            "--kubeconfig", str(apiserver.kubeconfig),
            "auth", "can-i", verb, what,
            "--namespace", ns,
            "--as", f"system:serviceaccount:{ns}:{account}",
        ],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), (proc.returncode, proc.stdout, proc.stderr)
    return answer == "yes"


def test_a_job_cannot_touch_another_jobs_children(apiserver: KubeAPIServer, kube: Kube):
    """Each job's driver account (builders.build_role) may manage only what is its own: the
    executors its driver names and its report ConfigMap, and only read its go ConfigMap. Pod
    `create` (and listing and watching pods, which Spark does by label) cannot be limited by
    name: the documented residual."""
    ns = kube.namespace()
    drivers = {}
    for job in ("a", "b"):
        meta = {"name": job, "namespace": ns, "uid": f"uid-{job}"}
        drivers[job] = driver_pod_name(job, 1, 1)
        for obj in (
            build_service_account({"metadata": meta}),
            build_role({"metadata": meta}, drivers[job], 2),
            build_role_binding({"metadata": meta}),
        ):
            del obj["metadata"]["ownerReferences"]  # no StreamingJob behind them here
            utils.create_from_dict(kube.api_client, obj)
    a, b_driver = "a-driver", drivers["b"]

    def can(verb: str, what: str) -> bool:
        return _can_i(apiserver, a, ns, verb, what)

    # its own: create and remove its executors, write its report
    assert can("create", "pods")  # the residual: RBAC has no name for a pod not yet created
    assert can("delete", f"pods/{drivers['a']}-exec-1")
    assert can("patch", f"pods/{drivers['a']}-exec-2")
    assert can("patch", "configmaps/a-report")
    # its go: read only (the go fences the running driver; only the operator gives it)
    assert can("get", "configmaps/a-go")
    for verb in ("patch", "update", "delete"):
        assert not can(verb, "configmaps/a-go")
    assert not can("get", f"pods/{b_driver}")  # pods are read by name only its own
    # another job's pods and ConfigMaps, and anything of the namespace at once: no
    for verb in ("delete", "patch", "update"):
        assert not can(verb, f"pods/{b_driver}")
        assert not can(verb, f"pods/{b_driver}-exec-1")
        assert not can(verb, "configmaps/b-report")
        assert not can(verb, "configmaps/b-job")
    assert not can("delete", f"pods/{drivers['a']}")  # not even its own driver
    assert not can("deletecollection", "pods")
    assert not can("create", "configmaps")
    assert not can("get", "configmaps/b-report")
    # nothing else: Secrets, Services, PVCs, RBAC, the jobs themselves
    for verb, what in [
        ("get", "secrets"),
        ("list", "secrets"),
        ("create", "services"),
        ("delete", "services/b-driver"),
        ("create", "persistentvolumeclaims"),
        ("create", "roles"),
        ("create", "rolebindings"),
        ("patch", "streamingjobs.sparkkafka.dev/b"),
    ]:
        assert not can(verb, what), (verb, what)
