"""The operator's node view: lease renewals timed by its own clock, cordons, wake-ups."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamingjob_operator.io.errors import FatalError
from streamingjob_operator.io.nodes import NodeTracker, with_node_view
from streamingjob_operator.rules.fencing import is_lost
from streamingjob_operator.rules.observed import PodInfo, iso
from streamingjob_operator.rules.timing import watch_quiet_seconds
from tests.unit.operator.helpers_operator import T0

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self):
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def lease(node: str, renewed: str) -> dict:
    return {"metadata": {"name": node}, "spec": {"renewTime": renewed}}


def node(name: str, unschedulable: bool = False) -> dict:
    return {"metadata": {"name": name}, "spec": {"unschedulable": unschedulable}}


def tracker(clock: Clock, woken: list, grace: float = 40) -> NodeTracker:
    def none():
        raise AssertionError("not started in these tests")

    return NodeTracker(
        list_leases=none, watch_leases=none, list_nodes=none, watch_nodes=none,
        grace_seconds=grace, quiet_seconds=watch_quiet_seconds(10),
        wake=lambda ns, name: woken.append((ns, name)), clock=clock,
    )  # fmt: skip


def test_a_renewal_counts_when_seen_and_silence_wakes_each_job_once():
    clock, woken = Clock(), []
    nodes = tracker(clock, woken)
    nodes.track(("team", "orders"), {"w1"})
    nodes._on_lease("ADDED", lease("w1", "2020-01-01T00:00:00Z"))  # the node's clock: ignored
    nodes._on_lease("ADDED", lease("w2", "x"))
    assert nodes.heard_at("w1") == T0
    for _ in range(3):  # w2 keeps renewing (the watch is alive), w1 is silent
        clock.advance(10)
        nodes._on_lease("MODIFIED", lease("w2", str(clock.now)))
    assert nodes.heard_at("w1") == T0 and nodes.silent_jobs() == []
    clock.advance(10)
    nodes._on_lease("MODIFIED", lease("w2", str(clock.now)))
    assert nodes.silent_jobs() == [("team", "orders")]
    assert nodes.silent_jobs() == []  # once per node
    assert nodes.lost() == {"w1"}  # where a new standby must not go
    nodes._on_lease("MODIFIED", lease("w1", "back"))  # it came back: heard now
    assert nodes.heard_at("w1") == clock.now and nodes.lost() == set()


def test_a_quiet_watch_makes_every_answer_unknown():
    """No renewal of any node for a while: the watch, not the nodes, is suspect."""
    clock, woken = Clock(), []
    nodes = tracker(clock, woken)
    nodes.track(("team", "orders"), {"w1"})
    nodes._on_lease("ADDED", lease("w1", "a"))
    clock.advance(watch_quiet_seconds(10) + 1)
    assert nodes.heard_at("w1") is None and nodes.silent_jobs() == []
    assert nodes.lost() == set()


def test_a_cordon_wakes_the_jobs_on_that_node_at_once():
    clock, woken = Clock(), []
    nodes = tracker(clock, woken)
    nodes.track(("team", "a"), {"w1", "w2"})
    nodes.track(("team", "b"), {"w2"})
    nodes._on_node("ADDED", node("w1"))
    assert not nodes.cordoned("w1") and woken == []
    nodes._on_node("MODIFIED", node("w1", unschedulable=True))
    assert nodes.cordoned("w1") and woken == [("team", "a")]
    nodes._on_node("MODIFIED", node("w1", unschedulable=True))  # no news: no second wake
    assert woken == [("team", "a")]
    nodes._on_node("MODIFIED", node("w1"))  # uncordoned
    assert not nodes.cordoned("w1")


def test_without_read_access_the_view_stays_unknown(caplog):
    def forbidden():
        raise FatalError("list node leases: forbidden")

    nodes = NodeTracker(
        list_leases=forbidden, watch_leases=forbidden, list_nodes=forbidden,
        watch_nodes=forbidden, grace_seconds=40, quiet_seconds=15, wake=lambda *_: None,
    ).start()  # fmt: skip
    try:
        assert nodes.heard_at("w1") is None and not nodes.cordoned("w1")
    finally:
        nodes.stop()


def _lost(nodes: NodeTracker, node: str, now, grace: float) -> bool:
    pod = PodInfo(name="d", role="driver", phase="Running", node=node)
    pod = PodInfo(**{**pod.__dict__, "node_heard_at": nodes.heard_at(node)})
    return is_lost(pod, now, grace)


def test_after_a_control_plane_outage_every_node_counts_from_when_renewals_come_back():
    """Finding 4 of issue 41: an outage longer than the grace, then one kubelet renews first;
    the others, healthy, renew within one interval. None of them is lost meanwhile."""
    clock, woken = Clock(), []
    nodes = tracker(clock, woken)
    nodes.track(("team", "orders"), {"w1", "w2"})
    nodes._on_lease("ADDED", lease("w1", "a"))
    clock.advance(5)
    nodes._on_lease("ADDED", lease("w2", "a"))
    clock.advance(90)  # the API server is down: no kubelet renews, no watch event
    nodes._on_lease("MODIFIED", lease("w1", "b"))  # the first one back
    for _ in range(9):
        clock.advance(1)
        assert not _lost(nodes, "w2", clock.now, 40)
        assert nodes.silent_jobs() == []


@pytest.mark.parametrize("grace", [35, 40, 60])
@pytest.mark.parametrize("outage", [5, 14, 16, 28, 90])
def test_no_node_counts_as_lost_for_the_silence_of_the_control_plane(grace, outage):
    """Whatever the grace the timing rules admit (35 s up) and however long the outage
    (a short one too: the simulation's seed 396 of issue 41): every node renewed within one
    interval before it and renews within one interval after it; none is ever lost."""
    clock, woken = Clock(), []
    nodes = tracker(clock, woken, grace)
    for n in range(10):  # one renewal a second: every node once per 10 s
        nodes._on_lease("ADDED", lease(f"w{n}", "a"))
        clock.advance(1)
    for _ in range(outage):
        clock.advance(1)
        assert not any(_lost(nodes, f"w{n}", clock.now, grace) for n in range(10))
    for n in range(10):  # back: each renews once more, in the same order
        nodes._on_lease("MODIFIED", lease(f"w{n}", "b"))
        assert not any(_lost(nodes, f"w{m}", clock.now, grace) for m in range(10))
        clock.advance(1)


def test_a_ready_unknown_mark_counts_from_when_this_view_began():
    """Simulation seed 39: a node frozen long enough for the node lifecycle controller's
    Ready=Unknown, thawed during an API-server outage. The leader after the outage has no
    renewal yet (no lease view) and the mark is old: counted from the leader's start (and
    from a view's return after a silence of every node), its healthy driver is not lost
    before its kubelet could renew."""
    clock, woken = Clock(), []
    marked = T0 - timedelta(seconds=150)  # the controller's mark, before the outage
    pod = {
        "metadata": {"name": "d", "labels": {"spark-role": "driver"}},
        "spec": {"nodeName": "w1"},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": iso(marked)}
            ],
        },
    }
    nodes = tracker(clock, woken, grace=35)  # this process starts now: no renewal seen yet
    (viewed,) = with_node_view([pod], nodes)
    assert viewed.node_heard_at is None and viewed.ready_unknown_since == T0
    assert not is_lost(viewed, clock.now, 35)
    assert is_lost(viewed, T0 + timedelta(seconds=35), 35)  # still silent a grace later: lost
    (unviewed,) = with_node_view([pod], None)  # the API server's view alone: the mark counts
    assert is_lost(unviewed, clock.now, 35)


def test_a_deletion_no_kubelet_confirmed_counts_from_when_this_view_could_see_it():
    """Simulation seed 1080: a leader asked a driver to stop, its node froze, the API server
    went out and the Lease to the other replica, whose first look after the outage (no
    renewal seen yet) forced the healthy driver out: its deletion looked unconfirmed for
    minutes, of which no kubelet could have confirmed any. Counted from the view's start or
    last return, and not while the view is out."""
    clock, woken = Clock(), []
    asked = T0 - timedelta(seconds=115)  # the stop asked before the outage
    meta = {"name": "d", "labels": {"spark-role": "driver"}, "deletionTimestamp": iso(asked)}
    pod = {
        "metadata": meta,
        "spec": {"nodeName": "w2", "terminationGracePeriodSeconds": 30},
        "status": {"phase": "Running"},
    }
    nodes = tracker(clock, woken, grace=35)  # the new leader's view: no renewal seen yet
    (viewed,) = with_node_view([pod], nodes)
    assert viewed.deleting_since == asked and not is_lost(viewed, clock.now, 35)
    assert is_lost(viewed, T0 + timedelta(seconds=65), 35)  # unconfirmed for 30 + 35 s: lost
    (unviewed,) = with_node_view([pod], None)  # the API server's view alone
    assert is_lost(unviewed, clock.now, 35)
    # a view that heard kubelets, then went quiet (an outage of its watch): not while it is out
    nodes._on_lease("MODIFIED", lease("w1", "r1"))
    clock.advance(300)
    (out,) = with_node_view([pod], nodes)
    assert out.node_heard_at is None and not is_lost(out, clock.now, 35)
