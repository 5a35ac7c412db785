"""The operator's node view: lease renewals timed by its own clock, cordons, wake-ups."""

from __future__ import annotations

from datetime import timedelta

import pytest

from streamingjob_operator.errors import FatalError
from streamingjob_operator.nodes import WATCH_QUIET_SECONDS, NodeTracker
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


def tracker(clock: Clock, woken: list) -> NodeTracker:
    def none():
        raise AssertionError("not started in these tests")

    return NodeTracker(
        list_leases=none, watch_leases=none, list_nodes=none, watch_nodes=none,
        grace_seconds=40, wake=lambda ns, name: woken.append((ns, name)), clock=clock,
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
    nodes._on_lease("MODIFIED", lease("w1", "back"))  # it came back: heard now
    assert nodes.heard_at("w1") == clock.now


def test_a_quiet_watch_makes_every_answer_unknown():
    """No renewal of any node for a while: the watch, not the nodes, is suspect."""
    clock, woken = Clock(), []
    nodes = tracker(clock, woken)
    nodes.track(("team", "orders"), {"w1"})
    nodes._on_lease("ADDED", lease("w1", "a"))
    clock.advance(WATCH_QUIET_SECONDS + 1)
    assert nodes.heard_at("w1") is None and nodes.silent_jobs() == []


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
        watch_nodes=forbidden, grace_seconds=40, wake=lambda *_: None,
    ).start()  # fmt: skip
    try:
        assert nodes.heard_at("w1") is None and not nodes.cordoned("w1")
    finally:
        nodes.stop()
