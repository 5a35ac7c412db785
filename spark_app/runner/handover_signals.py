"""The driver side of the warm hand-over (issue 25): the waiting runner's two signals.

A runner started with `--wait-for-go` warms up, says so in `handover.json` and then waits for
a `go.json` naming its own pod, epoch and attempt before it reads anything. `handover.json`
goes to the job's report ConfigMap (`--report-configmap`: a JSON merge patch of that key
only, since the running driver keeps writing `report.json`); `go.json` is polled (GET) from
the job's go ConfigMap (`--go-configmap`), which the operator writes and drivers may only
read: the go fences the running driver, so no driver can give one. Without
`--go-configmap` (an operator of an earlier release) the go is in the report ConfigMap. For
local runs and tests the two keys are files in `--handover-dir`. docs/source.md "Warm
hand-over (driver side)" describes the protocol from the runner's side.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spark_app.runner.report import ApiAccess, ConfigMapPublisher, now_iso

log = logging.getLogger(__name__)

HANDOVER_KEY, GO_KEY = "handover.json", "go.json"
POLL_S = 0.25  # how often the go is looked for (a GET each: ~4 a second, while waiting only)
REPUBLISH_S = 2.0  # a handover.json that did not arrive is sent again this often (logged each)
POD_NAME_ENV = "STREAMJOB_POD_NAME"


@dataclass(frozen=True)
class Identity:
    """Who this driver is: the go must name exactly this."""

    pod: str
    epoch: int
    attempt: int

    @classmethod
    def of_this_pod(cls, epoch: int, attempt: int) -> Identity:
        """The pod's name from STREAMJOB_POD_NAME, else the hostname (a pod's, by default)."""
        return cls(os.environ.get(POD_NAME_ENV) or socket.gethostname(), epoch, attempt)


class GoInvalid(ValueError):
    """A go.json that is not a go: it is ignored (and logged once), never obeyed."""


def parse_go(text: str) -> Identity:
    """The driver a go.json names: {"pod": str, "epoch": int, "attempt": int, "time": str}
    ("time" is for people and optional here). GoInvalid names what is wrong."""
    try:
        go = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoInvalid(f"{GO_KEY} is not JSON ({exc})") from None
    if not isinstance(go, dict):
        raise GoInvalid(f"{GO_KEY} must be a JSON object, not {type(go).__name__}")
    pod = go.get("pod")
    if not isinstance(pod, str) or not pod:
        raise GoInvalid(f'{GO_KEY}: "pod" must be the waiting pod\'s name')
    for field in ("epoch", "attempt"):
        value = go.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GoInvalid(f'{GO_KEY}: "{field}" must be an integer of at least 1')
    if "time" in go and not isinstance(go["time"], str):
        raise GoInvalid(f'{GO_KEY}: "time" must be an RFC 3339 time string')
    return Identity(pod, go["epoch"], go["attempt"])


def readiness(me: Identity, state: str, **fields: Any) -> dict[str, Any]:
    """handover.json: state "warming", "ready" (with readySince, warmSeconds) or "failed"
    (with error)."""
    return {"pod": me.pod, "epoch": me.epoch, "attempt": me.attempt, "state": state, **fields}


class Signals(Protocol):
    """Where handover.json goes and go.json comes from."""

    def publish(self, handover: dict[str, Any]) -> bool:
        """Writes handover.json; False: it did not arrive (logged)."""
        ...

    def go_text(self) -> str | None:
        """go.json as written, None when there is none (yet); errors logged, not raised."""
        ...


class FileSignals:
    """`--handover-dir`: handover.json written atomically, go.json read."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def publish(self, handover: dict[str, Any]) -> bool:
        target = self.directory / HANDOVER_KEY
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(handover, sort_keys=True))
        tmp.replace(target)
        return True

    def go_text(self) -> str | None:
        try:  # bytes that are not UTF-8 make a go that is not JSON: ignored, not a crash
            return (self.directory / GO_KEY).read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return None


class ConfigMapSignals:
    """PATCH of handover.json only into the job's report ConfigMap, GET of go.json from its
    go ConfigMap (`go_configmap`; None: the report ConfigMap, as earlier operators wrote)."""

    def __init__(
        self,
        name: str,
        namespace: str,
        access: ApiAccess | None = None,
        go_configmap: str | None = None,
    ):
        self.access = access or ApiAccess.in_cluster()
        self.url = self.access.configmap_url(namespace, name)
        self.go_url = self.access.configmap_url(namespace, go_configmap or name)
        self.publisher = ConfigMapPublisher(name, namespace, self.access, key=HANDOVER_KEY)
        self._last_error = ""

    def publish(self, handover: dict[str, Any]) -> bool:
        return self.publisher.publish(json.dumps(handover, sort_keys=True))

    def go_text(self) -> str | None:
        try:
            configmap = json.loads(self.access.call("GET", self.go_url))
        except Exception as exc:  # the API away for a moment: the next poll asks again
            if str(exc) != self._last_error:  # one line per kind of failure, not per poll
                self._last_error = str(exc)
                log.warning("cannot read %s from %s: %s", GO_KEY, self.go_url, exc)
            return None
        self._last_error = ""
        text = (configmap.get("data") or {}).get(GO_KEY)
        return text if isinstance(text, str) else None


def signals_for(
    configmap: str | None, directory: Path | None, namespace: str, go_configmap: str | None = None
) -> Signals:
    """The ConfigMaps when the runner reports to one (in a pod), else the directory."""
    if configmap:
        return ConfigMapSignals(configmap, namespace, go_configmap=go_configmap)
    if directory is None:
        raise ValueError("--wait-for-go needs --report-configmap or --handover-dir")
    return FileSignals(directory)


class GoWatcher:
    """Tells whether go.json names this driver; every other content (none, malformed,
    another driver's) is not a go, and is logged once per distinct content."""

    def __init__(self, me: Identity):
        self.me = me
        self._seen: str | None = None

    def is_mine(self, text: str | None) -> bool:
        if text is None:
            return False
        try:
            named = parse_go(text)
        except GoInvalid as exc:
            self._once(text, f"ignoring {GO_KEY}: {exc}")
            return False
        if named != self.me:
            self._once(
                text,
                f"ignoring a go for {named.pod} (epoch {named.epoch}, attempt "
                f"{named.attempt}): this is {self.me.pod} (epoch {self.me.epoch}, attempt "
                f"{self.me.attempt})",
            )
            return False
        return True

    def _once(self, text: str, message: str) -> None:
        if text != self._seen:
            self._seen = text
            log.info(message)


def await_go(
    signals: Signals,
    me: Identity,
    warm_seconds: float,
    stop: threading.Event,
    poll_s: float = POLL_S,
) -> bool:
    """Publishes handover.json ready (again every REPUBLISH_S while it did not arrive), then
    waits for this driver's go. True: the go came; False: `stop` was set first (nothing was
    read)."""
    ready = readiness(me, "ready", readySince=now_iso(), warmSeconds=round(warm_seconds, 3))
    published, next_try = False, 0.0
    watcher = GoWatcher(me)
    while not stop.is_set():
        if not published and time.monotonic() >= next_try:
            published, next_try = signals.publish(ready), time.monotonic() + REPUBLISH_S
            if published:
                log.info("warm after %.1fs: ready, waiting for the go for %s", warm_seconds, me.pod)
        if published and watcher.is_mine(signals.go_text()):
            log.info("the go for %s came: starting", me.pod)
            return True
        stop.wait(poll_s)
    return False
