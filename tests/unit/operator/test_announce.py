"""Warning Events outlive the operator process (announce.py): a failure recorded in status by
a process that ended before posting its Event is posted by the next process, once. Found by
the simulation (seed 21: an operator crash between the status write and the Event).

The real Reconciler against the simulation's in-memory API server (simulation/cluster.py, the
KubeApi seam the simulation tier runs it on); a crash is a `Crash` raised inside a call."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from simulation.clock import Clock
from simulation.cluster import Crash, Server, SimApi
from streamingjob_operator.reconcile import Reconciler
from streamingjob_operator.settings import OperatorSettings
from tests.unit.operator.helpers_operator import BASE_SPEC, NAME, NS

pytestmark = pytest.mark.unit

UID = "0f1e2d3c-0000-4000-8000-0000000000aa"


def _world() -> tuple[Server, SimApi]:
    server = Server(Clock())
    job = {
        "apiVersion": "streaming.example.com/v1",
        "kind": "StreamingJob",
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": 1},
        "spec": copy.deepcopy(BASE_SPEC),
        "status": {},
    }
    server.put(job)
    return server, SimApi(server)


def _process(api: SimApi, server: Server) -> Reconciler:
    """A new operator process: nothing in memory."""
    return Reconciler(api, OperatorSettings(), clock=server.clock)  # type: ignore[arg-type]


def _fail_driver(server: Server) -> str:
    (pod,) = server.of_kind("Pod")
    terminated = {"exitCode": 1, "reason": "Error"}
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"name": "driver", "state": {"terminated": terminated}}],
    }
    server.bump(pod)
    return str(pod["metadata"]["name"])


def _warnings(server: Server, pod: str) -> list[tuple[str, str]]:
    return [(r, m) for _, t, r, m in server.events if t == "Warning" and pod in m]


def test_a_failure_told_in_status_by_a_process_that_died_is_posted_by_the_next_once():
    server, api = _world()
    _process(api, server).reconcile(NS, NAME)  # launches the driver
    pod = _fail_driver(server)
    server.clock.t += 5
    server.faults.crash_in, server.faults.crash_after = "status job", True
    with pytest.raises(Crash):  # the failure is in status, the process dies before its Event
        _process(api, server).reconcile(NS, NAME)
    status = server.get("StreamingJob", NS, NAME)["status"]  # type: ignore[index]
    assert any(pod in h["message"] for h in status["history"])
    assert _warnings(server, pod) == []

    server.clock.t += 5
    _process(api, server).reconcile(NS, NAME)  # the next leader
    told = _warnings(server, pod)
    assert len(told) == 1 and told[0][0] == "DriverFailed"

    server.clock.t += 5
    later = _process(api, server)  # and the one after it: the same Event, not a second
    later.reconcile(NS, NAME)
    later.reconcile(NS, NAME)
    assert _warnings(server, pod) == told


def test_a_warning_the_api_server_refused_is_posted_by_a_later_reconcile():
    """An Event post that failed (the API server away at the end of the reconcile) is
    posted again while the warning is kept and young, by the same process."""
    server, api = _world()
    reconciler = _process(api, server)
    reconciler.reconcile(NS, NAME)
    pod = _fail_driver(server)
    server.clock.t += 5
    posted = api.post_event
    api.post_event = lambda *a, **k: False  # type: ignore[method-assign]  # refused
    reconciler.reconcile(NS, NAME)
    assert _warnings(server, pod) == []
    api.post_event = posted  # type: ignore[method-assign]
    server.clock.t += 5
    reconciler.reconcile(NS, NAME)
    assert len(_warnings(server, pod)) == 1


def test_only_warnings_younger_than_the_event_ttl_are_posted_again():
    """An Event the API server let expire (its TTL, 1 h by default) would come back: a kept
    warning older than 50 minutes is not posted again."""
    from streamingjob_operator.announce import Announcer
    from streamingjob_operator.rules.observed import iso

    server, api = _world()
    server.clock.t = 3 * 3600.0
    job = server.get("StreamingJob", NS, NAME)
    assert job is not None
    old, young = (iso(server.clock() - timedelta(minutes=m)) for m in (55, 45))
    job["status"] = {
        "warnings": [
            {"name": "orders.old", "time": old, "reason": "DriverFailed", "message": "old"},
            {"name": "orders.young", "time": young, "reason": "DriverFailed", "message": "young"},
        ]
    }
    announcer = Announcer(api, server.clock)  # type: ignore[arg-type]
    announcer.post(announcer.unposted(job))
    announcer.post(announcer.unposted(job))
    assert [(r, m) for _, _, r, m in server.events] == [("DriverFailed", "young")]
    assert server.event_names == {"orders.young"}
