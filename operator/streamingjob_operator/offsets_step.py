"""spec.offsetsAction in the reconcile (its rules: rules/offsets_action.py): gated on the
decision (a running job refuses it, recorded in the decision's status), run once the job is
suspended with no pod left, its outcome recorded in status and an Event. Kafka is asked in
the reconcile's thread, each request retried through a leader change within
kafkaDeadlineSeconds. Should recording it fail (the API server down), the next reconcile runs
the action again: every action is idempotent except a reset to latest, which then takes the
log end of that moment."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from spark_app.api.offsets_admin import OffsetsRefused, OffsetsResult
from spark_app.api.option_values import OptionError
from spark_app.kafka.errors import KafkaUnavailable, UnknownTopic
from streamingjob_operator.api.models import OffsetsActionSpec, StreamingJobSpec, parse_status
from streamingjob_operator.children.builders import build_offsets_configmap
from streamingjob_operator.io.errors import ConflictError, TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import run_offsets_action
from streamingjob_operator.observe import Observer
from streamingjob_operator.rules import offsets_action
from streamingjob_operator.rules.decide import Decision, Event
from streamingjob_operator.rules.observed import Observed
from streamingjob_operator.rules.status import set_conditions, status_body
from streamingjob_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

_RECORD_TRIES = 5  # status writes that may conflict before the reconcile is retried


class OffsetsActions:
    def __init__(
        self,
        api: KubeApi,
        settings: OperatorSettings,
        observer: Observer,
        clock: Callable[[], datetime],
    ) -> None:
        self.api, self.settings, self.observer, self.clock = api, settings, observer, clock
        self.runner = run_offsets_action  # the Kafka side (a test may stand in for it)

    def gate(
        self, job: dict[str, Any], spec: StreamingJobSpec, decision: Decision, observed: Observed
    ) -> offsets_action.Gate | None:
        """What this step does with a pending spec.offsetsAction (offsets_action.gate); a
        refusal is recorded in the decision's status and events."""
        pods_left = bool(observed.pods) or decision.action != "none"
        gate = offsets_action.gate(spec, decision.status, pods_left)
        if gate == "refuse" and spec.offsets_action is not None:
            decision.events.append(
                offsets_action.record(
                    decision.status,
                    spec.offsets_action,
                    "Refused",
                    offsets_action.RUNNING_REFUSAL,
                    who=offsets_action.requested_by(job["metadata"]),
                    now=observed.now,
                    history_limit=self.settings.history_limit,
                )
            )
        return gate

    def run(
        self,
        job: dict[str, Any],
        spec: StreamingJobSpec,
        events: list[tuple[dict[str, Any], Event]],
    ) -> dict[str, Any]:
        """Runs spec.offsetsAction and records the outcome; returns the job as written."""
        action = spec.offsets_action
        assert action is not None
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        outcome, message, result, config_map = self._ask_kafka(job, spec, action)
        # Kafka has answered: record it even if the job changed meanwhile (a resume right
        # after the request must still see offsetsActedSinceLaunch), on the job as it is now.
        for _ in range(_RECORD_TRIES):
            now = self.clock()
            st = parse_status(job.get("status"))
            event = offsets_action.record(
                st,
                action,
                outcome,
                message,
                who=offsets_action.requested_by(meta),
                now=now,
                history_limit=self.settings.history_limit,
                result=result,
                config_map=config_map,
            )
            set_conditions(st, int(job["metadata"].get("generation") or 0), now)
            try:
                job = self.api.replace_status(job, status_body(st))
                break
            except ConflictError:
                fresh = self.api.get_job(namespace, name)
                if fresh is None:
                    return job
                job = fresh
        else:
            raise TransientError(f"offsets action of {namespace}/{name}: status kept changing")
        log.info("offsets action of %s/%s: %s", namespace, name, event.message)
        events.append((job, event))
        return job

    def _ask_kafka(
        self, job: dict[str, Any], spec: StreamingJobSpec, action: OffsetsActionSpec
    ) -> tuple[offsets_action.Outcome, str, OffsetsResult | None, str]:
        """The offsets action's Kafka side: (outcome, message, result, the listing
        ConfigMap's name); a success's listing is applied here."""
        result = None
        try:
            target = self.observer.kafka_target(job["metadata"]["namespace"], spec)
            if target is None:
                raise OffsetsRefused("the Secret of spec.kafkaCredentials is missing")
            request = offsets_action.request(action)
            settings = self.settings
            result = self.runner(
                target, request, settings.kafka_timeout_seconds, settings.kafka_deadline_seconds
            )
            message = result.summary()
            listing = offsets_action.listing(result, self.clock())
            child = build_offsets_configmap(job, listing.data)
            self.api.apply(child)
            return "Succeeded", message, result, child["metadata"]["name"]
        except OffsetsRefused as exc:
            return "Refused", f"nothing written: {exc}", result, ""
        except (KafkaUnavailable, UnknownTopic, OptionError) as exc:
            return "Failed", f"nothing written: {exc}", result, ""
