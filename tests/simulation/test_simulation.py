"""The simulation tier (simulation/, docs/semantics.md "The simulation"): histories of user
acts and faults against the operator's real reconcile, every invariant checked after every
event. CI runs at least 200,000 steps; `make simulate SEEDS=…` and `make simulate-soak` run
more."""

from __future__ import annotations

import io
import time

import pytest

from simulation.history import Act
from simulation.search import explore, run, shrink, story

pytestmark = pytest.mark.unit

CI_STEPS = 200_000


@pytest.mark.timeout(900)  # about 1 min on two idle cores; CI runs it beside its other tiers
def test_every_history_keeps_every_invariant():
    """Seeds from 0 up, in batches on every core, until 200,000 steps ran: no violation."""
    started, steps, histories, out = time.monotonic(), 0, 0, io.StringIO()
    first = 0
    while steps < CI_STEPS:
        done, ran, broken = explore(range(first, first + 16), out=out)
        histories, steps, first = histories + done, steps + ran, first + 16
        assert not broken, out.getvalue()
    took = time.monotonic() - started
    print(
        f"\n{histories} histories, {steps} steps, 0 violations "
        f"({took:.1f} s, {steps / took:.0f} steps/s)"
    )


def test_a_seed_replays_exactly():
    a, b = run(3), run(3)
    assert (a.steps, a.trace) == (b.steps, b.trace)


def test_the_simulation_sees_a_reading_driver_forced_out(monkeypatch):
    """A world where the operator force-deletes every pod it deletes (the fencing rule
    broken on purpose): the simulation finds it and shrinks the history to a few acts."""
    from simulation import cluster

    original = cluster.SimApi.delete_pod

    def always_force(self, namespace, name, *, force=False):
        return original(self, namespace, name, force=True)

    monkeypatch.setattr(cluster.SimApi, "delete_pod", always_force)
    acts = [Act(0.0, "create"), Act(5.0, "produce", 3), Act(30.0, "redeploy")]
    outcome = run(1, acts)
    assert outcome.violations and outcome.violations[0].rule in ("unfenced", "two readers")
    small = shrink(outcome)
    assert len(small.plan) <= 3
    assert "broken:" in story(small)
