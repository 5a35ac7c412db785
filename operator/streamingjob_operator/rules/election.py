"""Leader election rules (pure): what a replica does next with the operator's Lease.

One replica acts; the others wait. The Lease (`coordination.k8s.io/v1`) names its holder.
Nobody trusts another machine's clock: a Lease held by someone else expires when this
replica has seen it unchanged (same resourceVersion) for its leaseDurationSeconds, timed on
this replica's own monotonic clock. A released Lease (no holder) is free at once.

The leader renews every retry period. It may act only until `renew_sent + renew_deadline`
of its latest successful renewal (the time the request left, so the server's answer can
only shorten the window); a write that passed its gate is waited for only until then
(timing.gated_write_timeout), and one request timeout of the Lease client past it is the
margin for a request the server took in just before. A candidate's clock for a version
starts when the read that showed it returned (as client-go's observedTime). With
lease_duration ≥ renew_deadline + the request timeout (timing.check_election), the leader
has stopped, and its last write landed, before anyone else can see the Lease expire.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamingjob_operator.rules import timing as rules


class ElectionTiming(BaseModel):
    """The three durations of client-go's leader election, with its defaults, and the API
    timeout that bounds the Lease client's requests."""

    model_config = ConfigDict(frozen=True)

    lease_duration_seconds: float = Field(default=15.0, gt=0)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_period_seconds: float = Field(default=2.0, gt=0)
    api_timeout_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> ElectionTiming:
        rules.check_election(
            self.lease_duration_seconds,
            self.renew_deadline_seconds,
            self.retry_period_seconds,
            self.api_timeout_seconds,
        )
        return self

    @property
    def request_timeout_seconds(self) -> float:
        """The Lease client's request timeout."""
        return rules.lease_client_timeout(self.api_timeout_seconds, self.renew_deadline_seconds)


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec (and its resourceVersion)."""

    holder: str  # "" = released
    duration_seconds: int
    transitions: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class Step:
    """`create`/`update`: write `record` (an update carries the observed resourceVersion, so a
    concurrent writer makes it fail); `wait`: not ours, look again after `seconds`."""

    action: Literal["create", "update", "wait"]
    record: LeaseRecord | None = None
    seconds: float = 0.0


def next_step(
    observed: LeaseRecord | None,
    *,
    me: str,
    unchanged_for: float,
    now: datetime,
    timing: ElectionTiming,
) -> Step:
    """What replica `me` does with the Lease as observed (None: no Lease yet), given how long
    it has seen that version unchanged."""
    stamp = now.isoformat(timespec="microseconds")
    duration = rules.lease_seconds(timing.lease_duration_seconds)
    if observed is None:
        return Step("create", LeaseRecord(me, duration, 0, stamp, stamp))
    if observed.holder == me:  # renew: the acquire time and transition count stay
        return Step("update", replace(observed, duration_seconds=duration, renew_time=stamp))
    left = observed.duration_seconds - unchanged_for
    if observed.holder and left > 0:
        return Step("wait", seconds=min(timing.retry_period_seconds, left))
    taken = LeaseRecord(me, duration, observed.transitions + 1, stamp, stamp)
    return Step("update", replace(taken, resource_version=observed.resource_version))


def released(record: LeaseRecord, now: datetime) -> LeaseRecord:
    """The Lease given up on shutdown: no holder, so a waiting replica takes it at once."""
    stamp = now.isoformat(timespec="microseconds")
    return replace(record, holder="", duration_seconds=1, renew_time=stamp)
