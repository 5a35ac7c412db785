"""`reconcile.Seen`: which watch events wake a job's reconcile (news) and which are echoes of
what the reconcile already observed or did itself."""

from __future__ import annotations

import pytest

from streamingjob_operator.api.job import JobMeta
from streamingjob_operator.seen import Seen

pytestmark = pytest.mark.unit

NS, JOB = "team", "orders"


def _pod(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def test_a_job_never_observed_is_always_news():
    seen = Seen()
    assert seen.job_is_news(NS, JOB, 1)
    assert seen.pod_is_news(NS, JOB, "p", "7", "MODIFIED")
    assert seen.pod_is_news(NS, JOB, "p", "7", "DELETED")


def test_job_events_are_news_only_for_a_new_generation():
    seen = Seen()
    seen.saw_job(JobMeta(name=JOB, namespace=NS, generation=3))
    assert not seen.job_is_news(NS, JOB, 3)  # a status write or kopf's finalizer patch
    assert seen.job_is_news(NS, JOB, 4)  # a spec change
    assert seen.job_is_news(NS, "other", 3)
    seen.forget(NS, JOB)
    assert seen.job_is_news(NS, JOB, 3)


def test_pod_events_compare_with_the_last_list():
    seen = Seen()
    seen.saw_pods(NS, JOB, [_pod("d1", "10")])
    assert not seen.pod_is_news(NS, JOB, "d1", "10", "MODIFIED")
    assert not seen.pod_is_news(NS, JOB, "d1", "10", None)  # kopf re-listing
    assert seen.pod_is_news(NS, JOB, "d1", "11", "MODIFIED")  # the kubelet changed it
    assert seen.pod_is_news(NS, JOB, "d1", "12", "DELETED")  # deleted by someone else
    assert seen.pod_is_news(NS, JOB, "d2", "13", "ADDED")  # a pod the list did not show
    assert seen.pod_is_news(NS, JOB, "d2", "13", None)
    # not in the last list: deleted before it (a stale event) or its ADDED woke the job
    assert not seen.pod_is_news(NS, JOB, "d2", "14", "MODIFIED")
    assert not seen.pod_is_news(NS, JOB, "d2", "15", "DELETED")


def test_the_echoes_of_own_creates_and_deletes_wake_nothing():
    seen = Seen()
    seen.saw_pods(NS, JOB, [_pod("a1", "10")])
    seen.mark(NS, JOB, "a1", Seen.DELETING)  # our delete under way
    assert not seen.pod_is_news(NS, JOB, "a1", "11", "MODIFIED")
    assert not seen.pod_is_news(NS, JOB, "a1", "12", "DELETED")
    seen.mark(NS, JOB, "a1", None)  # deleted at once (200)
    assert not seen.pod_is_news(NS, JOB, "a1", "12", "DELETED")

    seen.mark(NS, JOB, "a2", Seen.CREATING)  # our create under way
    assert not seen.pod_is_news(NS, JOB, "a2", "13", "ADDED")
    assert seen.pod_is_news(NS, JOB, "a2", "14", "MODIFIED")  # already changed by others
    seen.mark(NS, JOB, "a2", "13")  # the create returned it
    assert not seen.pod_is_news(NS, JOB, "a2", "13", "ADDED")
    assert seen.pod_is_news(NS, JOB, "a2", "14", "MODIFIED")


def test_a_graceful_deletion_wakes_the_job_when_it_ends():
    seen = Seen()
    seen.saw_pods(NS, JOB, [_pod("a1", "10")])
    seen.mark(NS, JOB, "a1", Seen.DELETING)
    seen.mark(NS, JOB, "a1", "")  # 202: still terminating, version unknown
    assert seen.pod_is_news(NS, JOB, "a1", "11", "MODIFIED")
    assert seen.pod_is_news(NS, JOB, "a1", "12", "DELETED")


def test_snapshots_are_replaced_not_changed_in_place():
    seen = Seen()
    seen.saw_pods(NS, JOB, [_pod("a1", "10")])
    before = seen._pods[(NS, JOB)]
    seen.mark(NS, JOB, "a2", Seen.CREATING)
    assert before == {"a1": "10"}  # a reader holding the old snapshot sees it unchanged


def _ended(
    name: str, code: int, reason: str = "Error", deleting: bool = True, owner: str = "u1"
) -> dict:
    meta = {"name": name, "labels": {"spark-role": "driver"}, "ownerReferences": [{"uid": owner}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:08:31Z"
    term = {"exitCode": code, "reason": reason}
    status = {
        "phase": "Failed",
        "containerStatuses": [{"name": "driver", "state": {"terminated": term}}],
    }
    return {"metadata": meta, "status": status}


def test_a_driver_that_failed_as_it_was_deleted_is_kept_until_its_end_is_told():
    """Its kubelet removes it right after its last status: only the watch shows that end
    (simulation seed 78 of stop 57). Ends a deletion causes are not kept, nor a running pod."""
    seen = Seen()
    seen.driver_event(NS, JOB, _ended("a", 1))
    for name, code, reason in (("b", 0, "Completed"), ("c", 143, "Error"), ("d", 137, "Error")):
        seen.driver_event(NS, JOB, _ended(name, code, reason))
    seen.driver_event(NS, JOB, _ended("e", 137, "OOMKilled"))
    seen.driver_event(NS, JOB, _ended("f", 1, deleting=False))  # a list shows it: not kept
    seen.driver_event(NS, JOB, _ended("g", 1, owner="u0"))  # a deleted job's of the same name
    assert [p.name for p in seen.ended_drivers(NS, JOB, "u1")] == ["a", "e"]
    seen.told(NS, JOB, "a")
    assert [p.name for p in seen.ended_drivers(NS, JOB, "u1")] == ["e"]
    assert [p.name for p in seen.ended_drivers(NS, JOB, "u0")] == ["g"]
    seen.forget(NS, JOB)
    assert seen.ended_drivers(NS, JOB, "u1") == []
