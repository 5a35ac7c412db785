"""Leader election over a Lease: which operator replica acts (the rules: election.py).

`Leadership.acquire` blocks until this replica holds the Lease; a thread then renews it every
retry period. Every write the operator makes passes `Gate` (k8s.KubeApi's write gate), open
only until the renew deadline of the latest successful renewal: a replica that cannot renew
refuses its own writes from that instant and ends its process (`on_lost`); a replica that
finds the Lease taken does the same at once. Nothing of a lost term is resumed: the process
restarts and waits as a candidate, as client-go's controllers do. Each change of leader is
an Event on the Lease: LeaderElected, LeaderLost (Warning), LeaderReleased.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from streamingjob_operator.io.errors import OperatorError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.rules.election import ElectionTiming, LeaseRecord, next_step, released

log = logging.getLogger(__name__)

EXIT_LEADERSHIP_LOST = 75  # EX_TEMPFAIL: the kubelet restarts the container as a candidate


class NotLeading(OperatorError):
    """A write refused: this replica does not (or no longer) hold the Lease."""


class Gate:
    """Open until a deadline on the monotonic clock; counts writes in flight so that a
    release waits for them. A write let through is told the seconds left before the deadline
    (its request timeout is cut to them: timing.gated_write_timeout)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = float("-inf")
        self._closed = False
        self._in_flight = 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[float]:
        with self._changed:
            now = self._clock()
            if self._closed or now >= self._until:
                raise NotLeading(f"{what}: refused, this replica does not lead")
            self._in_flight += 1
            left = self._until - now
        try:
            yield left
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def open_until(self, deadline: float) -> None:
        with self._changed:
            if not self._closed:
                self._until = max(self._until, deadline)

    @property
    def until(self) -> float:
        return self._until

    def is_open(self) -> bool:
        return not self._closed and self._clock() < self._until

    def close(self, wait_seconds: float) -> bool:
        """Refuse every later write; True once the writes in flight have ended."""
        with self._changed:
            self._closed = True
            return self._changed.wait_for(lambda: self._in_flight == 0, timeout=wait_seconds)


def _hard_exit(reason: str) -> None:
    log.critical("leadership lost (%s): stopping at once", reason)
    logging.shutdown()
    os._exit(EXIT_LEADERSHIP_LOST)


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
    )


def _spec(record: LeaseRecord) -> dict[str, Any]:
    return {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": record.duration_seconds,
        "leaseTransitions": record.transitions,
        "acquireTime": record.acquire_time,
        "renewTime": record.renew_time,
    }


class Leadership:
    """This replica's side of the election for one Lease."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: ElectionTiming,
        gate: Gate | None = None,
        on_lost: Callable[[str], None] = _hard_exit,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.identity, self.timing = identity, timing
        self.gate = gate or Gate(clock)
        self._on_lost, self._clock = on_lost, clock
        self._seen: tuple[str | None, float] = (None, 0.0)  # (resourceVersion, first seen)
        self._lease: dict[str, Any] | None = None  # as this replica last wrote it
        self._stop = threading.Event()
        self._lease_writes = threading.Lock()  # a renewal never races the release
        self._lost = threading.Event()
        self.leading_since: float | None = None

    # --- one attempt ------------------------------------------------------------------

    def _try(self) -> float | None:
        """One look at the Lease and the step it calls for: None when this replica holds it
        (the gate opened), else how long to wait before the next look."""
        sent = self._clock()
        lease = self.api.get_lease(self.namespace, self.name)
        # A version's expiry clock starts when the read that showed it returned (client-go's
        # observedTime): the holder may have renewed just before the read was served.
        returned = self._clock()
        observed = _record(lease) if lease is not None else None
        version = observed.resource_version if observed else None
        if version != self._seen[0]:
            self._seen = (version, returned)
        if observed is not None and self._lease is not None and observed.holder != self.identity:
            self._lose(f"the Lease is held by {observed.holder or 'nobody'} now")
            return self.timing.retry_period_seconds
        step = next_step(
            observed,
            me=self.identity,
            unchanged_for=returned - self._seen[1],
            now=datetime.now(UTC),
            timing=self.timing,
        )
        if step.action == "wait":
            return step.seconds
        assert step.record is not None
        written = self.api.write_lease(
            self.namespace, self.name, _spec(step.record), step.record.resource_version
        )
        if written is None:  # another replica wrote first: look again
            return self.timing.retry_period_seconds
        self._lease = written
        self.gate.open_until(sent + self.timing.renew_deadline_seconds)
        return None

    def _lose(self, reason: str) -> None:
        self.gate.close(0)
        if not self._lost.is_set():
            self._lost.set()
            self._event("Warning", "LeaderLost", f"{self.identity} stopped leading: {reason}")
            self._on_lost(reason)

    def _event(self, type_: str, reason: str, message: str, timeout: float | None = None) -> None:
        """An Event on the Lease, so that a change of leader shows beside the jobs' Events.
        Bounded by a renew deadline unless told: a replica that lost or released the Lease
        writes nothing else and exits next, and a loaded API server took longer than a retry
        period (CI runs 16 and 26 lost the Event)."""
        if self._lease is not None:
            self.api.post_lease_event(
                self._lease,
                type_,
                reason,
                message,
                timeout=timeout or self.timing.renew_deadline_seconds,
            )

    # --- the loops --------------------------------------------------------------------

    def acquire(self, stop: threading.Event) -> bool:
        """Blocks until this replica leads (True) or `stop` is set (False)."""
        log.info("%s waits to lead (Lease %s/%s)", self.identity, self.namespace, self.name)
        while not stop.is_set():
            try:
                wait = self._try()
            except OperatorError as exc:
                log.warning("leader election: %s", exc)
                wait = self.timing.retry_period_seconds
            if wait is None:
                self.leading_since = self._clock()
                log.info("%s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
                threading.Thread(target=self._renew, name="lease-renew", daemon=True).start()
                threading.Thread(target=self._watchdog, name="lease-watchdog", daemon=True).start()
                # one retry period at most: the new leader's work waits for it
                timeout = self.timing.retry_period_seconds
                self._event("Normal", "LeaderElected", f"{self.identity} leads", timeout)
                return True
            stop.wait(wait)
        return False

    def _renew(self) -> None:
        while not self._stop.wait(self.timing.retry_period_seconds):
            if self._lost.is_set():
                return
            try:
                with self._lease_writes:
                    if self._stop.is_set():
                        return
                    taken = self._try() is not None
                if taken:  # lost the race for the Lease: someone took it
                    self._lose("the Lease changed hands")
                    return
            except OperatorError as exc:  # the deadline decides; keep trying until then
                log.warning("renewing the Lease: %s", exc)

    def _watchdog(self) -> None:
        """Ends the term the instant the renew deadline passes without a renewal."""
        while not self._stop.is_set() and not self._lost.is_set():
            left = self.gate.until - self._clock()
            if left <= 0:
                self._lose(
                    f"no renewal within renewDeadlineSeconds={self.timing.renew_deadline_seconds:g}"
                )
                return
            self._stop.wait(left)

    def release(self, wait_seconds: float) -> None:
        """Give the Lease up on shutdown: refuse new writes, let those in flight end, then
        clear the holder so that a waiting replica takes over without waiting for expiry."""
        self._stop.set()
        self.gate.close(wait_seconds)
        with self._lease_writes:
            if self._lease is None or self._lost.is_set():
                return
            held = _record(self._lease)
            try:
                written = self.api.write_lease(
                    self.namespace,
                    self.name,
                    _spec(released(held, datetime.now(UTC))),
                    held.resource_version,
                )
            except OperatorError as exc:  # it expires by itself
                log.warning("releasing the Lease: %s", exc)
                return
        if written is None:
            log.warning("the Lease changed before its release: it expires by itself")
        else:
            log.info("%s released the Lease", self.identity)
            self._lease = written
            self._event("Normal", "LeaderReleased", f"{self.identity} released the Lease")
