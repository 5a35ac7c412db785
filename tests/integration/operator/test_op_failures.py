"""A reconcile the API server refuses ends in status, an Event and a retry with backoff."""

from __future__ import annotations

import pytest

from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

QUOTA = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}


def _degraded(kube: Kube, ns: str, name: str) -> dict | None:
    conditions = kube.status(ns, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Degraded"), None)


def test_a_pod_the_api_server_rejects_is_degraded_with_an_event_and_retried(
    kube: Kube, ns: str, operator: object
):
    """A valid spec whose driver pod the API server refuses (403: the namespace's quota;
    a spec the pod API refuses is Invalid before any create, see test_op_validation)."""
    kube.core.create_namespaced_resource_quota(ns, QUOTA)
    # what the quota controller (not run here) would record: admission enforces it from then on
    kube.core.patch_namespaced_resource_quota_status(
        "no-pods", ns, {"status": {"hard": {"pods": "0"}, "used": {"pods": "0"}}}
    )
    kube.create_job(ns, "bad", job_spec())

    def rejected():
        cond = _degraded(kube, ns, "bad")
        # (Degraded may say KafkaUnavailable first: this test has no broker)
        return cond if cond and cond["reason"] == "ApiRejected" else None

    cond = wait_for(rejected, 30, "Degraded for the rejected pod")
    assert cond["status"] == "True"
    assert "create pod" in cond["message"] and "exceeded quota" in cond["message"]
    # retried with backoff (base 0.2 s, cap 1 s here), the count kept in status
    wait_for(
        lambda: (kube.status(ns, "bad").get("reconcileFailure") or {}).get("count", 0) >= 3,
        30,
        "three failed attempts",
    )
    assert kube.status(ns, "bad")["phase"] == "Launching" and kube.driver_names(ns) == []
    warnings = [e for e in kube.events(ns) if e.reason == "ApiRejected"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"  # once per distinct failure
    assert "exceeded quota" in warnings[0].message
    history = [h["reason"] for h in kube.status(ns, "bad")["history"]]
    assert history.count("ApiRejected") == 1

    # fixed by the namespace's owner: the next retry launches, Degraded clears
    kube.core.delete_namespaced_resource_quota("no-pods", ns)
    wait_for(lambda: kube.driver_names(ns) == ["bad-e1-a1-driver"], 30, "the launch")

    def cleared():
        # the rejection's Degraded cleared: False, or (no broker here) the Kafka reading's
        # KafkaUnavailable, which a loaded machine may post before this sees False
        st = kube.status(ns, "bad")
        cond = _degraded(kube, ns, "bad")
        gone = cond and (cond["status"] == "False" or cond["reason"] != "ApiRejected")
        return "reconcileFailure" not in st and gone

    wait_for(cleared, 30, "the failure cleared")
