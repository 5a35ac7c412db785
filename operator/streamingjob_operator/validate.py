"""The validate step: every check of children/validation.py on a spec that may be launched
next, with the API server's help (the Secrets it names, server-side dry runs of its pods).
The checks without I/O and the dry runs run once per generation when they pass; the Secrets
are read every time (they may go)."""

from __future__ import annotations

from typing import Any

from streamingjob_operator.api.models import StreamingJobSpec, StreamingJobStatus
from streamingjob_operator.children.dry_run import dry_run_pods, rejection_problems
from streamingjob_operator.children.validation import (
    InvalidJobError,
    check_secrets,
    check_size,
    check_spec,
    summary,
)
from streamingjob_operator.io.k8s import KubeApi

_REMEMBERED = 10_000  # generations that passed, kept at most


class Validator:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        # (uid, generation) whose spec passed the checks without Secrets
        self._valid: set[tuple[str, int]] = set()

    def problems_of(
        self, job: dict[str, Any], spec: StreamingJobSpec, status: StreamingJobStatus
    ) -> str | None:
        """The problems of a spec that may be launched next: before a launch, on a new
        generation (a manual act would relaunch), and while Invalid (to see it fixed).
        None: nothing in the way."""
        generation = int(job["metadata"].get("generation") or 0)
        if (
            status.launch_state == "Created"
            and status.phase != "Invalid"
            and generation == status.observed_generation
        ):
            return None
        problems = self.validate(job, spec, status)
        return summary(problems) if problems else None

    def validate(
        self, job: dict[str, Any], spec: StreamingJobSpec, status: StreamingJobStatus
    ) -> list[InvalidJobError]:
        meta = job["metadata"]
        problems = check_secrets(spec, meta["namespace"], self.api.secret_data)
        key = (meta.get("uid", ""), int(meta.get("generation") or 0))
        if key in self._valid:
            return problems
        problems += check_spec(spec) + check_size(job, spec)
        if not problems:
            for dry in dry_run_pods(job, spec, status):
                if dry.template_only and problems:
                    continue  # the template's fields were named already
                rejection = self.api.dry_run_create(dry.obj)
                if rejection is not None:
                    problems += rejection_problems(dry, spec, rejection)
        if not problems:
            if len(self._valid) > _REMEMBERED:
                self._valid.clear()
            self._valid.add(key)
        return problems
