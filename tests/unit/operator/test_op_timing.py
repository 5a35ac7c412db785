"""The timing rules (timing.py): every duration that must fit inside another is refused at
start-up when it does not, naming both settings and the rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from streamingjob_operator import timing
from streamingjob_operator.settings import OperatorSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("grace", [0.5, 10, 19.9])
def test_a_node_grace_shorter_than_two_kubelet_renewals_is_refused(grace):
    with pytest.raises(ValidationError) as refused:
        OperatorSettings(node_lost_grace_seconds=grace)
    message = str(refused.value)
    assert f"nodeLostGraceSeconds={grace:g}" in message
    assert "kubeletLeaseRenewSeconds=10" in message
    assert "only after its node has been silent (semantics rule 10)" in message


def test_a_short_grace_fits_a_cluster_whose_kubelets_renew_more_often():
    settings = OperatorSettings(node_lost_grace_seconds=2, kubelet_lease_renew_seconds=1)
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
    from spark_app import runner

    defaults = runner.parse_args(["--manifest", "m"])
    assert defaults.stop_timeout == timing.DRIVER_STOP.stop_deadline_seconds
    assert defaults.final_commit_timeout == timing.DRIVER_STOP.final_commit_seconds
