"""The timing rules (timing.py): every duration that must fit inside another is refused at
start-up when it does not, naming both settings and the rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streamingjob_operator.rules import timing
from streamingjob_operator.settings import OperatorSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("grace", [0.5, 10, 20, 34.9])
def test_a_node_grace_shorter_than_two_renewals_beyond_a_quiet_window_is_refused(grace):
    with pytest.raises(ValidationError) as refused:
        OperatorSettings(node_lost_grace_seconds=grace)
    message = str(refused.value)
    assert f"nodeLostGraceSeconds={grace:g}" in message
    assert "kubeletLeaseRenewSeconds=10" in message
    assert "only after its node has been silent (semantics rule 10)" in message


def test_a_short_grace_fits_a_cluster_whose_kubelets_renew_more_often():
    settings = OperatorSettings(node_lost_grace_seconds=3.5, kubelet_lease_renew_seconds=1)
    assert settings.node_silent_seconds == 2


def test_15_12_2_is_refused_naming_every_election_setting():
    """15 < 12 + min(30, 12 / 2): a write that passed the gate at the deadline could land
    after another replica took over."""
    with pytest.raises(ValidationError) as refused:
        OperatorSettings(
            lease_duration_seconds=15, renew_deadline_seconds=12, retry_period_seconds=2
        )
    message = str(refused.value)
    for named in (
        "leaseDurationSeconds=15",
        "renewDeadlineSeconds=12",
        "retryPeriodSeconds=2",
        "apiTimeoutSeconds=30",
        "request timeout",
    ):
        assert named in message


def test_the_lease_client_timeout_decides_whether_the_triple_fits():
    assert (
        OperatorSettings(
            lease_duration_seconds=13, renew_deadline_seconds=12, api_timeout_seconds=1
        ).election_timing.request_timeout_seconds
        == 1
    )
    with pytest.raises(ValidationError, match="apiTimeoutSeconds=2"):
        OperatorSettings(
            lease_duration_seconds=13, renew_deadline_seconds=12, api_timeout_seconds=2
        )


def test_the_lease_carries_a_duration_never_shorter_than_the_setting():
    assert timing.lease_seconds(3.2) == 4 and timing.lease_seconds(0.2) == 1


def test_the_driver_pods_grace_is_derived_from_the_runners_stop_and_final_commit():
    stop = timing.DRIVER_STOP
    assert stop.termination_grace_seconds == 30
    assert (
        stop.stop_deadline_seconds + stop.final_commit_seconds + stop.exit_seconds
        <= stop.termination_grace_seconds
    )
    assert timing.DriverStop(stop_deadline_seconds=55.5).termination_grace_seconds == 61


def test_the_runners_stop_timings_are_the_ones_the_pods_grace_is_made_of():
    """The operator passes no stop timings (an older job image would not know the options):
    the runner's defaults are timing.DRIVER_STOP's."""
    from spark_app.runner import runner

    defaults = runner.parse_args(["--manifest", "m"])
    assert defaults.stop_timeout == timing.DRIVER_STOP.stop_deadline_seconds
    assert defaults.final_commit_timeout == timing.DRIVER_STOP.final_commit_seconds


@pytest.mark.parametrize(("left", "expected"), [(3.0, 3.0), (29.5, 29.5), (100.0, 30.0)])
def test_a_gated_write_times_out_no_later_than_the_renew_deadline(left, expected):
    """A job write that passed the gate with `left` seconds before the leader's renew deadline
    waits at most that long: never past the instant leadership could have moved."""
    assert timing.gated_write_timeout(30.0, left) == expected


def test_the_api_clients_gated_writes_get_the_time_left_of_the_leaders_term():
    from kubernetes import client

    from streamingjob_operator.io.k8s import KubeApi
    from streamingjob_operator.leadership import Gate

    now = [1000.0]
    gate = Gate(lambda: now[0])
    gate.open_until(1010.0)  # the renew deadline of the latest renewal
    api = KubeApi(client.Configuration(), timeout=30, write_gate=gate)
    seen: dict[str, float] = {}

    def create_namespaced_pod(*_args, _request_timeout: float, **_kw) -> None:
        seen["write"] = _request_timeout

    def read_namespaced_pod(*_args, _request_timeout: float, **_kw) -> None:
        seen["read"] = _request_timeout

    now[0] = 1007.0
    api._call("create pod ns/p", create_namespaced_pod)
    api._call("get pod ns/p", read_namespaced_pod)
    assert seen == {"write": pytest.approx(3.0), "read": 30}  # reads pass no gate
    now[0] = 970.0  # 40 s left
    api._call("create pod ns/p", create_namespaced_pod)
    assert seen["write"] == 30  # the API timeout when the deadline is further
    api.close()
