"""Deletion of a StreamingJob: its pods first (fenced by the one lost-pod rule), then its
children; checkpoint data only when the spec asks for it (a cleanup Job)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from streamingjob_operator.api.models import parse_status
from streamingjob_operator.api.naming import (
    cleanup_job_name,
    disruption_budget_name,
    driver_account_name,
    go_configmap_name,
    job_configmap_name,
    offsets_configmap_name,
    report_configmap_name,
    service_name,
    ui_service_name,
)
from streamingjob_operator.children.cleanup import build_cleanup_job, checkpoint_cleanup_paths
from streamingjob_operator.children.validation import parse
from streamingjob_operator.io.errors import TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.nodes import NodeTracker, with_node_view
from streamingjob_operator.rules.fencing import is_lost
from streamingjob_operator.settings import OperatorSettings


class Finalizer:
    """Deletion: remove the children, keep checkpoint data unless the spec says otherwise."""

    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        nodes: NodeTracker | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.clock = clock
        self.settings = settings
        self.nodes = nodes

    def finalize(self, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        now = self.clock()
        pods = with_node_view(self.api.list_job_pods(namespace, name), self.nodes)
        if pods:
            for pod in pods:
                grace = self.settings.node_lost_grace_seconds
                if is_lost(pod, now, grace, silent=self.settings.node_silent_seconds):
                    self.api.delete_pod(namespace, pod.name, force=True)
                elif pod.deleting_since is None:
                    self.api.delete_pod(namespace, pod.name)
            raise TransientError(
                f"waiting for {len(pods)} pod(s) of {name} to terminate",
                delay=self.settings.fencing_poll_seconds,
            )
        self.api.delete("Service", namespace, service_name(name))
        self.api.delete("Service", namespace, ui_service_name(name))  # if sparkUI was on
        self.api.delete("PodDisruptionBudget", namespace, disruption_budget_name(name))
        self.api.delete("ConfigMap", namespace, job_configmap_name(name))
        self.api.delete("ConfigMap", namespace, report_configmap_name(name))
        self.api.delete("ConfigMap", namespace, go_configmap_name(name))
        self.api.delete("ConfigMap", namespace, offsets_configmap_name(name))
        for kind in ("RoleBinding", "Role", "ServiceAccount"):
            self.api.delete(kind, namespace, driver_account_name(name))
        spec, _problems = parse(job.get("spec") or {})
        if spec is None:
            return
        if not spec.checkpoint.delete_on_job_deletion:
            return
        st = parse_status(job.get("status"))
        recorded = [st.checkpoint_location, st.previous_checkpoint_location]
        recorded += st.older_checkpoint_locations
        paths = checkpoint_cleanup_paths(spec, namespace, name, meta.get("uid", ""), recorded)
        if paths is None:
            self.api.post_event(
                job,
                "Normal",
                "CheckpointKept",
                f"checkpoint data under {spec.checkpoint.location} is kept: the operator "
                "deletes s3a:// checkpoints and file:// ones on a mounted volume only; use "
                "the store's lifecycle rules for others",
            )
            return
        self.api.create_once(build_cleanup_job(job, spec, paths, cleanup_job_name(name)))
        deleted = ", ".join(paths)
        self.api.post_event(job, "Normal", "CheckpointDeleted", f"cleanup Job deletes {deleted}")
