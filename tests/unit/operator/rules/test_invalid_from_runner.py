"""The runner's refusal (it refused the job's input: spec.job.sql, spec.job.transform): exit 2
and a termination message the runner marks as its refusal (runner.refuse). It holds the job, as
the operator's own InvalidSpec does: phase Invalid with the runner's message, an Event, the
ended driver removed and none relaunched, no failure counted; a spec change launches again.
Any other exit 2 (a wrong image's Python, an older runner's argparse error) is an ordinary
failure, restarted with backoff. Exit 6 (Kafka away, a topic missing at the start) is a
restart with backoff too."""

from __future__ import annotations

import pytest

from spark_app.api.exit_codes import REFUSED_MARK
from spark_app.runner import preflight
from streamingjob_operator.rules.observed import Termination
from streamingjob_operator.rules.status import set_conditions
from tests.unit.operator.helpers_operator import driver, later, launched, make_spec, run

pytestmark = pytest.mark.unit

SAID = (
    "spec.job.sql: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function "
    "parameter with name `valu` cannot be resolved. SQLSTATE: 42703; line 1 pos 26"
)
BAD, GOOD = "SELECT * FROM source WHERE valu > 1", "SELECT * FROM source WHERE value > 1"
REFUSED = REFUSED_MARK + SAID  # the termination message of runner.refuse


def _degraded(status):
    set_conditions(status, 2, later(1))
    return next(c for c in status.conditions if c.type == "Degraded")


def test_exit_2_is_invalid_spec_with_the_runners_message_and_no_relaunch():
    spec = make_spec(job__sql=BAD)
    st = launched(spec)
    ended = driver(st.driver_pod, "Failed", termination=Termination(2, "Error", REFUSED))
    d = run(spec, st, [ended], later(1))
    assert d.status.phase == "Invalid" and d.action == "none" and d.restart_reason is None
    assert SAID in d.status.message and st.driver_pod in d.status.message
    assert REFUSED_MARK not in d.status.message  # the mark is for the operator, not people
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidSpec")]
    assert SAID in d.events[0].message
    assert d.status.history[-1].reason == "InvalidSpec"
    assert (d.status.consecutive_failures, d.status.restarts) == (0, 0)
    degraded = _degraded(d.status)
    assert degraded.reason == "InvalidSpec" and SAID in degraded.message

    held = run(spec, d.status, [ended], later(2))  # the ended driver goes, nothing launches
    assert held.action == "delete" and held.delete + held.force_delete == (st.driver_pod,)
    assert held.status.phase == "Invalid" and not held.events
    for t in (3, 600):  # however long it waits: no relaunch, no new Event
        held = run(spec, held.status, [], later(t))
        assert held.action == "none" and not held.events and held.status.phase == "Invalid"
        assert (held.status.epoch, held.status.attempt) == (1, 1)


@pytest.mark.parametrize(("mode", "target"), [("stateless", (2, 1)), ("last-state", (1, 2))])
def test_a_spec_change_launches_again(mode, target):
    spec = make_spec(job__sql=BAD, upgradeMode=mode)
    st = launched(spec)
    ended = driver(st.driver_pod, "Failed", termination=Termination(2, "Error", REFUSED))
    held = run(spec, run(spec, st, [ended], later(1)).status, [], later(2)).status
    fixed = make_spec(job__sql=GOOD, upgradeMode=mode)
    d = run(fixed, held, [], later(3))
    assert d.status.phase == "Launching" and d.status.launch_state == "Pending"
    assert (d.status.epoch, d.status.attempt) == target
    assert run(fixed, d.status, [], later(3)).action == "launch"


def test_the_refusal_without_a_message_still_says_where_to_look():
    spec = make_spec(job__sql=BAD)
    st = launched(spec)
    ended = driver(st.driver_pod, "Failed", termination=Termination(2, "Error", REFUSED_MARK))
    d = run(spec, st, [ended], later(1))
    assert d.status.phase == "Invalid" and "the runner refused spec.job" in d.status.message


def test_the_runners_refusal_writes_the_mark_the_operator_holds_as_invalid(tmp_path, monkeypatch):
    log = tmp_path / "termination-log"
    log.touch()  # the kubelet creates it
    monkeypatch.setattr(preflight, "TERMINATION_LOG", log)
    assert preflight.refuse(SAID) == 2
    spec = make_spec(job__sql=BAD)
    st = launched(spec)
    ended = driver(st.driver_pod, "Failed", termination=Termination(2, "Error", log.read_text()))
    d = run(spec, st, [ended], later(1))
    assert d.status.phase == "Invalid" and SAID in d.status.message


@pytest.mark.parametrize(
    "said",
    [
        "",  # a wrong image's Python: nothing in the termination log
        "usage: run_job.py [-h] --manifest MANIFEST\n"
        "run_job.py: error: unrecognized arguments: --go-configmap",  # an older runner
        SAID,  # the runner's words without its mark: not its refusal
    ],
)
def test_another_exit_2_is_an_ordinary_failure_restarted_with_backoff(said):
    spec = make_spec(job__sql=GOOD, restartPolicy__maxRestarts=10)
    st = launched(spec)
    ended = driver(st.driver_pod, "Failed", termination=Termination(2, "Error", said))
    d = run(spec, st, [ended], later(1))
    assert d.status.phase == "Restarting" and d.restart_reason == "DriverFailed"
    assert (d.status.epoch, d.status.attempt) == (1, 2) and d.requeue_after == 10
    assert ("Warning", "DriverFailed") in [(e.type, e.reason) for e in d.events]
    assert "exited 2" in d.status.message and "not the runner's refusal" in d.status.message
    assert _degraded(d.status).reason == "DriverFailed"


def test_exit_6_kafka_away_at_the_start_restarts_with_backoff():
    spec = make_spec(restartPolicy__maxRestarts=10)
    st = launched(spec)
    said = "spec.job.source.subscribe: topic(s) orders not found"
    ended = driver(st.driver_pod, "Failed", termination=Termination(6, "Error", said))
    d = run(spec, st, [ended], later(1))
    assert d.restart_reason == "KafkaUnavailable" and d.requeue_after == 10
    assert (d.status.epoch, d.status.attempt) == (1, 2) and d.status.phase == "Restarting"
    degraded = _degraded(d.status)
    assert degraded.reason == "KafkaUnavailable" and said in degraded.message
