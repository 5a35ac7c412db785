"""The operator against a real kube-apiserver + etcd; the tests play the kubelet."""

from __future__ import annotations

import subprocess
import time
from collections import Counter

import pytest
from kubernetes import client

from devbed.kube_apiserver import find_bin_dir
from streamingjob_operator.api.models import API_GROUP, API_VERSION, PLURAL
from streamingjob_operator.reconcile import Reconciler
from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _annotation(pod: client.V1Pod) -> str:
    return pod.metadata.annotations["sparkkafka.dev/checkpoint-location"]


def _driver(kube: Kube, ns: str, name: str, timeout: float = 30) -> client.V1Pod:
    return wait_for(
        lambda: next((p for p in kube.pods(ns, "driver") if p.metadata.name == name), None),
        timeout,
        f"driver pod {name}",
    )


def _only_driver(kube: Kube, ns: str, name: str, timeout: float = 30) -> client.V1Pod:
    """Waits until `name` is the one and only driver pod of the namespace."""
    wait_for(lambda: kube.driver_names(ns) == [name], timeout, f"{name} as the only driver")
    return _driver(kube, ns, name)


def test_launch_failure_restore_and_children(kube: Kube, ns: str, operator: object):
    kube.create_job(ns, "orders", job_spec())
    pod = _only_driver(kube, ns, "orders-e1-a1-driver")
    loc1 = f"s3a://ckpt/base/{ns}/orders/{kube.job(ns, 'orders')['metadata']['uid']}/epoch-1"
    assert _annotation(pod) == loc1
    st = wait_for(
        lambda: (
            kube.status(ns, "orders").get("launchState") == "Created" and kube.status(ns, "orders")
        ),
        20,
        "status Created",
    )
    assert (st["epoch"], st["attempt"], st["checkpointLocation"]) == (1, 1, loc1)
    # children: service, job + report config maps, driver RBAC; all owned by the job
    uid = kube.job(ns, "orders")["metadata"]["uid"]
    svc = kube.core.read_namespaced_service("orders-driver", ns)
    assert svc.spec.cluster_ip == "None"
    for cm in ("orders-job", "orders-report"):
        obj = kube.core.read_namespaced_config_map(cm, ns)
        assert obj.metadata.owner_references[0].uid == uid
    role = kube.rbac.read_namespaced_role("orders-driver", ns)
    assert any(r.resource_names == ["orders-report"] for r in role.rules)
    kube.core.read_namespaced_service_account("orders-driver", ns)
    kube.rbac.read_namespaced_role_binding("orders-driver", ns)

    kube.set_running(ns, pod.metadata.name)
    wait_for(lambda: kube.status(ns, "orders").get("phase") == "Running", 20, "Running")

    # an executor of the first driver (Spark would create it) must go before the relaunch
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {
                "name": "orders-e1-a1-driver-exec-1",
                "labels": {
                    "sparkkafka.dev/job": "orders",
                    "spark-role": "executor",
                    "sparkkafka.dev/driver-pod": "orders-e1-a1-driver",
                },
            },
            "spec": {"containers": [{"name": "executor", "image": "x"}]},
        },
    )
    failed_at = time.monotonic()
    kube.set_terminated(ns, pod.metadata.name, 1)
    pod2 = _only_driver(kube, ns, "orders-e1-a2-driver")
    assert time.monotonic() - failed_at >= 0.9  # backoff base 1s
    assert _annotation(pod2) == loc1  # same location: restore
    assert not [p for p in kube.pods(ns, "executor")]
    st = kube.status(ns, "orders")
    assert st["restarts"] == 1 and st["lastRestartReason"] == "DriverFailed"

    # OOM kill → attempt 3, same location
    kube.set_terminated(ns, pod2.metadata.name, 137, "OOMKilled")
    pod3 = _only_driver(kube, ns, "orders-e1-a3-driver")
    assert _annotation(pod3) == loc1
    assert kube.status(ns, "orders")["lastRestartReason"] == "OOMKilled"

    # deleted by someone else → attempt 4
    kube.delete_pod(ns, pod3.metadata.name)
    _only_driver(kube, ns, "orders-e1-a4-driver")
    st = kube.status(ns, "orders")
    assert st["lastRestartReason"] == "DriverDeleted" and st["restarts"] == 3

    # a streaming driver that exits 0 has failed too
    kube.set_terminated(ns, "orders-e1-a4-driver", 0, "Completed")
    _only_driver(kube, ns, "orders-e1-a5-driver")
    assert kube.status(ns, "orders")["lastRestartReason"] == "DriverExited"
    kube.wait_for_events(ns, "orders", {"Launching", "Launched", "DriverFailed", "BackOff"})


def test_spec_change_and_nonces(kube: Kube, ns: str, operator: object):
    kube.create_job(ns, "clicks", job_spec())
    _only_driver(kube, ns, "clicks-e1-a1-driver")
    own = f"s3a://ckpt/base/{ns}/clicks/{kube.job(ns, 'clicks')['metadata']['uid']}"
    # a job change under upgradeMode stateless → new epoch, new location
    kube.patch_spec(ns, "clicks", {"job": {"sink": {"format": "console"}}})
    pod = _only_driver(kube, ns, "clicks-e2-a1-driver")
    assert _annotation(pod) == f"{own}/epoch-2"
    # redeployNonce → new epoch
    kube.patch_spec(ns, "clicks", {"redeployNonce": 1})
    _only_driver(kube, ns, "clicks-e3-a1-driver")
    # restartNonce → same epoch, next attempt, same location
    kube.patch_spec(ns, "clicks", {"restartNonce": 1})
    pod = _only_driver(kube, ns, "clicks-e3-a2-driver")
    assert _annotation(pod) == f"{own}/epoch-3"
    # upgradeMode last-state: a job change keeps the epoch
    kube.patch_spec(ns, "clicks", {"upgradeMode": "last-state"})
    kube.patch_spec(ns, "clicks", {"image": "repo/streamingjob:v2"})
    pod = _only_driver(kube, ns, "clicks-e3-a3-driver")
    assert pod.spec.containers[0].image == "repo/streamingjob:v2"
    history = [h["reason"] for h in kube.status(ns, "clicks")["history"]]
    assert history.count("Redeploying") == 2 and history.count("Restarting") == 2


def test_suspend_and_resume(kube: Kube, ns: str, operator: object):
    kube.create_job(ns, "sus", job_spec())
    _only_driver(kube, ns, "sus-e1-a1-driver")
    kube.patch_spec(ns, "sus", {"suspend": True})
    wait_for(lambda: kube.status(ns, "sus").get("phase") == "Suspended", 20, "Suspended")
    assert kube.driver_names(ns) == []
    assert kube.status(ns, "sus")["epoch"] == 1
    kube.patch_spec(ns, "sus", {"suspend": False})
    _only_driver(kube, ns, "sus-e2-a1-driver")  # stateless resume = new epoch


def test_max_restarts_fails_and_nonce_resumes(kube: Kube, ns: str, operator: object):
    spec = job_spec()
    spec["restartPolicy"]["maxRestarts"] = 1
    kube.create_job(ns, "flaky", spec)
    _only_driver(kube, ns, "flaky-e1-a1-driver")
    kube.set_terminated(ns, "flaky-e1-a1-driver", 1)
    _only_driver(kube, ns, "flaky-e1-a2-driver")
    kube.set_terminated(ns, "flaky-e1-a2-driver", 1)
    st = wait_for(
        lambda: kube.status(ns, "flaky").get("phase") == "Failed" and kube.status(ns, "flaky"),
        20,
        "Failed",
    )
    assert "restartNonce" in st["message"] and "maxRestarts=1" in st["message"]
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "MaxRestartsExceeded"
    wait_for(lambda: kube.driver_names(ns) == [], 20, "failed driver removed")
    # An ignored field change makes the operator reconcile again: it must stay Failed.
    kube.patch_spec(ns, "flaky", {"restartPolicy": {"maxRestarts": 1, "stableRunSeconds": 7}})
    generation = kube.job(ns, "flaky")["metadata"]["generation"]
    st = wait_for(
        lambda: (
            all(
                c["observedGeneration"] == generation
                for c in kube.status(ns, "flaky").get("conditions", [])
            )
            and kube.status(ns, "flaky")
        ),
        20,
        "the spec change observed",
    )
    assert st["phase"] == "Failed" and kube.driver_names(ns) == []
    kube.patch_spec(ns, "flaky", {"restartNonce": 1})
    _only_driver(kube, ns, "flaky-e1-a3-driver")


def test_node_lost_relaunches_after_grace(kube: Kube, ns: str, operator: object):
    kube.create_job(ns, "lost", job_spec())
    _only_driver(kube, ns, "lost-e1-a1-driver")
    kube.set_running(ns, "lost-e1-a1-driver")
    kube.set_unknown(ns, "lost-e1-a1-driver")
    _only_driver(kube, ns, "lost-e1-a2-driver", timeout=30)
    assert kube.status(ns, "lost")["lastRestartReason"] == "NodeLost"


def test_driver_that_cannot_start_is_degraded_then_relaunched(
    kube: Kube, ns: str, operator: object
):
    kube.create_job(ns, "stuck", job_spec())
    kube.set_waiting(
        ns,
        _only_driver(kube, ns, "stuck-e1-a1-driver").metadata.name,
        "ImagePullBackOff",
        'Back-off pulling image "repo/streamingjob:test"',
    )

    def degraded() -> dict | None:
        conditions = kube.status(ns, "stuck").get("conditions") or []
        found = next((c for c in conditions if c["type"] == "Degraded"), None)
        return found if found and found["status"] == "True" else None

    condition = wait_for(degraded, 20, "Degraded while the image cannot be pulled")
    assert condition["reason"] == "DriverNotStarting"
    assert "ImagePullBackOff" in condition["message"] and "spec.image" in condition["message"]
    assert kube.status(ns, "stuck")["phase"] == "Pending"
    kube.wait_for_events(ns, "stuck", {"DriverNotStarting"})
    # A start timeout (lowered now, which relaunches nothing by itself) makes it a failure.
    kube.patch_spec(ns, "stuck", {"restartPolicy": {"startTimeoutSeconds": 1}})
    _only_driver(kube, ns, "stuck-e1-a2-driver")
    st = kube.status(ns, "stuck")
    # a2 cannot start either: under load its own timeout may be counted before this read
    assert st["lastRestartReason"] == "StartTimeout" and st["consecutiveFailures"] in (1, 2)


def test_deletion_removes_children(kube: Kube, ns: str, operator: object):
    kube.create_job(ns, "gone", job_spec())
    _only_driver(kube, ns, "gone-e1-a1-driver")
    kube.delete_job(ns, "gone")
    wait_for(lambda: kube.job(ns, "gone") is None, 30, "job deleted (finalizer released)")
    assert kube.pods(ns) == []
    assert [
        c.metadata.name
        for c in kube.core.list_namespaced_config_map(ns).items
        if c.metadata.name.startswith("gone")
    ] == []
    assert kube.core.list_namespaced_service(ns).items == []
    assert kube.rbac.list_namespaced_role(ns).items == []
    assert kube.rbac.list_namespaced_role_binding(ns).items == []


def test_unknown_secret_is_degraded_and_does_not_stall_others(
    kube: Kube, ns: str, operator: object
):
    bad = job_spec(kafkaCredentials={"secretName": "missing-creds"})
    kube.create_job(ns, "bad", bad)
    kube.create_job(ns, "good", job_spec())
    _only_driver(kube, ns, "good-e1-a1-driver")
    st = wait_for(
        lambda: kube.status(ns, "bad").get("phase") == "Invalid" and kube.status(ns, "bad"),
        20,
        "Invalid",
    )
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "InvalidSpec"
    assert "spec.kafkaCredentials.secretName" in degraded["message"]
    kube.wait_for_events(ns, "bad", {"InvalidSpec"})
    assert kube.driver_names(ns) == ["good-e1-a1-driver"]
    # the fix: create the Secret → the job launches on the next resync
    kube.core.create_namespaced_secret(
        ns,
        {"metadata": {"name": "missing-creds"}, "stringData": {"username": "u", "password": "p"}},
    )
    pod = _driver(kube, ns, "bad-e1-a1-driver")
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["KAFKA_SASL_PASSWORD"].value is None
    assert env["KAFKA_SASL_PASSWORD"].value_from.secret_key_ref.name == "missing-creds"
    cm = kube.core.read_namespaced_config_map("bad-job", ns)
    assert "p" not in {v for v in cm.data.values()}  # no secret values in config maps


def test_driver_rbac_patches_only_its_report(kube: Kube, ns: str, operator: object, apiserver):
    kube.create_job(ns, "rbac", job_spec())
    _only_driver(kube, ns, "rbac-e1-a1-driver")
    token = kube.core.create_namespaced_service_account_token(
        "rbac-driver", ns, {"spec": {"expirationSeconds": 600}}
    ).status.token
    cfg = client.Configuration()
    cfg.host = apiserver.url
    cfg.ssl_ca_cert = str(apiserver.workdir / "certs" / "apiserver.crt")
    cfg.api_key = {"authorization": f"Bearer {token}"}
    as_driver = client.CoreV1Api(client.ApiClient(cfg))
    report = {"data": {"report.json": '{"epoch": 1, "attempt": 1, "startPath": "fresh"}'}}
    as_driver.patch_namespaced_config_map("rbac-report", ns, report)
    with pytest.raises(client.ApiException) as denied:
        as_driver.patch_namespaced_config_map("rbac-job", ns, {"data": {"job.yaml": "x"}})
    assert denied.value.status == 403
    with pytest.raises(client.ApiException) as denied:
        as_driver.list_namespaced_secret(ns)
    assert denied.value.status == 403
    as_driver.list_namespaced_pod(ns)  # it manages its executors
    # the operator shows the report of the current run
    wait_for(lambda: kube.status(ns, "rbac").get("startPath") == "fresh", 20, "start path")


def _bind(kube: Kube, ns: str, pod: str, node: str = "node-a") -> None:
    """What the scheduler does: the pod is on a node, so its deletion is graceful."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    kube.core.create_namespaced_pod_binding(pod, ns, binding, _preload_content=False)


def _executor(kube: Kube, ns: str, job: str, driver: client.V1Pod, n: int) -> str:
    """An executor as Spark creates it: labelled with the job and its driver, owned by it."""
    name = f"{driver.metadata.name}-exec-{n}"
    labels = {
        "spark-role": "executor",
        "sparkkafka.dev/job": job,
        "sparkkafka.dev/driver-pod": driver.metadata.name,
        "app.kubernetes.io/managed-by": "streamingjob-operator",
    }
    owner = {"apiVersion": "v1", "kind": "Pod", "name": driver.metadata.name,
             "uid": driver.metadata.uid, "controller": True}  # fmt: skip
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name, "labels": labels, "ownerReferences": [owner]},
            "spec": {"containers": [{"name": "executor", "image": "spark"}]},
        },
    )
    _bind(kube, ns, name)
    kube.set_running(ns, name)
    return name


def _count_reconciles(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Reconciles the in-process operator runs from now on, per (namespace, name): a positive
    signal that it has looked at a job, instead of a fixed window of sleep."""
    calls: Counter[tuple[str, str]] = Counter()
    original = Reconciler.reconcile

    def counting(self: Reconciler, namespace: str, name: str) -> float | None:
        try:
            return original(self, namespace, name)
        finally:
            calls[(namespace, name)] += 1

    monkeypatch.setattr(Reconciler, "reconcile", counting)
    return calls


def test_a_graceful_restart_keeps_the_executors_until_their_driver_is_gone(
    kube: Kube, ns: str, operator: object, monkeypatch: pytest.MonkeyPatch
):
    """A running driver's deletion is graceful (its runner finishes the batch in flight, with
    its executors): the API server answers with the pod, its grace period running. The
    operator used to take that answer for "gone" and force-delete the executors under the
    batch (seen on kind: a drain interrupted the batch in flight)."""
    kube.create_job(ns, "keep", job_spec())
    driver = _only_driver(kube, ns, "keep-e1-a1-driver")
    _bind(kube, ns, driver.metadata.name)
    kube.set_running(ns, driver.metadata.name)
    executors = [_executor(kube, ns, "keep", driver, n) for n in (1, 2)]
    kube.patch_spec(ns, "keep", {"restartNonce": 1})
    wait_for(
        lambda: _driver(kube, ns, driver.metadata.name).metadata.deletion_timestamp,
        30,
        "the driver's graceful deletion",
    )
    reconciles = _count_reconciles(monkeypatch)
    wait_for(lambda: reconciles[(ns, "keep")] >= 5, 30, "5 reconciles while the driver stops")
    alive = {p.metadata.name: p.metadata.deletion_timestamp for p in kube.pods(ns, "executor")}
    assert alive == dict.fromkeys(executors), alive
    assert kube.driver_names(ns) == [driver.metadata.name]  # no launch meanwhile
    kube.set_terminated(ns, driver.metadata.name, 0, "Completed")  # its runner stopped
    _only_driver(kube, ns, "keep-e1-a2-driver", timeout=30)
    assert kube.pods(ns, "executor") == [] or all(
        p.metadata.deletion_timestamp for p in kube.pods(ns, "executor")
    )


def test_a_driver_that_fails_as_a_redeploy_deletes_it_is_told_from_its_last_state(
    kube: Kube, ns: str, operator: object
):
    """The driver failed just as a redeploy's graceful deletion reached it: its kubelet
    records the exit on the deleted pod and removes it at once, so no list shows that end;
    the pod watch's last event does (`Seen.driver_event`), and the failure is told once, a
    Warning naming the pod (simulation seed 78 of stop 57)."""
    kube.create_job(ns, "race", job_spec())
    driver = _only_driver(kube, ns, "race-e1-a1-driver").metadata.name
    _bind(kube, ns, driver)
    kube.set_running(ns, driver)
    kube.patch_spec(ns, "race", {"redeployNonce": 1})
    wait_for(
        lambda: _driver(kube, ns, driver).metadata.deletion_timestamp,
        30,
        "the driver's graceful deletion",
    )
    kube.set_terminated(ns, driver, 1, "Error", "py4j: the query failed")  # its own failure
    kube.delete_pod(ns, driver)  # the kubelet's last step: the pod goes
    _only_driver(kube, ns, "race-e2-a1-driver")
    events = kube.wait_for_events(ns, "race", {"DriverFailed"})
    told = [e for e in events if e.reason == "DriverFailed"]
    assert len(told) == 1 and f"{driver} exited 1" in told[0].message, told


def _confs(pod: client.V1Pod) -> dict[str, str]:
    args = pod.spec.containers[0].args
    pairs = [args[i + 1] for i, arg in enumerate(args) if arg == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def _no_service(kube: Kube, ns: str, name: str) -> bool:
    return name not in {s.metadata.name for s in kube.core.list_namespaced_service(ns).items}


def test_spark_ui_service_follows_the_switch(kube: Kube, ns: str, operator: object):
    kube.create_job(ns, "ui", job_spec(sparkUI={"enabled": True}))
    pod = _only_driver(kube, ns, "ui-e1-a1-driver")
    assert _confs(pod)["spark.ui.enabled"] == "true"
    svc = wait_for(
        lambda: next(
            (s for s in kube.core.list_namespaced_service(ns).items if s.metadata.name == "ui-ui"),
            None,
        ),
        20,
        "Service ui-ui",
    )
    assert svc.spec.selector == {"sparkkafka.dev/job": "ui", "spark-role": "driver"}
    assert [(p.name, p.port) for p in svc.spec.ports] == [("http", 4040)]
    assert svc.metadata.owner_references[0].uid == kube.job(ns, "ui")["metadata"]["uid"]
    assert kube.status(ns, "ui")["sparkUIService"] == "ui-ui"

    # off: a restart in the epoch without the UI, and the Service goes
    kube.patch_spec(ns, "ui", {"sparkUI": {"enabled": False}})
    pod = _only_driver(kube, ns, "ui-e1-a2-driver")
    assert _confs(pod)["spark.ui.enabled"] == "false"
    wait_for(lambda: _no_service(kube, ns, "ui-ui"), 20, "Service ui-ui deleted")
    assert kube.status(ns, "ui")["sparkUIService"] == ""

    # on again, then the job's deletion removes it with the other children
    kube.patch_spec(ns, "ui", {"sparkUI": {"enabled": True}})
    _only_driver(kube, ns, "ui-e1-a3-driver")
    wait_for(lambda: not _no_service(kube, ns, "ui-ui"), 20, "Service ui-ui again")
    kube.delete_job(ns, "ui")
    wait_for(lambda: kube.job(ns, "ui") is None, 30, "job deleted (finalizer released)")
    assert _no_service(kube, ns, "ui-ui")


def _kubectl(apiserver, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_bin_dir() / "kubectl"), "--kubeconfig", str(apiserver.kubeconfig), *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def test_kubectl_scale_restarts_in_the_epoch_with_the_new_executor_count(
    kube: Kube, ns: str, operator: object, apiserver
):
    kube.create_job(ns, "scaled", job_spec())
    pod = _only_driver(kube, ns, "scaled-e1-a1-driver")
    assert _confs(pod)["spark.executor.instances"] == "1"
    kube.set_running(ns, pod.metadata.name)
    wait_for(lambda: kube.status(ns, "scaled").get("executors") == 1, 20, "1 executor running")
    scale = kube.custom.get_namespaced_custom_object_scale(
        API_GROUP, API_VERSION, ns, PLURAL, "scaled"
    )
    assert scale["spec"]["replicas"] == 1 and scale["status"]["replicas"] == 1
    assert scale["status"]["selector"] == "spark-role=executor,sparkkafka.dev/job=scaled"

    done = _kubectl(apiserver, "scale", "-n", ns, "sj/scaled", "--replicas=3")
    assert done.returncode == 0, done.stderr
    pod = _only_driver(kube, ns, "scaled-e1-a2-driver")  # same epoch, next attempt: restore
    assert _confs(pod)["spark.executor.instances"] == "3"
    uid = kube.job(ns, "scaled")["metadata"]["uid"]
    assert _annotation(pod) == f"s3a://ckpt/base/{ns}/scaled/{uid}/epoch-1"
    assert kube.job(ns, "scaled")["spec"]["executor"]["instances"] == 3
    st = kube.status(ns, "scaled")
    assert (st["epoch"], st["attempt"], st["executors"]) == (1, 2, 0)  # not running yet
    kube.set_running(ns, pod.metadata.name)
    wait_for(lambda: kube.status(ns, "scaled").get("executors") == 3, 20, "3 executors running")
    scale = kube.custom.get_namespaced_custom_object_scale(
        API_GROUP, API_VERSION, ns, PLURAL, "scaled"
    )
    assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
    # no scale to zero: the schema's minimum holds for the scale subresource too (suspend stops)
    refused = _kubectl(apiserver, "scale", "-n", ns, "sj/scaled", "--replicas=0")
    assert refused.returncode != 0 and "spec.executor.instances" in refused.stderr
    assert kube.job(ns, "scaled")["spec"]["executor"]["instances"] == 3
