"""Every duration that must fit inside another, checked in one place (docs/operator/nodes.md,
"Timing rules"). A violation is a `TimingError` naming both settings and the rule; the
settings (settings.py) check them at start-up and the chart's templates ask the same of its
values (templates/_helpers.tpl, "streamingjob-operator.timing").

The rules:
- nodeLostGraceSeconds >= 3.5 * kubeletLeaseRenewSeconds: a pod is lost only once its node
  has been silent (two missed lease renewals) beyond what a silence of the control plane
  explains. When no kubelet at all renews for the quiet window (`watch_quiet_seconds`, 1.5
  renewals: a control-plane outage, a stalled watch) the view is distrusted, and when
  renewals come back every node counts from then; a shorter silence of the control plane
  adds at most the quiet window to a healthy node's two renewals (found by the simulation).
- a job write through the leader's gate waits at most until the renew deadline of the latest
  renewal (`gated_write_timeout`: apiTimeoutSeconds, cut to the time left): the operator's
  API timeout (30 s) would let a write that passed the gate just before the deadline land
  long after another replica could lead.
- leaseDurationSeconds >= renewDeadlineSeconds + the Lease client's request timeout: a
  candidate acts only after the Lease's duration, which covers the leader's term up to its
  deadline and, beyond it, one request timeout of margin for a request the API server took
  in just before its client gave up.
- renewDeadlineSeconds > retryPeriodSeconds: a leader retries its renewal before it gives up.
- the runner's stop deadline + its final commit + its exit <= the driver pod's termination
  grace (derived from them: `DriverStop`), so the kubelet's SIGKILL never cuts the commit.
- each Kafka request of the final commit gets what is left of --final-commit-timeout (one
  deadline for the whole commit: `GroupOffsets.catch_up`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


class TimingError(ValueError):
    """Two durations that do not fit: the message names both settings and the rule."""


# --- nodes ----------------------------------------------------------------------------------

# The kubelet renews its node's lease every nodeLeaseDurationSeconds * 0.25 = 10 s (defaults).
KUBELET_LEASE_RENEW_SECONDS = 10.0
MISSED_RENEWALS = 2  # a node this many renewals late is silent


def node_silent_seconds(kubelet_lease_renew_seconds: float) -> float:
    """How long without a lease renewal before a node counts as silent."""
    return MISSED_RENEWALS * kubelet_lease_renew_seconds


QUIET_RENEWALS = 1.5


def watch_quiet_seconds(kubelet_lease_renew_seconds: float) -> float:
    """No renewal of any node for this long: the watch (or the API server), not the nodes, is
    suspect (nodes.NodeTracker). Longer than one interval, so one live kubelet among dead
    nodes keeps the view trusted."""
    return QUIET_RENEWALS * kubelet_lease_renew_seconds


def check_node_grace(node_lost_grace_seconds: float, kubelet_lease_renew_seconds: float) -> None:
    renew = kubelet_lease_renew_seconds
    least = node_silent_seconds(renew) + watch_quiet_seconds(renew)
    if node_lost_grace_seconds < least:
        raise TimingError(
            f"nodeLostGraceSeconds={node_lost_grace_seconds:g} is shorter than "
            f"{least / renew:g} * kubeletLeaseRenewSeconds={renew:g} (= {least:g}): a pod may "
            "be declared lost only after its node has been silent (semantics rule 10), two "
            "renewals beyond a silence of the control plane itself; set nodeLostGraceSeconds "
            f"to at least {least:g}"
        )


# --- leader election ------------------------------------------------------------------------


def lease_client_timeout(api_timeout_seconds: float, renew_deadline_seconds: float) -> float:
    """The request timeout of the Lease's own client: a renewal must answer well within the
    deadline, or it is no renewal."""
    return min(api_timeout_seconds, renew_deadline_seconds / 2)


def gated_write_timeout(api_timeout_seconds: float, left_seconds: float) -> float:
    """The request timeout of a write through the leader's gate that opened `left_seconds`
    before the renew deadline: never past the deadline, when leadership may move (the gate
    refuses writes from the deadline on; this bounds those already through it)."""
    return max(min(api_timeout_seconds, left_seconds), 0.0)


def lease_seconds(lease_duration_seconds: float) -> int:
    """leaseDurationSeconds as written into the Lease (an integer): never shorter."""
    return max(1, math.ceil(lease_duration_seconds))


def check_election(
    lease_duration_seconds: float,
    renew_deadline_seconds: float,
    retry_period_seconds: float,
    api_timeout_seconds: float,
) -> None:
    timeout = lease_client_timeout(api_timeout_seconds, renew_deadline_seconds)
    names = (
        f"leaseDurationSeconds={lease_duration_seconds:g}, "
        f"renewDeadlineSeconds={renew_deadline_seconds:g}, "
        f"retryPeriodSeconds={retry_period_seconds:g}, apiTimeoutSeconds={api_timeout_seconds:g}"
    )
    if not renew_deadline_seconds > retry_period_seconds:
        raise TimingError(
            f"leader election needs renewDeadlineSeconds > retryPeriodSeconds ({names}): "
            "a leader retries its renewal before it gives up"
        )
    if lease_duration_seconds < renew_deadline_seconds + timeout:
        raise TimingError(
            "leader election needs leaseDurationSeconds >= renewDeadlineSeconds + the Lease "
            f"client's request timeout min(apiTimeoutSeconds, renewDeadlineSeconds / 2) = "
            f"{renew_deadline_seconds:g} + {timeout:g} ({names}): a leader's last write may "
            "land up to one request timeout after its deadline, and no other replica may act "
            "before; raise leaseDurationSeconds or lower renewDeadlineSeconds"
        )


# --- the driver's graceful stop -------------------------------------------------------------


@dataclass(frozen=True)
class DriverStop:
    """The runner's graceful stop inside the driver pod's termination grace period: the
    batch in flight gets `stop_deadline_seconds` (the runner's --stop-timeout), then the last
    durable batch's offsets are committed within `final_commit_seconds`
    (--final-commit-timeout: one deadline for all of the commit's Kafka requests), then the
    JVM exits (`exit_seconds`). The pod's grace is derived from them, so it always fits. The
    runner's defaults are these numbers (a unit test checks): the operator passes neither
    option, so a job image of an older release still starts."""

    stop_deadline_seconds: float = 25.0
    final_commit_seconds: float = 4.0
    exit_seconds: float = 1.0

    @property
    def termination_grace_seconds(self) -> int:
        """The driver pod's terminationGracePeriodSeconds."""
        return math.ceil(self.stop_deadline_seconds + self.final_commit_seconds + self.exit_seconds)


DRIVER_STOP = DriverStop()
