"""Leader election: the rules (election.py) and one replica's side of them (leadership.py)
against an in-memory Lease with resourceVersion preconditions, on a hand-moved clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from streamingjob_operator.leadership import Gate, Leadership, NotLeading
from streamingjob_operator.rules.election import ElectionTiming, LeaseRecord, next_step
from streamingjob_operator.settings import OperatorSettings

pytestmark = pytest.mark.unit

TIMING = ElectionTiming()  # 15 / 10 / 2, client-go's defaults
NOW = datetime(2026, 11, 23, tzinfo=UTC)


def step(observed: LeaseRecord | None, unchanged_for: float = 0.0, me: str = "b"):
    return next_step(observed, me=me, unchanged_for=unchanged_for, now=NOW, timing=TIMING)


def test_no_lease_is_created_with_me_as_holder():
    s = step(None)
    assert s.action == "create" and s.record is not None
    assert (s.record.holder, s.record.duration_seconds, s.record.transitions) == ("b", 15, 0)


def test_a_held_lease_is_waited_for_until_seen_unchanged_for_its_duration():
    held = LeaseRecord("a", 15, 3, resource_version="7")
    assert step(held, 0).action == "wait"
    assert step(held, 14.9).action == "wait"
    assert step(held, 12).seconds == TIMING.retry_period_seconds
    assert step(held, 14.5).seconds == pytest.approx(0.5)  # looks again right at expiry
    taken = step(held, 15)
    assert taken.action == "update" and taken.record is not None
    # taken from the version seen: a renewal meanwhile makes the write fail
    assert (taken.record.holder, taken.record.transitions) == ("b", 4)
    assert taken.record.resource_version == "7"


def test_a_released_lease_is_taken_at_once():
    s = step(LeaseRecord("", 1, 3, resource_version="9"), 0)
    assert s.action == "update" and s.record is not None and s.record.holder == "b"


def test_my_own_lease_is_renewed_keeping_acquire_time_and_transitions():
    mine = LeaseRecord("b", 15, 2, acquire_time="t0", renew_time="t1", resource_version="5")
    s = step(mine, 100)
    assert s.action == "update" and s.record is not None
    assert (s.record.acquire_time, s.record.transitions, s.record.resource_version) == (
        "t0",
        2,
        "5",
    )
    assert s.record.renew_time != "t1"


@pytest.mark.parametrize(("lease", "renew", "retry"), [(10, 10, 2), (15, 10, 10), (5, 10, 2)])
def test_timings_out_of_order_are_refused_naming_the_rule(lease, renew, retry):
    with pytest.raises(ValidationError, match="leader election needs"):
        OperatorSettings(
            lease_duration_seconds=lease, renew_deadline_seconds=renew, retry_period_seconds=retry
        )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_gate_refuses_writes_from_its_deadline_and_after_close():
    clock = Clock()
    gate = Gate(clock)
    with pytest.raises(NotLeading, match="create pod"), gate.writing("create pod"):
        pass  # never opened
    gate.open_until(1010)
    with gate.writing("create pod"):
        pass
    clock.now = 1010
    with pytest.raises(NotLeading), gate.writing("create pod"):
        pass
    gate.open_until(1020)
    gate.close(0)
    with pytest.raises(NotLeading), gate.writing("create pod"):
        pass


def test_close_waits_for_the_writes_in_flight():
    gate = Gate()
    gate.open_until(float("inf"))
    entered, finish = threading.Event(), threading.Event()

    def write() -> None:
        with gate.writing("slow write"):
            entered.set()
            finish.wait(5)

    writer = threading.Thread(target=write)
    writer.start()
    entered.wait(5)
    assert gate.close(0.05) is False  # still in flight
    finish.set()
    writer.join(5)
    assert gate.close(1) is True


class MemoryLease:
    """One Lease with the API server's optimistic concurrency (a stale version is a 409)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.fail = False
        self.events: list[tuple[str, str]] = []  # (reason, message) posted on the Lease

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.fail:
            from streamingjob_operator.io.errors import TransientError

            raise TransientError("get Lease: connection refused")
        return None if self.lease is None else {**self.lease, "spec": dict(self.lease["spec"])}

    def write_lease(self, namespace, name, spec, resource_version):
        current = self.lease["metadata"]["resourceVersion"] if self.lease else None
        if resource_version != current:
            return None
        self.version += 1
        self.lease = {"metadata": {"resourceVersion": str(self.version)}, "spec": dict(spec)}
        return self.lease

    def post_lease_event(self, lease, type_, reason, message, *, timeout):
        self.events.append((reason, message))


def replica(store: MemoryLease, me: str, clock: Clock, lost: list[str]) -> Leadership:
    return Leadership(
        store,  # type: ignore[arg-type]
        namespace="ops",
        name="streamingjob-operator",
        identity=me,
        timing=TIMING,
        on_lost=lost.append,
        clock=clock,
    )


def test_one_replica_leads_the_other_takes_over_only_after_expiry():
    store, clock, lost = MemoryLease(), Clock(), []
    a, b = replica(store, "a", clock, lost), replica(store, "b", clock, lost)
    assert a._try() is None and a.gate.is_open()
    assert b._try() == TIMING.retry_period_seconds and not b.gate.is_open()
    clock.now += 14  # a silent: no renewal
    assert b._try() is not None  # not yet: b has seen this version for 14 s
    clock.now += 1
    assert not a.gate.is_open()  # a stopped acting at its renew deadline (10 s)...
    assert b._try() is None and b.gate.is_open()  # ...before b could take over (15 s)
    assert store.lease is not None and store.lease["spec"]["leaseTransitions"] == 1
    a._try()  # a's next look finds the Lease taken: its term ends at once
    assert lost == ["the Lease is held by b now"]
    assert store.events == [("LeaderLost", "a stopped leading: the Lease is held by b now")]


def test_a_renewal_moves_the_deadline_and_resets_the_others_wait():
    store, clock, lost = MemoryLease(), Clock(), []
    a, b = replica(store, "a", clock, lost), replica(store, "b", clock, lost)
    a._try()
    b._try()
    clock.now += 9
    assert a._try() is None  # renewed: open until now + 10
    clock.now += 9
    assert a.gate.is_open()
    assert b._try() is not None  # a new version 9 s ago: b waits again
    assert lost == []


def test_a_leader_that_cannot_renew_stops_acting_at_its_deadline():
    store, clock, lost = MemoryLease(), Clock(), []
    a = replica(store, "a", clock, lost)
    a._try()
    store.fail = True
    clock.now += 9.99
    assert a.gate.is_open()
    clock.now += 0.01
    assert not a.gate.is_open()
    with pytest.raises(NotLeading), a.gate.writing("delete pod ns/x"):
        pass


def test_release_clears_the_holder_so_the_next_replica_takes_over_at_once():
    store, clock, lost = MemoryLease(), Clock(), []
    a, b = replica(store, "a", clock, lost), replica(store, "b", clock, lost)
    assert a.acquire(threading.Event()) is True
    b._try()
    a.release(wait_seconds=1)
    assert not a.gate.is_open()
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] is None
    assert b._try() is None  # no expiry to wait for
    assert lost == []
    assert [reason for reason, _ in store.events] == ["LeaderElected", "LeaderReleased"]


def test_a_candidates_expiry_clock_starts_when_its_read_returns():
    """A read slow to come back may show a renewal made while it was under way: a candidate
    knows that version only from the moment the answer arrived (client-go's observedTime).
    Counted from the moment the read was sent, it would take over while the leader's last
    write through its gate may still land."""
    store, clock, lost = MemoryLease(), Clock(), []
    a, b = replica(store, "a", clock, lost), replica(store, "b", clock, lost)
    a._try()
    read = store.get_lease

    def slow_read(namespace: str, name: str) -> dict[str, Any] | None:
        store.get_lease = read  # type: ignore[method-assign]
        clock.now += 3  # b's request is under way...
        a._try()  # ...while a renews (its gate: open until now + 10)...
        return read(namespace, name)  # ...and the answer shows that renewal

    store.get_lease = slow_read  # type: ignore[method-assign]
    b._try()
    last_write_lands = a.gate.until + TIMING.request_timeout_seconds
    clock.now = last_write_lands - 0.01  # a silent since; its last write may be in flight
    assert b._try() is not None and not b.gate.is_open()
    clock.now = last_write_lands
    assert b._try() is None and b.gate.is_open()
