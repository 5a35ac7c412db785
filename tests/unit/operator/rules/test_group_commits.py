"""The runner's offset commits to the consumer group (report `commits`): failing ones never
fail the job (semantics rule 3), and show in status (condition GroupCommitFailing naming the
group and the count) and a Warning Event each time more fail; the condition clears once a
commit succeeds again."""

from __future__ import annotations

import json

import pytest

from streamingjob_operator.rules.observed import parse_report
from streamingjob_operator.rules.status import set_conditions
from tests.unit.operator.helpers_operator import driver, exited, later, launched, make_spec, run

pytestmark = pytest.mark.unit


def _report(failed: int, succeeded: int, attempt: int = 1):
    commits = {"enabled": True, "by": "runner", "failed": failed, "succeeded": succeeded}
    raw = {"epoch": 1, "attempt": attempt, "commits": commits}
    return parse_report({"data": {"report.json": json.dumps(raw)}})


def _condition(st, second: float):
    set_conditions(st, 1, later(second))
    return next((c for c in st.conditions if c.type == "GroupCommitFailing"), None)


def test_failing_commits_are_a_condition_and_an_event_and_clear_when_commits_succeed():
    spec = make_spec()
    group = spec.job.source.group_id
    st = launched(spec)
    pods = [driver(st.driver_pod)]
    d = run(spec, st, pods, later(1), report=_report(0, 5))
    assert d.events == [] and _condition(d.status, 1) is None  # nothing to say yet

    d = run(spec, d.status, pods, later(2), report=_report(3, 5))
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "GroupCommitFailing")]
    assert group in d.events[0].message and "3 offset commits" in d.events[0].message
    assert d.action == "none" and d.status.phase == "Running"  # never fails the job
    failing = _condition(d.status, 2)
    assert failing is not None and (failing.status, failing.reason) == (
        "True",
        "GroupCommitFailing",
    )
    assert group in failing.message and "3" in failing.message
    degraded = next(c for c in d.status.conditions if c.type == "Degraded")
    assert degraded.status == "False"

    assert run(spec, d.status, pods, later(3), report=_report(3, 5)).events == []  # no news
    d = run(spec, d.status, pods, later(4), report=_report(4, 5))
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "GroupCommitFailing")]
    assert "1 more" in d.events[0].message

    d = run(spec, d.status, pods, later(5), report=_report(4, 6))  # a commit went through
    assert [(e.type, e.reason) for e in d.events] == [("Normal", "GroupCommitsRecovered")]
    cleared = _condition(d.status, 5)
    assert cleared is not None and (cleared.status, cleared.reason) == ("False", "CommitsSucceeded")


def test_a_relaunch_counts_its_own_failures_and_keeps_the_condition_until_a_commit_succeeds():
    spec = make_spec(restartPolicy__maxRestarts=10)
    st = launched(spec)
    d = run(spec, st, [driver(st.driver_pod)], later(1), report=_report(7, 0))
    d = run(spec, d.status, [exited(st.driver_pod, 1)], later(2))  # relaunch: attempt 2
    assert d.status.attempt == 2
    d = run(spec, d.status, [], later(20))
    d = run(spec, d.status, [driver(d.status.driver_pod)], later(21))
    d = run(spec, d.status, [driver(d.status.driver_pod)], later(22), report=_report(1, 0, 2))
    assert ("Warning", "GroupCommitFailing") in [(e.type, e.reason) for e in d.events]
    assert _condition(d.status, 22).status == "True"  # type: ignore[union-attr]
