"""The act step: what a decision asks of the API server, and only that. A launch applies the
driver's children (server-side apply, no write where nothing changed), lists the job's pods
once more right before the create (fencing), and creates the driver; a waiting driver (a warm
hand-over's next one, the standby) is started beside the running one; the go of a hand-over
is written only after a direct list finds nothing of the running driver left."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from streamingjob_operator.api.job import Job, JobMeta
from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.api.naming import LABEL_DRIVER, go_configmap_name
from streamingjob_operator.children.builders import (
    build_disruption_budget,
    build_go_configmap,
    build_report_configmap,
    build_service,
    build_ui_service,
)
from streamingjob_operator.children.driver_pod import build_driver_pod, build_job_configmap
from streamingjob_operator.children.rbac import (
    build_role,
    build_role_binding,
    build_service_account,
)
from streamingjob_operator.io.errors import TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.metrics import Metrics
from streamingjob_operator.rules import handover, standby
from streamingjob_operator.rules.decide import Decision
from streamingjob_operator.rules.fencing import not_launching
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.observed import GO_KEY, iso
from streamingjob_operator.seen import Seen, resource_version
from streamingjob_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


class Actor:
    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        seen: Seen,
        metrics: Metrics,
        clock: Callable[[], datetime],
    ) -> None:
        self.api, self.settings, self.seen = api, settings, seen
        self.metrics, self.clock = metrics, clock

    def act(
        self,
        job: Job,
        decision: Decision,
        pods: list[dict[str, Any]],
        previous_ui_service: str = "",
    ) -> list[dict[str, Any]] | None:
        """Acts; returns the job's pods afterwards when that is known first hand (None: a
        deletion is still under way, list again)."""
        if previous_ui_service and previous_ui_service != decision.status.spark_ui_service:
            # sparkUI switched off: status named the Service until this step's write; one
            # delete, once. A crash right before it leaves a Service selecting a driver without
            # a UI; the job's deletion removes it (finalizer.py, owner reference).
            self.api.delete("Service", job.meta.namespace, previous_ui_service)
        if decision.action == "delete":
            gone = [self._delete_pod(job, pod, force=True) for pod in decision.force_delete]
            gone += [self._delete_pod(job, pod) for pod in decision.delete]
            if not gone or not all(gone):
                return None
            removed = {*decision.force_delete, *decision.delete}
            return [p for p in pods if p["metadata"]["name"] not in removed]
        if decision.action == "launch":
            return self._launch(job, decision)
        if decision.action in ("launch-waiting", "launch-standby"):
            return self._launch_waiting(job, decision, pods)
        if decision.action == "go":
            self.go(job, decision)
        return pods

    def _delete_pod(self, job: Job, pod: str, *, force: bool = False) -> bool:
        namespace, name = job.meta.key
        log.info("deleting pod %s/%s%s", namespace, pod, " (force)" if force else "")
        self.seen.mark(namespace, name, pod, Seen.DELETING)
        gone = False
        try:
            gone = self.api.delete_pod(namespace, pod, force=force)
        finally:
            self.seen.mark(namespace, name, pod, None if gone else "")
        return gone

    def _still_wanted(self, meta: JobMeta) -> bool:
        """The job (this very object, by uid) exists and is not being deleted."""
        current = self.api.get_job(meta.namespace, meta.name)
        if current is None:
            return False
        now = JobMeta.of(current["metadata"])
        return not now.deleting and now.uid == meta.uid

    def _apply_children(self, job: Job, st: StreamingJobStatus) -> None:
        """The launch's children besides the driver, each one server-side apply: one call
        whether it exists or not, no write where nothing changed."""
        body, spec = job.body, job.spec  # the children are built from the API server's object
        children = [build_service(body), build_report_configmap(body)]
        children.append(self._disruption_budget(job, st))
        if spec.service_account_name is None:
            children += [build_service_account(body), self._role(job, st)]
            children.append(build_role_binding(body))
        if spec.spark_ui.enabled:
            children.append(build_ui_service(body))
        children.append(build_job_configmap(body, spec, st.avoid_nodes))  # this launch's
        for child in children:
            self.api.apply(child)

    @staticmethod
    def _disruption_budget(job: Job, st: StreamingJobStatus) -> dict[str, Any]:
        """The budget of the job's driver: st.driver_pod, the running one while another
        waits beside it (launched with st.executors of them: more than the spec's after a
        scale-down that hands over warm), else the one launched now (st.executors is 0)."""
        executors = max(job.spec.executor.instances, st.executors)
        return build_disruption_budget(job.body, st.driver_pod, executors)

    @staticmethod
    def _role(job: Job, st: StreamingJobStatus) -> dict[str, Any]:
        """The driver Role: this driver's executors, and during a warm hand-over or beside a
        standby also the waiting driver's (the running one was launched with st.executors
        of them)."""
        waiting, spec = handover.active(st) or standby.current(st), job.spec
        if waiting is None:
            return build_role(job.body, st.driver_pod, spec.executor.instances)
        instances = max(spec.executor.instances, st.executors)
        return build_role(job.body, st.driver_pod, instances, handing_over_to=waiting.pod)

    def _launch_waiting(
        self, job: Job, decision: Decision, pods: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        """A warm hand-over's next driver or the standby, started beside the running one: it
        waits for the go (handover.py), so no fencing list precedes it; the go has its own."""
        st = decision.status
        self._apply_children(job, st)
        self.api.apply(build_go_configmap(job.body))  # where its go will be (a waiting one's)
        settings = self.settings
        of = Launch.standby if decision.action == "launch-standby" else Launch.waiting
        launch = of(st, entrypoint=settings.driver_entrypoint, spark_submit=settings.spark_submit)
        created = self._create_driver(job, build_driver_pod(job.body, job.spec, launch))
        if created is None:
            return None  # it exists already: the next step lists again and adopts it
        log.info("started %s/%s waiting for the go", job.meta.namespace, launch.driver_pod)
        return [*pods, created]

    def go(self, job: Job, decision: Decision) -> None:
        """The go of a warm hand-over, after the fencing read: only the next driver and its
        executors are left of the job's pods (decide saw the running driver gone; this
        direct list confirms it right before the write: handover.no_go)."""
        st, meta, body, spec = decision.status, job.meta, job.body, job.spec
        waiting = handover.active(st)
        assert waiting is not None
        pods = self.api.list_job_pods(meta.namespace, meta.name)
        self.seen.saw_pods(meta.namespace, meta.name, pods)
        if why := handover.no_go(waiting, ((_name(p), _driver_of(p)) for p in pods)):
            raise TransientError(why, delay=self.settings.fencing_poll_seconds)
        # the budget moves to the next driver before its go (none of the old one's pods is
        # left): a crash after the go cannot leave the running driver's executors uncovered
        self.api.apply(build_disruption_budget(body, waiting.pod, spec.executor.instances))
        go = handover.go_signal(waiting, self.clock())
        # its own ConfigMap, which no driver may write (builders.build_role); applied again
        # for a hand-over an older operator started, before that ConfigMap existed
        self.api.apply(build_go_configmap(body))
        name = go_configmap_name(meta.name)
        self.api.set_configmap_key(meta.namespace, name, GO_KEY, json.dumps(go))
        log.info("go written for %s/%s", meta.namespace, waiting.pod)
        if spec.service_account_name is None:  # the Role names the one driver left
            self.api.apply(build_role(body, waiting.pod, spec.executor.instances))

    def _create_driver(self, job: Job, pod: dict[str, Any]) -> dict[str, Any] | None:
        """Creates a driver pod (None: it exists already); one of a job deleted meanwhile is
        removed again."""
        meta, driver = job.meta, _name(pod)
        self.seen.mark(meta.namespace, meta.name, driver, Seen.CREATING)
        created = None
        try:
            created = self.api.create_pod(pod)
        finally:
            state = resource_version(created) if created is not None else None
            self.seen.mark(meta.namespace, meta.name, driver, state)
        if created is None:
            return None
        if not self._still_wanted(meta):
            # Deleted while launching: its finalizer may have looked for pods before this
            # one existed, and nothing but the garbage collector would remove it. A deletion
            # that starts after this look finds the pod itself (the finalizer lists after it).
            self.api.delete_pod(meta.namespace, driver)
            raise TransientError(
                f"{meta.namespace}/{meta.name} was deleted while launching: {driver} removed"
            )
        return created

    def _launch(self, job: Job, decision: Decision) -> list[dict[str, Any]] | None:
        st, meta = decision.status, job.meta
        self._apply_children(job, st)
        # Fencing, checked again right before the create: no other pod of the job exists.
        pods = self.api.list_job_pods(meta.namespace, meta.name)
        self.seen.saw_pods(meta.namespace, meta.name, pods)
        if why := not_launching(st.driver_pod, [_name(p) for p in pods]):
            raise TransientError(why, delay=self.settings.fencing_poll_seconds)
        settings = self.settings
        launch = Launch.of(
            st, entrypoint=settings.driver_entrypoint, spark_submit=settings.spark_submit
        )
        created = self._create_driver(job, build_driver_pod(job.body, job.spec, launch))
        if created is None:
            return None  # it exists already: the next step lists again and adopts it
        self.metrics.launches.labels("fresh" if st.attempt == 1 else "restore").inc()
        log.info(
            "launched %s/%s epoch %d attempt %d at %s",
            meta.namespace,
            st.driver_pod,
            st.epoch,
            st.attempt,
            iso(self.clock()),
        )
        return [*pods, created]


def _name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def _driver_of(pod: dict[str, Any]) -> str:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_DRIVER, "")
