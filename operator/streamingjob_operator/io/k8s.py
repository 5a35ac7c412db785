"""The one module that talks to the Kubernetes API.

Every call goes through here and every `ApiException` becomes one of the operator's error
types (`errors.py`). Objects are plain dicts (camelCase, as the API server sends them).
Reads of pods and the job are direct (quorum) reads, never a cache: fencing depends on them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from streamingjob_operator.api.naming import (
    LABEL_JOB,
    MANAGED_BY,
    job_selector,
    label_value,
    selector_string,
)
from streamingjob_operator.children.dry_run import Rejection
from streamingjob_operator.io.errors import ConflictError, FatalError, NotFoundError, TransientError
from streamingjob_operator.rules.timing import gated_write_timeout

log = logging.getLogger(__name__)
T = TypeVar("T")

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


def _translate(exc: ApiException, what: str) -> Exception:
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


def _rejection(exc: ApiException) -> Rejection | None:
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


def _over_quota(exc: ApiException) -> bool:
    return exc.status == 403 and "exceeded quota" in str(exc.body or "")


def _client_rejection(exc: ValidationError) -> Rejection:
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


# Children the operator applies: API client and method suffix.
_CHILD_APIS = {
    "ConfigMap": ("core", "config_map"),
    "Service": ("core", "service"),
    "ServiceAccount": ("core", "service_account"),
    "Role": ("rbac", "role"),
    "RoleBinding": ("rbac", "role_binding"),
    "Job": ("batch", "job"),
    "PodDisruptionBudget": ("policy", "pod_disruption_budget"),
}
# Server-side apply: the fields the operator sets on its children are owned by this manager;
# fields other controllers set (a Service's clusterIP, a mesh's annotations) stay theirs.
FIELD_MANAGER = "streamingjob-operator"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the body goes as JSON
MERGE_PATCH = "application/merge-patch+json"
SIGNAL_MANAGER = "streamingjob-operator-signals"  # the go of a warm hand-over (go.json)
NODE_LEASE_NAMESPACE = "kube-node-lease"
# client methods that change state: the write gate sees each of them (dry runs are named
# dry_run_*, so they pass)
WRITE_VERBS = ("create_", "replace_", "patch_", "delete_")


class WriteGate(Protocol):
    """Lets a write through only while this replica leads (leadership.Gate), telling it the
    seconds left before the leader's renew deadline."""

    def writing(self, what: str) -> AbstractContextManager[float]: ...


class KubeApi:
    """Thin typed facade over the Kubernetes client; all methods are blocking."""

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
            raise _translate(exc, what) from None
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

    # --- the StreamingJob ------------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._raw(
                f"get StreamingJob {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL,
                name,
            )
        except NotFoundError:
            return None

    def replace_status(self, job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT the status with the job's resourceVersion: fails (ConflictError) if the job
        changed since it was read, so decisions are never recorded against stale state."""
        meta = job["metadata"]
        # the status subresource takes only status from the body (and checks resourceVersion)
        body = {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": job.get("kind", KIND),
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "resourceVersion": meta.get("resourceVersion"),
            },
            "status": status,
        }
        return self._job_write(
            "update status of", job, self.custom.replace_namespaced_custom_object_status, body
        )

    def set_executor_instances(self, job: dict[str, Any], count: int) -> dict[str, Any]:
        """The autoscaler's rescale (or its undoing of a foreign one): spec.executor.instances,
        the field the scale subresource writes, under the job's resourceVersion (ConflictError
        if it changed since it was read)."""
        meta = job["metadata"]
        body = {
            "metadata": {"resourceVersion": meta.get("resourceVersion")},
            "spec": {"executor": {"instances": count}},
        }
        return self._job_write(
            "set executor instances of", job, self.custom.patch_namespaced_custom_object, body
        )

    def _job_write(
        self, what: str, job: dict[str, Any], fn: Callable[..., Any], body: dict[str, Any]
    ) -> dict[str, Any]:
        meta = job["metadata"]
        return self._raw(
            f"{what} {meta['namespace']}/{meta['name']}",
            fn,
            API_GROUP,
            API_VERSION,
            meta["namespace"],
            PLURAL,
            meta["name"],
            body,
        )

    # --- pods ------------------------------------------------------------------------

    def list_job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        result = self._raw(
            f"list pods of {namespace}/{job}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=selector_string(job_selector(job)),
        )
        return result.get("items") or []

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """Creates the pod and returns it as the API server stored it; None if a pod of that
        name already exists."""
        meta = pod["metadata"]
        try:
            return self._raw(
                f"create pod {meta['namespace']}/{meta['name']}",
                self.core.create_namespaced_pod,
                meta["namespace"],
                pod,
            )
        except ConflictError:
            return None

    def delete_pod(self, namespace: str, name: str, *, force: bool = False) -> bool:
        """Deletes the pod; True when it is gone now (deleted at once, as unscheduled and
        finished pods and forced deletions are, or already absent), False while a graceful
        deletion is still under way: the API server then answers with the pod, its deletion
        grace period still running (200 or 202 alike)."""
        options = client.V1DeleteOptions(
            grace_period_seconds=0 if force else None, propagation_policy="Background"
        )
        try:
            status, body = self._send(
                f"delete pod {namespace}/{name}",
                self.core.delete_namespaced_pod,
                name,
                namespace,
                body=options,
            )
        except NotFoundError:
            return True
        try:
            answer = json.loads(body or b"{}")
        except ValueError:
            answer = {}
        grace = (answer.get("metadata") or {}).get("deletionGracePeriodSeconds")
        return status == 200 and (answer.get("kind") != "Pod" or not grace)

    def dry_run_create(self, obj: dict[str, Any]) -> Rejection | None:
        """A server-side dry run of creating `obj` (dryRun=All: validation, defaulting and
        admission, nothing stored), unknown fields refused (fieldValidation=Strict). None when
        the API server would accept it, else its refusal with the causes it names (400 / 422,
        or 403 from an admission policy; the operator's own missing rights still raise)."""
        kind, meta = obj["kind"], obj["metadata"]
        if kind != "Pod":
            raise ValueError(f"no dry run for kind {kind}")
        # the client takes plain dicts for bodies (its annotations name its model classes)
        fn: Callable[..., Any] = self.core.create_namespaced_pod

        def dry_run_create_namespaced_pod(namespace: str, body: dict[str, Any], **kw: Any):
            try:
                fn(namespace, body, dry_run="All", field_validation="Strict", **kw)
            except ValidationError as exc:  # the client checks the body before sending it
                return _client_rejection(exc)
            except ApiException as exc:
                if _over_quota(exc):  # the namespace is full, the spec may be fine
                    return None
                rejection = _rejection(exc)
                if rejection is None:
                    raise
                return rejection
            return None

        return self._call(
            f"dry-run create {kind} {meta['namespace']}/{meta.get('generateName', '')}*",
            dry_run_create_namespaced_pod,
            meta["namespace"],
            obj,
            _preload_content=False,
        )

    # --- nodes: leases and cordons (nodes.NodeTracker) -------------------------------

    def list_node_leases(self) -> tuple[list[dict[str, Any]], str]:
        answer = self._raw(
            "list node leases",
            self.coordination.list_namespaced_lease,
            NODE_LEASE_NAMESPACE,
        )
        return answer.get("items") or [], answer["metadata"].get("resourceVersion", "")

    def watch_node_leases(
        self, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._watch(
            "watch node leases",
            self.coordination.list_namespaced_lease,
            resource_version,
            timeout,
            NODE_LEASE_NAMESPACE,
        )

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        answer = self._raw("list nodes", self.core.list_node)
        return answer.get("items") or [], answer["metadata"].get("resourceVersion", "")

    def watch_nodes(
        self, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._watch("watch nodes", self.core.list_node, resource_version, timeout)

    def _watch(
        self, what: str, fn: Callable[..., Any], resource_version: str, timeout: int, *args: Any
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object as plain JSON) until the server ends the watch after `timeout`
        seconds; an expired version or an API error raises (the caller lists again)."""
        stream = watch.Watch().stream(
            fn,
            *args,
            resource_version=resource_version,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            deserialize=False,
            _request_timeout=timeout + self.timeout,
        )
        try:
            for event in stream:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise TransientError(f"{what}: {obj.get('message', obj)}")
                if kind != "BOOKMARK":
                    yield kind, obj
        except ApiException as exc:
            raise _translate(exc, what) from None

    # --- other children ----------------------------------------------------------------

    def _kind_api(self, kind: str, verb: str) -> Callable[..., Any]:
        """The client method `verb` (create, patch, delete) of a child kind."""
        if kind not in _CHILD_APIS:
            raise ValueError(f"unsupported kind {kind}")
        client, suffix = _CHILD_APIS[kind]
        return getattr(getattr(self, client), f"{verb}_namespaced_{suffix}")

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply of our content: one call whether the object exists or not,
        and no write when nothing changed. Forced: a field of ours another manager took
        over is ours again (the operator owns its children's content)."""
        kind, meta = obj["kind"], obj["metadata"]
        self._send(
            f"apply {kind} {meta['namespace']}/{meta['name']}",
            self._kind_api(kind, "patch"),
            meta["name"],
            meta["namespace"],
            obj,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY_PATCH,
        )

    def create_once(self, obj: dict[str, Any]) -> None:
        """Creates the object unless it exists (then it is left as it is: its content is
        another writer's, or cannot change)."""
        kind, meta = obj["kind"], obj["metadata"]
        with contextlib.suppress(ConflictError):
            self._send(
                f"create {kind} {meta['namespace']}/{meta['name']}",
                self._kind_api(kind, "create"),
                meta["namespace"],
                obj,
            )

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._raw(
                f"get ConfigMap {namespace}/{name}",
                self.core.read_namespaced_config_map,
                name,
                namespace,
            )
        except NotFoundError:
            return None

    def set_configmap_key(self, namespace: str, name: str, key: str, value: str) -> None:
        """A JSON merge patch of one key of a ConfigMap's data: the other keys (another
        writer's, e.g. the runner's report.json) are left as they are. Its own field manager:
        the key is no field of the operator's server-side apply of that ConfigMap, which
        would otherwise remove it."""
        self._send(
            f"patch ConfigMap {namespace}/{name} key {key}",
            self.core.patch_namespaced_config_map,
            name,
            namespace,
            {"data": {key: value}},
            field_manager=SIGNAL_MANAGER,
            _content_type=MERGE_PATCH,
        )

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self._send(
                f"delete {kind} {namespace}/{name}",
                self._kind_api(kind, "delete"),
                name,
                namespace,
                body=client.V1DeleteOptions(propagation_policy="Background"),
            )

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """Decoded Secret data, or None if the Secret does not exist. Callers must not log
        or store the values."""
        try:
            secret = self._raw(
                f"get Secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace
            )
        except NotFoundError:
            return None
        data = secret.get("data") or {}
        out = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        out.update(secret.get("stringData") or {})
        return out

    # --- the operator's leader-election Lease (leadership.py) --------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._raw(
                f"get Lease {namespace}/{name}",
                self.coordination.read_namespaced_lease,
                name,
                namespace,
            )
        except NotFoundError:
            return None

    def write_lease(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Create the Lease (resource_version None) or replace the version read; None when
        another replica wrote it first (a 409: it exists, or changed since it was read)."""
        metadata = {"name": name, "namespace": namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }
        what = f"write Lease {namespace}/{name}"
        try:
            if resource_version is None:
                return self._raw(what, self.coordination.create_namespaced_lease, namespace, body)
            return self._raw(
                what, self.coordination.replace_namespaced_lease, name, namespace, body
            )
        except ConflictError:
            return None

    # --- events ------------------------------------------------------------------------

    def post_event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the StreamingJob. Failing to post is logged, never raised."""
        meta = job["metadata"]
        api_version, kind = f"{API_GROUP}/{API_VERSION}", job.get("kind", KIND)
        labels = {LABEL_JOB: label_value(meta["name"])}
        body = _event(api_version, kind, meta, labels, type_, reason, message)
        try:
            self._send(
                f"post event {reason}", self.core.create_namespaced_event, meta["namespace"], body
            )
        except Exception as exc:
            log.warning("could not post event %s on %s: %s", reason, meta["name"], exc)

    def post_lease_event(
        self, lease: dict[str, Any], type_: str, reason: str, message: str, *, timeout: float
    ) -> None:
        """A core/v1 Event on the leader-election Lease (`kubectl describe lease`), as
        client-go's elections record theirs. It passes no write gate: it changes no job, and
        the one on losing the Lease is posted after the gate closed. Logged, never raised."""
        meta = lease["metadata"]
        body = _event("coordination.k8s.io/v1", "Lease", meta, {}, type_, reason, message)
        try:
            self._attempt(
                f"post event {reason}",
                self.core.create_namespaced_event,
                meta["namespace"],
                body,
                _request_timeout=timeout,
            )
        except Exception as exc:
            log.warning("could not post event %s on Lease %s: %s", reason, meta["name"], exc)


def _event(
    api_version: str,
    kind: str,
    meta: dict[str, Any],
    labels: dict[str, str],
    type_: str,
    reason: str,
    message: str,
) -> dict[str, Any]:
    """A core/v1 Event about the object with this apiVersion, kind and metadata."""
    now = datetime.now(UTC).isoformat()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta['name'][:200]}.",
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
