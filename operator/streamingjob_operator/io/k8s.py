"""The one facade of the Kubernetes API (`KubeApi`; its client and calls: k8s_client.py, the
nodes' and Leases' calls: k8s_nodes.py).

Every call goes through here and every `ApiException` becomes one of the operator's error
types (`errors.py`). Objects are plain dicts (camelCase, as the API server sends them).
Reads of pods and the job are direct (quorum) reads, never a cache: fencing depends on them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from streamingjob_operator.api.models import API_GROUP, API_VERSION, KIND, PLURAL
from streamingjob_operator.api.naming import (
    LABEL_JOB,
    job_selector,
    label_value,
    selector_string,
)
from streamingjob_operator.children.dry_run import Rejection
from streamingjob_operator.io.errors import ConflictError, NotFoundError
from streamingjob_operator.io.k8s_client import (
    client_rejection,
    event_body,
    over_quota,
    rejection_of,
)
from streamingjob_operator.io.k8s_nodes import NodeAndLeaseCalls

log = logging.getLogger(__name__)
T = TypeVar("T")


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


class KubeApi(NodeAndLeaseCalls):
    """Thin typed facade over the Kubernetes client; all methods are blocking."""

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
                return client_rejection(exc)
            except ApiException as exc:
                if over_quota(exc):  # the namespace is full, the spec may be fine
                    return None
                rejection = rejection_of(exc)
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

    # --- events ------------------------------------------------------------------------

    def post_event(
        self,
        job: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        name: str = "",
        at: str = "",
    ) -> bool:
        """A core/v1 Event on the StreamingJob; `name`: under this name (one that exists
        already, 409, counts as posted: announce.py), else a generated one; `at`: when it
        happened. Whether it is posted; failing to post is logged, never raised."""
        meta = job["metadata"]
        api_version, kind = f"{API_GROUP}/{API_VERSION}", job.get("kind", KIND)
        labels = {LABEL_JOB: label_value(meta["name"])}
        body = event_body(api_version, kind, meta, labels, type_, reason, message, name, at)
        try:
            self._send(
                f"post event {reason}", self.core.create_namespaced_event, meta["namespace"], body
            )
        except ConflictError:
            return bool(name)  # AlreadyExists: posted before, by this replica or another
        except Exception as exc:
            log.warning("could not post event %s on %s: %s", reason, meta["name"], exc)
            return False
        return True
