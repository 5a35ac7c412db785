"""spec.offsetsAction in the reconcile (its rules: rules/offsets_action.py; its gate on the
decision, a running job's refusal included: rules/plan.py): run once the job is suspended with
no pod left, its outcome recorded in status and an Event. Kafka is asked in
the reconcile's thread, each request retried through a leader change within
kafkaDeadlineSeconds. Should recording it fail (the API server down), the next reconcile runs
the action again: every action is idempotent except a reset to latest, which then takes the
log end of that moment."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from spark_app.api.offsets_admin import OffsetsRefused, OffsetsRequest, OffsetsResult
from spark_app.api.option_values import OptionError
from spark_app.kafka.errors import KafkaUnavailable, UnknownTopic
from streamingjob_operator.api.job import Job, JobMeta
from streamingjob_operator.api.models import OffsetsActionSpec, parse_status
from streamingjob_operator.children.builders import build_offsets_configmap
from streamingjob_operator.io.errors import ConflictError, TransientError
from streamingjob_operator.io.k8s import KubeApi
from streamingjob_operator.io.kafka import KafkaTarget, run_offsets_action
from streamingjob_operator.observe import Observer
from streamingjob_operator.rules import offsets_action
from streamingjob_operator.rules.decide import Event
from streamingjob_operator.rules.history import keep_warnings
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
        # the Kafka side (a test, or the simulation, may stand in for it)
        self.runner: Callable[[KafkaTarget, OffsetsRequest, float, float], OffsetsResult]
        self.runner = run_offsets_action

    def run(self, job: Job, events: list[tuple[dict[str, Any], Event]]) -> dict[str, Any]:
        """Runs spec.offsetsAction and records the outcome; returns the job as written."""
        action = job.spec.offsets_action
        assert action is not None
        who = offsets_action.requested_by(job.meta)
        namespace, name = job.meta.key
        outcome, message, result, config_map = self._ask_kafka(job, action)
        # Kafka has answered: record it even if the job changed meanwhile (a resume right
        # after the request must still see offsetsActedSinceLaunch), on the job as it is now.
        body = job.body
        for _ in range(_RECORD_TRIES):
            now = self.clock()
            st = parse_status(body.get("status"))
            event = offsets_action.record(
                st,
                action,
                outcome,
                message,
                who=who,
                now=now,
                history_limit=self.settings.history_limit,
                result=result,
                config_map=config_map,
            )
            set_conditions(st, JobMeta.of(body["metadata"]).generation, now)
            meta = JobMeta.of(body["metadata"])
            keep_warnings(st, meta.name, meta.uid, [event], now)  # a refusal, a failure
            try:
                body = self.api.replace_status(body, status_body(st))
                break
            except ConflictError:
                fresh = self.api.get_job(namespace, name)
                if fresh is None:
                    return body
                body = fresh
        else:
            raise TransientError(f"offsets action of {namespace}/{name}: status kept changing")
        log.info("offsets action of %s/%s: %s", namespace, name, event.message)
        events.append((body, event))
        return body

    def _ask_kafka(
        self, job: Job, action: OffsetsActionSpec
    ) -> tuple[offsets_action.Outcome, str, OffsetsResult | None, str]:
        """The offsets action's Kafka side: (outcome, message, result, the listing
        ConfigMap's name); a success's listing is applied here."""
        result = None
        try:
            target = self.observer.kafka_target(job.meta.namespace, job.spec)
            if target is None:
                raise OffsetsRefused("the Secret of spec.kafkaCredentials is missing")
            request = offsets_action.request(action)
            settings = self.settings
            result = self.runner(
                target, request, settings.kafka_timeout_seconds, settings.kafka_deadline_seconds
            )
            message = result.summary()
            listing = offsets_action.listing(result, self.clock())
            child = build_offsets_configmap(job.body, listing.data)
            self.api.apply(child)
            return "Succeeded", message, result, child["metadata"]["name"]
        except OffsetsRefused as exc:
            return "Refused", f"nothing written: {exc}", result, ""
        except (KafkaUnavailable, UnknownTopic, OptionError) as exc:
            return "Failed", f"nothing written: {exc}", result, ""
