"""The Kubernetes client under the operator's API facade (k8s.py): its configuration, the one
way a call is made (through the leader's write gate, with a timeout, as plain JSON) and the
one place an `ApiException` becomes one of the operator's error types (errors.py)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from streamingjob_operator.api.naming import (
    MANAGED_BY,
)
from streamingjob_operator.children.dry_run import Rejection
from streamingjob_operator.io.errors import ConflictError, FatalError, NotFoundError, TransientError
from streamingjob_operator.rules.timing import gated_write_timeout

log = logging.getLogger(__name__)

COMPONENT = MANAGED_BY


def load_client_config() -> client.Configuration:
    """In-cluster config when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        # $KUBECONFIG is read now, not when the kubernetes package was imported
        config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG") or None,
            client_configuration=configuration,
        )
    return configuration


def translate(exc: ApiException, what: str) -> Exception:
    status = exc.status or 0
    reason = exc.reason or ""
    try:
        message = json.loads(exc.body or "{}").get("message", reason)
    except (ValueError, AttributeError):
        message = reason
    if status == 404:
        return NotFoundError(f"{what}: not found")
    if status == 409:
        return ConflictError(f"{what}: conflict: {message}", delay=0.2)
    if status in (401, 403):
        return FatalError(f"{what}: forbidden: {message}")
    if status == 422 or status == 400:
        return FatalError(f"{what}: rejected: {message}")
    return TransientError(f"{what}: API error {status} {message}", delay=2.0)


def rejection_of(exc: ApiException) -> Rejection | None:
    """An answer that refuses the object itself (not the caller, not a server problem)."""
    status = exc.status or 0
    try:
        body = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        body = {}
    message = str(body.get("message") or exc.reason or "")
    rbac = status == 403 and " cannot " in message  # RBAC: "User ... cannot create ..."
    if status not in (400, 403, 422) or rbac:
        return None
    causes = tuple(
        (str(c.get("field") or ""), str(c.get("message") or c.get("reason") or ""))
        for c in (body.get("details") or {}).get("causes") or []
        if isinstance(c, dict)
    )
    return Rejection(status, message, causes)


def over_quota(exc: ApiException) -> bool:
    return exc.status == 403 and "exceeded quota" in str(exc.body or "")


def client_rejection(exc: ValidationError) -> Rejection:
    """The client's own model check of a body, as the server would word it: the field path
    in the object (`spec.containers[0].volumeMounts[1].mountPath`) and the problem."""
    causes = []
    for error in exc.errors():
        loc = list(error["loc"])[1:]  # the first item is the argument's position
        path = ""
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        causes.append((path.lstrip("."), str(error["msg"])))
    return Rejection(422, "; ".join(f"{p}: {m}" for p, m in causes), tuple(causes))


# client methods that change state: the write gate sees each of them (dry runs are named
# dry_run_*, so they pass)
WRITE_VERBS = ("create_", "replace_", "patch_", "delete_")


class WriteGate(Protocol):
    """Lets a write through only while this replica leads (leadership.Gate), telling it the
    seconds left before the leader's renew deadline."""

    def writing(self, what: str) -> AbstractContextManager[float]: ...


def event_body(
    api_version: str,
    kind: str,
    meta: dict[str, Any],
    labels: dict[str, str],
    type_: str,
    reason: str,
    message: str,
    name: str = "",
    at: str = "",
) -> dict[str, Any]:
    """A core/v1 Event about the object with this apiVersion, kind and metadata; `name`:
    its own (else generated), `at`: when it happened (else now)."""
    now = at or datetime.now(UTC).isoformat()
    named = {"name": name} if name else {"generateName": f"{meta['name'][:200]}."}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            **named,
            "namespace": meta["namespace"],
            "labels": labels,
        },
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            **{k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class KubeClient:
    """The client and its calls; the API's operations are KubeApi's (k8s.py)."""

    def __init__(
        self,
        configuration: client.Configuration | None = None,
        timeout: float = 30,
        connections: int = 0,
        write_gate: WriteGate | None = None,
    ):
        """`connections`: keep-alive connections kept open, at least one per thread that
        calls (fewer, and the surplus connections are opened and closed on every call).
        `write_gate`: every create/replace/patch/delete passes it first (leader election)."""
        configuration = configuration or load_client_config()
        configuration.connection_pool_maxsize = max(
            configuration.connection_pool_maxsize, connections
        )
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.rbac = client.RbacAuthorizationV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.policy = client.PolicyV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)
        self.timeout = timeout
        self.write_gate = write_gate

    def close(self) -> None:
        self.api_client.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.write_gate is not None and fn.__name__.startswith(WRITE_VERBS):
            with self.write_gate.writing(what) as left:
                # never waited for past the renew deadline, when another replica may lead
                asked = kwargs.get("_request_timeout", self.timeout)
                kwargs["_request_timeout"] = gated_write_timeout(asked, left)
                return self._attempt(what, fn, *args, **kwargs)
        return self._attempt(what, fn, *args, **kwargs)

    def _attempt(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.timeout)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise translate(exc, what) from None
        except OSError as exc:  # connection refused/reset, timeouts (urllib3 errors)
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:
            if type(exc).__module__.startswith("urllib3"):
                raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from None
            raise

    def _raw(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The answer as plain JSON (no client model objects: they cost more than the call)."""
        return json.loads(self._send(what, fn, *args, **kwargs)[1])

    def _send(
        self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> tuple[int, bytes]:
        """(HTTP status, body bytes), the body left unparsed; reading it releases the
        connection to the pool."""
        response = self._call(what, fn, *args, _preload_content=False, **kwargs)
        return response.status, response.data
