"""docs/argocd/health.lua, the Argo CD health check, run by a real Lua 5.1 interpreter (Argo CD's
gopher-lua speaks 5.1) against statuses the operator writes: each is produced by the pure status
path (decide → set_conditions → status_body), as reconcile.py records it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import pytest

from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND, StreamingJobStatus
from streamingjob_operator.rules.decide import invalid
from streamingjob_operator.rules.status import set_conditions, status_body
from tests.unit.operator.helpers_operator import (
    BASE_SPEC,
    CFG,
    NAME,
    NS,
    T0,
    driver,
    executor,
    exited,
    later,
    launched,
    make_spec,
    run,
)

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "argocd" / "health.lua"


def health(job: dict[str, Any]) -> tuple[str, str]:
    """What Argo CD shows: the script's hs.status and hs.message for `obj` = the job."""
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(job, recursive=True)
    result = lua.execute(SCRIPT.read_text())
    return result["status"], result["message"]


def job(status: StreamingJobStatus | None, generation: int = 1, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": NAME, "namespace": NS, "generation": generation},
        "spec": {**BASE_SPEC, **spec},
    }
    if status is not None:
        obj["status"] = status_body(status)
    return obj


def recorded(status: StreamingJobStatus, generation: int = 1) -> StreamingJobStatus:
    """The status as reconcile.py writes it: conditions set for the generation it acted on."""
    set_conditions(status, generation, T0)
    return status


def test_running_and_ready_is_healthy():
    st = recorded(launched(make_spec()))
    assert health(job(st)) == ("Healthy", "Running: driver orders-e1-a1-driver running")


def test_a_generation_the_operator_has_not_seen_is_progressing():
    st = recorded(launched(make_spec()), generation=1)
    assert health(job(st, generation=2)) == (
        "Progressing",
        "Waiting for the operator to observe generation 2",
    )


def test_no_status_yet_is_progressing():
    assert health(job(None)) == ("Progressing", "Waiting for the operator")


def test_launching_is_progressing():
    st = recorded(run(make_spec(), StreamingJobStatus()).status)
    assert st.phase == "Launching"
    assert health(job(st)) == ("Progressing", f"Launching: {st.message}")


def test_restarting_after_a_failure_is_progressing_and_says_why():
    spec = make_spec()
    st = launched(spec)
    st = recorded(run(spec, st, [exited(st.driver_pod, 1)], later(10)).status)
    assert st.phase == "Restarting"
    assert health(job(st)) == (
        "Progressing",
        "Restarting: 1 consecutive failure(s), last: DriverFailed (driver pod "
        "orders-e1-a1-driver exited 1; relaunching attempt 2 in 10s (restore))",
    )


def test_failed_is_degraded():
    spec = make_spec(restartPolicy__type="Never")
    st = launched(spec)
    st = recorded(run(spec, st, [exited(st.driver_pod, 1)], later(10)).status)
    assert st.phase == "Failed"
    assert health(job(st, restartPolicy={"type": "Never"})) == ("Degraded", f"Failed: {st.message}")


def test_invalid_is_degraded():
    message = "spec.checkpoint.location: must be a URI; set s3a://bucket/path"
    st = recorded(invalid(StreamingJobStatus(), message, T0, CFG).status)
    assert health(job(st)) == ("Degraded", f"Invalid: {message}")


def test_suspended_is_suspended():
    spec = make_spec()
    st = launched(spec)
    suspended = make_spec(suspend=True)
    pods = [driver(st.driver_pod), executor("e-1", st.driver_pod)]
    st = run(suspended, st, pods, later(10)).status
    st = recorded(run(suspended, st, [], later(11)).status)
    assert st.phase == "Suspended"
    assert health(job(st, suspend=True)) == (
        "Suspended",
        "Suspended: suspended; the epoch and checkpoint are kept",
    )


def test_an_available_now_job_that_completed_is_healthy():
    # its Ready is False (nothing runs), but Completed is where such a job is meant to end
    spec = make_spec(restartPolicy__type="OnFailure", job__trigger={"availableNow": True})
    st = launched(spec)
    st = recorded(run(spec, st, [exited(st.driver_pod, 0)], later(10)).status)
    assert st.phase == "Completed"
    assert health(job(st)) == ("Healthy", f"Completed: {st.message}")
