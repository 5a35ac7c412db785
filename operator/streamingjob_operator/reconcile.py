"""One idempotent reconcile: observe → validate → decide → act → record.

`Reconciler.reconcile(namespace, name)` is the only entry point; handlers call nothing else.
It loops over single decision steps (each recorded in status before it is acted on) until a
step leaves nothing to do, and returns when to look again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from .builders import (
    build_driver_pod,
    build_job_configmap,
    build_report_configmap,
    build_role,
    build_role_binding,
    build_service,
    build_service_account,
    validate_spec,
)
from .decide import DecideConfig, Decision, decide
from .errors import InvalidJobError, TransientError
from .k8s import KubeApi
from .kafka import KafkaMonitor, KafkaTarget
from .metrics import Metrics
from .models import InvalidSpecError, StreamingJobSpec, parse_spec, parse_status
from .naming import report_configmap_name
from .observed import Observed, iso, parse_report, pod_info
from .settings import OperatorSettings
from .status import apply_kafka, set_conditions, status_body

log = logging.getLogger(__name__)

MAX_STEPS = 8


class Reconciler:
    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        *,
        kafka: KafkaMonitor | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.api = api
        self.settings = settings
        self.kafka = kafka
        self.metrics = metrics or Metrics()
        self.cfg = DecideConfig(
            node_lost_grace_seconds=settings.node_lost_grace_seconds,
            fencing_poll_seconds=settings.fencing_poll_seconds,
            resync_seconds=settings.resync_seconds,
            history_limit=settings.history_limit,
        )
        # children applied by this process (uid, kind, name) → content digest; a restarted
        # operator applies them again once
        self._applied: dict[tuple[str, str, str], str] = {}

    # --- entry point -------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Returns seconds until the next look, or None when the job is gone."""
        started = time.monotonic()
        try:
            for _ in range(MAX_STEPS):
                job = self.api.get_job(namespace, name)
                if job is None or job["metadata"].get("deletionTimestamp"):
                    return None
                again, delay = self._step(job)
                if not again:
                    self.metrics.reconciles.labels("ok").inc()
                    return delay
            self.metrics.reconciles.labels("ok").inc()
            return self.settings.fencing_poll_seconds
        except TransientError as exc:
            self.metrics.reconciles.labels("retry").inc()
            self.metrics.errors.labels(type(exc).__name__).inc()
            log.info("reconcile %s/%s will retry: %s", namespace, name, exc)
            return float(getattr(exc, "delay", None) or self.settings.fencing_poll_seconds)
        except Exception as exc:
            self.metrics.reconciles.labels("error").inc()
            self.metrics.errors.labels(type(exc).__name__).inc()
            log.exception("reconcile %s/%s failed", namespace, name)
            return self.settings.resync_seconds
        finally:
            self.metrics.reconcile_seconds.observe(time.monotonic() - started)

    # --- one step ----------------------------------------------------------------------

    def _step(self, job: dict[str, Any]) -> tuple[bool, float | None]:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        now = datetime.now(UTC)
        old_status = parse_status(job.get("status"))
        try:
            spec = parse_spec(job.get("spec") or {})
        except InvalidSpecError as exc:
            return self._record_invalid_spec(job, old_status, str(exc), now)

        observed = self._observe(job, spec, old_status, now)
        decision = decide(spec, old_status, observed, namespace=namespace, name=name, cfg=self.cfg)
        new_status = decision.status
        kafka_view = self._kafka_view(job, spec, old_status, now)
        apply_kafka(new_status, kafka_view)
        set_conditions(new_status, int(meta.get("generation") or 0), now, kafka_view)
        if kafka_view is not None and kafka_view.problem:
            previous = next((c for c in old_status.conditions if c.type == "Degraded"), None)
            if previous is None or previous.message != kafka_view.problem:
                decision.events.append(_warning("KafkaUnavailable", kafka_view.problem))

        changed = status_body(new_status) != status_body(old_status)
        if changed:  # write-ahead: the decision is recorded before it is acted on
            self.api.replace_status(job, status_body(new_status))
        for event in decision.events:
            self.api.post_event(job, event.type, event.reason, event.message)
        if decision.restart_reason:
            self.metrics.restarts.labels(decision.restart_reason).inc()

        self._act(job, spec, decision)
        # A launch, or a recorded transition that asks for an immediate next step, continues
        # in this reconcile; deletions are given time (fencingPollSeconds) to complete.
        if decision.action == "launch" or (
            decision.action == "none" and changed and decision.requeue_after == 0
        ):
            return True, 0.0
        return False, decision.requeue_after

    def _record_invalid_spec(self, job: dict[str, Any], status: Any, message: str, now: datetime):
        st = status.model_copy(deep=True)
        if st.phase != "Invalid" or st.message != message:
            st.phase, st.message = "Invalid", message
            set_conditions(st, int(job["metadata"].get("generation") or 0), now)
            self.api.replace_status(job, status_body(st))
            self.api.post_event(job, "Warning", "InvalidSpec", message)
        return False, self.settings.resync_seconds

    # --- observe & validate -------------------------------------------------------------

    def _observe(
        self, job: dict[str, Any], spec: StreamingJobSpec, status: Any, now: datetime
    ) -> Observed:
        meta = job["metadata"]
        pods = tuple(pod_info(p) for p in self.api.list_job_pods(meta["namespace"], meta["name"]))
        report = None
        if status.launch_state == "Created":
            report = parse_report(
                self.api.get_configmap(meta["namespace"], report_configmap_name(meta["name"]))
            )
        invalid = None
        if status.launch_state != "Created":  # only a launch needs the checks with I/O
            problems = self._validate(meta["namespace"], spec)
            invalid = problems[0] if problems else None
        return Observed(now=now, pods=pods, report=report, invalid=invalid)

    def _validate(self, namespace: str, spec: StreamingJobSpec) -> list[InvalidJobError]:
        problems = validate_spec(spec)
        creds = spec.kafka_credentials
        if creds is not None:
            data = self.api.secret_data(namespace, creds.secret_name)
            if data is None:
                problems.append(
                    InvalidJobError(
                        "spec.kafkaCredentials.secretName",
                        f"Secret {creds.secret_name!r} not found in namespace {namespace}",
                    )
                )
            else:
                for field, key in (
                    ("usernameKey", creds.username_key),
                    ("passwordKey", creds.password_key),
                ):
                    if key not in data:
                        problems.append(
                            InvalidJobError(
                                f"spec.kafkaCredentials.{field}",
                                f"Secret {creds.secret_name!r} has no key {key!r}",
                            )
                        )
        return problems

    def _kafka_view(self, job: dict[str, Any], spec: StreamingJobSpec, status: Any, now):
        if self.kafka is None or spec.suspend:
            return None
        key = (job["metadata"]["namespace"], job["metadata"]["name"])
        if self.kafka.is_due(key, now):
            target = self._kafka_target(key[0], spec)
            if target is not None:
                self.kafka.refresh(key, target)
        return self.kafka.view(key)

    def _kafka_target(self, namespace: str, spec: StreamingJobSpec) -> KafkaTarget | None:
        source = spec.job.source
        username = password = None
        creds = spec.kafka_credentials
        if creds is not None:
            data = self.api.secret_data(namespace, creds.secret_name)
            if data is None:
                return None  # reported as InvalidSpec by validation
            username, password = data.get(creds.username_key), data.get(creds.password_key)
        return KafkaTarget(
            bootstrap_servers=source.bootstrap_servers,
            group_id=source.group_id,
            topics=tuple(source.subscribe or ()),
            pattern=source.subscribe_pattern,
            extra=tuple(sorted(source.kafka.items())),
            security_protocol=creds.security_protocol if creds else None,
            sasl_mechanism=creds.sasl_mechanism if creds else None,
            username=username,
            password=password,
        )

    # --- act ---------------------------------------------------------------------------

    def _act(self, job: dict[str, Any], spec: StreamingJobSpec, decision: Decision) -> None:
        namespace = job["metadata"]["namespace"]
        if decision.action == "delete":
            for pod in decision.force_delete:
                self.api.delete_pod(namespace, pod, force=True)
            for pod in decision.delete:
                self.api.delete_pod(namespace, pod)
        elif decision.action == "launch":
            self._launch(job, spec, decision)

    def _launch(self, job: dict[str, Any], spec: StreamingJobSpec, decision: Decision) -> None:
        st = decision.status
        meta = job["metadata"]
        children = [build_service(job), build_report_configmap(job)]
        if spec.service_account_name is None:
            children += [build_service_account(job), build_role(job), build_role_binding(job)]
        for child in children:  # stable children: applied once per job uid and content
            key = (meta["uid"], child["kind"], child["metadata"]["name"])
            digest = hashlib.sha256(json.dumps(child, sort_keys=True).encode()).hexdigest()
            if self._applied.get(key) != digest:
                keep = child["kind"] in ("ConfigMap", "ServiceAccount")  # report, account
                self.api.apply(child, replace=not keep)
                self._applied[key] = digest
        self.api.apply(build_job_configmap(job, spec))  # this launch's manifest, always
        # Fencing, checked again right before the create: no other pod of the job exists.
        others = [
            p["metadata"]["name"]
            for p in self.api.list_job_pods(meta["namespace"], meta["name"])
            if p["metadata"]["name"] != st.driver_pod
        ]
        if others:
            raise TransientError(
                f"not launching {st.driver_pod}: pods still present: {', '.join(others)}",
                delay=self.settings.fencing_poll_seconds,
            )
        pod = build_driver_pod(
            job,
            spec,
            driver_pod=st.driver_pod,
            epoch=st.epoch,
            attempt=st.attempt,
            checkpoint_location=st.checkpoint_location,
            entrypoint=self.settings.driver_entrypoint,
            spark_submit=self.settings.spark_submit,
        )
        if self.api.create_pod(pod):
            self.metrics.launches.labels("fresh" if st.attempt == 1 else "restore").inc()
            log.info(
                "launched %s/%s epoch %d attempt %d at %s",
                meta["namespace"],
                st.driver_pod,
                st.epoch,
                st.attempt,
                iso(datetime.now(UTC)),
            )


def _warning(reason: str, message: str):
    from .decide import Event

    return Event("Warning", reason, message)


class Finalizer:
    """Deletion: remove the children, keep checkpoint data unless the spec says otherwise."""

    def __init__(self, api: KubeApi, settings: OperatorSettings) -> None:
        self.api = api
        self.settings = settings

    def finalize(self, job: dict[str, Any]) -> None:
        from .builders import build_cleanup_job, checkpoint_cleanup_path
        from .naming import (
            cleanup_job_name,
            driver_account_name,
            job_configmap_name,
            service_name,
        )

        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        now = datetime.now(UTC)
        pods = [pod_info(p) for p in self.api.list_job_pods(namespace, name)]
        if pods:
            for pod in pods:
                lost = pod.phase == "Unknown" or pod.ready_unknown_since is not None
                stuck = pod.deleting_since is not None and (
                    (now - pod.deleting_since).total_seconds()
                    >= self.settings.node_lost_grace_seconds
                )
                if lost or stuck:
                    self.api.delete_pod(namespace, pod.name, force=True)
                elif pod.deleting_since is None:
                    self.api.delete_pod(namespace, pod.name)
            raise TransientError(
                f"waiting for {len(pods)} pod(s) of {name} to terminate",
                delay=self.settings.fencing_poll_seconds,
            )
        self.api.delete("Service", namespace, service_name(name))
        self.api.delete("ConfigMap", namespace, job_configmap_name(name))
        self.api.delete("ConfigMap", namespace, report_configmap_name(name))
        for kind in ("RoleBinding", "Role", "ServiceAccount"):
            self.api.delete(kind, namespace, driver_account_name(name))
        try:
            spec = parse_spec(job.get("spec") or {})
        except InvalidSpecError:
            return
        if not spec.checkpoint.delete_on_job_deletion:
            return
        path = checkpoint_cleanup_path(spec, namespace, name)
        if path is None:
            self.api.post_event(
                job,
                "Normal",
                "CheckpointKept",
                f"checkpoint data under {spec.checkpoint.location} is kept: the operator "
                "deletes only file:// checkpoints on a mounted volume; use the store's "
                "lifecycle rules for remote stores",
            )
            return
        self.api.apply(build_cleanup_job(job, spec, path, cleanup_job_name(name)), replace=False)
        self.api.post_event(job, "Normal", "CheckpointDeleted", f"cleanup Job deletes {path}")
