"""The API calls of the operator's views of the cluster: the nodes and their kubelets' Leases
(io/nodes.py), the operator's own leader-election Lease (leadership.py) and its Events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from streamingjob_operator.io.errors import ConflictError, NotFoundError, TransientError
from streamingjob_operator.io.k8s_client import KubeClient, event_body, translate

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"


class NodeAndLeaseCalls(KubeClient):
    """What the node view and the leader election ask of the API server."""

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
            raise translate(exc, what) from None

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

    def post_lease_event(
        self, lease: dict[str, Any], type_: str, reason: str, message: str, *, timeout: float
    ) -> None:
        """A core/v1 Event on the leader-election Lease (`kubectl describe lease`), as
        client-go's elections record theirs. It passes no write gate: it changes no job, and
        the one on losing the Lease is posted after the gate closed. Logged, never raised."""
        meta = lease["metadata"]
        body = event_body("coordination.k8s.io/v1", "Lease", meta, {}, type_, reason, message)
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
