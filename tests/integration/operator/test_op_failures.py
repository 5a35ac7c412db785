"""A reconcile the API server refuses ends in status, an Event and a retry with backoff."""

from __future__ import annotations

import pytest

from tests.integration.operator.kube_helpers import Kube, job_spec, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BAD_LABEL = "not a label key!"


def _degraded(kube: Kube, ns: str, name: str) -> dict | None:
    conditions = kube.status(ns, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Degraded"), None)


@pytest.mark.parametrize(
    ("template", "server_says"),
    [
        # 422: the pod fails validation (the CRD keeps podTemplate free-form)
        ({"metadata": {"labels": {BAD_LABEL: "x"}}}, "metadata.labels"),
        # 403: the Priority admission plugin refuses an unknown PriorityClass
        ({"spec": {"priorityClassName": "no-such-class"}}, "no-such-class"),
    ],
    ids=["invalid-422", "forbidden-403"],
)
def test_a_pod_the_api_server_rejects_is_degraded_with_an_event_and_retried(
    kube: Kube, ns: str, operator: object, template: dict, server_says: str
):
    kube.create_job(ns, "bad", job_spec(podTemplate=template))

    def rejected():
        cond = _degraded(kube, ns, "bad")
        return cond if cond and cond["status"] == "True" else None

    cond = wait_for(rejected, 30, "Degraded for the rejected pod")
    assert cond["reason"] == "ApiRejected"
    assert "create pod" in cond["message"] and server_says in cond["message"]
    # retried with backoff (base 0.2 s, cap 1 s here), the count kept in status
    wait_for(
        lambda: (kube.status(ns, "bad").get("reconcileFailure") or {}).get("count", 0) >= 3,
        30,
        "three failed attempts",
    )
    assert kube.status(ns, "bad")["phase"] == "Launching" and kube.driver_names(ns) == []
    warnings = [e for e in kube.events(ns) if e.reason == "ApiRejected"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"  # once per distinct failure
    assert server_says in warnings[0].message
    history = [h["reason"] for h in kube.status(ns, "bad")["history"]]
    assert history.count("ApiRejected") == 1

    # fixed by the user: a restart-class change → the next attempt launches, Degraded clears
    fixed = {k: {kk: None for kk in v} for k, v in template.items()}  # merge patch: remove
    fixed["metadata"] = {**fixed.get("metadata", {}), "labels": {BAD_LABEL: None, "ok": "y"}}
    kube.patch_spec(ns, "bad", {"podTemplate": fixed})
    wait_for(lambda: kube.driver_names(ns) == ["bad-e1-a2-driver"], 30, "the fixed launch")

    def cleared():
        st = kube.status(ns, "bad")
        cond = _degraded(kube, ns, "bad")
        return "reconcileFailure" not in st and cond and cond["status"] == "False"

    wait_for(cleared, 30, "the failure cleared")
