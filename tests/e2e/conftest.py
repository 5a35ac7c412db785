"""Fixtures of the end-to-end tier: a kind cluster and kubectl against it.

The cluster comes from `scripts/kind/up.sh` (offline node image, project images loaded).
`make e2e` runs up.sh itself and passes the kubeconfig in STREAMJOB_E2E_KUBECONFIG; without that
variable the session brings the cluster up on its own and deletes it at the end (set
STREAMJOB_E2E_KEEP=1 to keep it for the next run).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest

from devbed.kind_cluster import Images, Kube, kind_down, kind_up, kubectl_for, project_images
from devbed.kind_iceberg import IcebergReader, start_iceberg_catalog
from devbed.kind_kafka import (
    KAFKA_NAMESPACE,
    KafkaLogin,
    read_kafka_login,
    start_kafka,
    wait_schema_registry,
)
from devbed.kind_kafka_client import KafkaClient, start_kafka_client
from devbed.kind_operator import (
    OPERATOR_NAMESPACE,
    Helm,
    helm_for,
    install_operator,
    uninstall_operator,
)
from devbed.kind_storage import ObjectStore, start_object_store
from tests.e2e.results import RESULTS, RUN_RESULTS


@pytest.fixture(scope="session")
def images() -> Images:
    return project_images()


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    given = os.environ.get("STREAMJOB_E2E_KUBECONFIG")
    if given:
        yield given
        return
    path = kind_up()
    yield path
    if os.environ.get("STREAMJOB_E2E_KEEP") != "1":
        kind_down()


@pytest.fixture(scope="session")
def kube(kubeconfig: str) -> Kube:
    return kubectl_for(kubeconfig)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (without waiting)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="session")
def helm(kubeconfig: str) -> Helm:
    return helm_for(kubeconfig)


@pytest.fixture(scope="session")
def operator_release(kube: Kube, helm: Helm, images: Images) -> Iterator[str]:
    release = install_operator(kube, helm, images)
    yield release
    if os.environ.get("STREAMJOB_E2E_KEEP") != "1":
        uninstall_operator(helm)


@pytest.fixture(scope="session")
def kafka_broker(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> str:
    return start_kafka(kube, tmp_path_factory.mktemp("kafka-tls"))


@pytest.fixture(scope="session")
def schema_registry(kube: Kube, kafka_broker: str) -> str:
    """The registry's Confluent-compatible API inside the cluster (started with Kafka)."""
    return wait_schema_registry(kube)


@pytest.fixture(scope="session")
def kafka_login(kube: Kube, kafka_broker: str) -> KafkaLogin:
    return read_kafka_login(kube)


@pytest.fixture(scope="session")
def kafka_client(kube: Kube, kafka_broker: str, images: Images) -> KafkaClient:
    return start_kafka_client(kube, kafka_broker, images)


@pytest.fixture(scope="session")
def object_store(kube: Kube) -> Iterator[ObjectStore]:
    store = start_object_store(kube)
    yield store
    store.close()


@pytest.fixture(scope="session")
def iceberg_catalog(kube: Kube, object_store: ObjectStore) -> Iterator[IcebergReader]:
    """The bed's Iceberg REST catalog (its tables' files in MinIO), read from the tests."""
    start_iceberg_catalog(kube)
    reader = IcebergReader(kube, object_store)
    yield reader
    reader.close()


# -- containers that restarted or died without the test causing it ------------------------------
# A crash the test did not cause (the operator's SIGSEGV in librdkafka, a broker OOM) must fail
# the run, not hide behind a restart. Untested on kind here; its pure part has a unit test
# (tests/unit/test_e2e_restarts.py).

ContainerKey = tuple[str, str, str]  # namespace, pod, container


def watched_role(pod: dict) -> str | None:
    """operator, kafka, driver or executor; None for pods the check ignores."""
    meta = pod.get("metadata") or {}
    if meta.get("namespace") == OPERATOR_NAMESPACE:
        return "operator"
    if meta.get("namespace") == KAFKA_NAMESPACE:
        return "kafka"
    role = (meta.get("labels") or {}).get("spark-role")
    return role if role in ("driver", "executor") else None


def restart_counts(pods: list[dict]) -> dict[ContainerKey, int]:
    counts = {}
    for pod in pods:
        if watched_role(pod) is None:
            continue
        meta, status = pod["metadata"], pod.get("status") or {}
        for cs in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            counts[(meta["namespace"], meta["name"], cs["name"])] = cs.get("restartCount", 0)
    return counts


def unexpected_restarts(
    before: dict[ContainerKey, int], pods: list[dict], caused: set[str]
) -> list[str]:
    """What went wrong that the test did not cause: a watched container whose restartCount
    grew since `before`, or one that ended in a failure (a non-zero exit, OOMKilled) while its
    pod is not being deleted. `caused` names the pods ("namespace/name" or "name") the test
    killed or deleted itself. A driver that exits 0 has stopped on request (suspend, redeploy)."""
    problems = []
    for pod in pods:
        role = watched_role(pod)
        meta, status = pod["metadata"], pod.get("status") or {}
        name = f"{meta['namespace']}/{meta['name']}"
        if role is None or name in caused or meta["name"] in caused:
            continue
        for cs in (status.get("initContainerStatuses") or []) + (
            status.get("containerStatuses") or []
        ):
            key = (meta["namespace"], meta["name"], cs["name"])
            restarts = cs.get("restartCount", 0) - before.get(key, 0)
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            if restarts > 0:
                problems.append(
                    f"{role} {name} container {cs['name']} restarted {restarts} time(s) "
                    f"(last exit {last.get('exitCode')} {last.get('reason', '')})".rstrip()
                )
            ended = (cs.get("state") or {}).get("terminated")
            if ended and not meta.get("deletionTimestamp"):
                failed = ended.get("exitCode", 0) != 0 or ended.get("reason") == "OOMKilled"
                if failed or role in ("operator", "kafka"):
                    problems.append(
                        f"{role} {name} container {cs['name']} terminated: exit "
                        f"{ended.get('exitCode')} {ended.get('reason', '')}".rstrip()
                    )
    return problems


@pytest.fixture
def caused_restarts() -> set[str]:
    """Pods the test kills or deletes itself: add "namespace/name" (or the pod name)."""
    return set()


@pytest.fixture(autouse=True)
def _no_unexpected_restarts(request: pytest.FixtureRequest, caused_restarts: set[str]):
    """Fails the test when an operator, Kafka, driver or executor container restarted or
    died during it without the test causing it (only for tests that use the cluster)."""
    if "kube" not in request.fixturenames:
        yield
        return
    kube: Kube = request.getfixturevalue("kube")

    def pods() -> list[dict]:
        return json.loads(kube.run("get", "pods", "--all-namespaces", "-o", "json"))["items"]

    before = restart_counts(pods())
    yield
    problems = unexpected_restarts(before, pods(), caused_restarts)
    assert not problems, "containers restarted or died unexpectedly:\n" + "\n".join(problems)


def job_stories(kube: Kube, last: int = 15) -> str:
    """Each StreamingJob's counters and last history entries: what the operator did and why
    (a failed scenario's assertion names a symptom; this names the cause)."""
    jobs = json.loads(kube.run("get", "streamingjobs", "--all-namespaces", "-o", "json"))
    lines = []
    for job in jobs["items"]:
        st = job.get("status") or {}
        counters = {k: st.get(k) for k in ("phase", "epoch", "attempt", "restarts", "driverPod")}
        lines.append(f"{job['metadata']['namespace']}/{job['metadata']['name']} {counters}")
        lines += [
            f"  {h['time']} e{h.get('epoch')} a{h.get('attempt')} {h['reason']}: {h['message']}"
            for h in st.get("history", [])[-last:]
        ]
    return "\n".join(lines) or "no StreamingJob"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed scenario's report ends with the jobs' stories (job_stories)."""
    report = (yield).get_result()
    kube = getattr(item, "funcargs", {}).get("kube")
    if report.when == "call" and report.failed and isinstance(kube, Kube):
        try:
            report.sections.append(("StreamingJob histories", job_stories(kube)))
        except Exception as exc:  # the cluster may be what failed
            report.sections.append(("StreamingJob histories", f"unreadable: {exc}"))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """This run's results replace bench/results/e2e.json at once, when the run ends: the
    unit tests of the figures read it beside the e2e tier (a file rewritten scenario by
    scenario was half a run's for most of it)."""
    if RUN_RESULTS.exists():
        os.replace(RUN_RESULTS, RESULTS)
