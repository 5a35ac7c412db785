"""The apiserver harness works the way the operator's tests will use it."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from devbed.kube_apiserver import KubeAPIServer, running_apiserver

pytestmark = pytest.mark.integration

VIEWER = "viewer"


@pytest.fixture(scope="module")
def apiserver() -> Iterator[KubeAPIServer]:
    yield from running_apiserver(users={VIEWER: ("viewer-token", ["streamingjob:viewers"])})


@pytest.fixture
def namespace(apiserver: KubeAPIServer) -> str:
    # Unique per test: with no namespace controller a deleted namespace never goes away.
    name = f"t-{uuid.uuid4().hex[:8]}"
    core(apiserver).create_namespace({"metadata": {"name": name}})
    return name


def core(server: KubeAPIServer, user: str = "admin") -> client.CoreV1Api:
    api = config.new_client_from_config(config_file=str(server.kubeconfig_for(user)))
    return client.CoreV1Api(api)


def container_status(state: dict) -> dict:
    return {
        "name": "main",
        "image": "busybox:stable",
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
    }


def test_pods_stay_pending_and_the_test_plays_kubelet(
    apiserver: KubeAPIServer, namespace: str
) -> None:
    api = core(apiserver)
    pod = {
        "metadata": {"name": "driver"},
        "spec": {"containers": [{"name": "main", "image": "busybox:stable"}]},
    }
    api.create_namespaced_pod(namespace, pod)
    assert api.read_namespaced_pod("driver", namespace).status.phase == "Pending"

    running = {"phase": "Running", "containerStatuses": [container_status({"running": {}})]}
    api.patch_namespaced_pod_status("driver", namespace, {"status": running})
    assert api.read_namespaced_pod("driver", namespace).status.phase == "Running"

    api.patch_namespaced_pod_status("driver", namespace, {"status": {"phase": "Pending"}})
    assert api.read_namespaced_pod("driver", namespace).status.phase == "Pending"

    terminated = {"terminated": {"exitCode": 3, "reason": "Error"}}
    failed = {"phase": "Failed", "containerStatuses": [container_status(terminated)]}
    api.patch_namespaced_pod_status("driver", namespace, {"status": failed})
    status = api.read_namespaced_pod("driver", namespace).status
    assert status.phase == "Failed"
    assert status.container_statuses[0].state.terminated.exit_code == 3


def test_rbac_applies_to_static_token_users(apiserver: KubeAPIServer, namespace: str) -> None:
    viewer = core(apiserver, VIEWER)
    with pytest.raises(ApiException) as denied:
        viewer.list_namespaced_pod(namespace)
    assert denied.value.status == 403

    rbac = client.RbacAuthorizationV1Api(
        config.new_client_from_config(config_file=str(apiserver.kubeconfig))
    )
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Group",
                    "name": "streamingjob:viewers",
                }
            ],
        },
    )
    # The RBAC authorizer reads roles from an informer cache, so the grant lands a moment later.
    deadline = time.monotonic() + 10
    while True:
        try:
            viewer.list_namespaced_pod(namespace)
            break
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    with pytest.raises(ApiException) as still_denied:
        viewer.list_namespaced_pod("default")
    assert still_denied.value.status == 403


def test_kubectl_uses_the_kubeconfig(apiserver: KubeAPIServer, namespace: str) -> None:
    assert apiserver.bin_dir is not None
    kubectl = [str(apiserver.bin_dir / "kubectl"), f"--kubeconfig={apiserver.kubeconfig}"]
    out = subprocess.run(
        [*kubectl, "get", "namespace", namespace, "-o", "name"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == f"namespace/{namespace}"
