"""The validate step: every check of children/validation.py on a spec that may be launched
next, with the API server's help (the Secrets it names, server-side dry runs of its pods).
The checks without I/O and the dry runs run once per generation when they pass; the Secrets
are read every time (they may go)."""

from __future__ import annotations

from streamingjob_operator.api.job import Job
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

    def problems_of(self, job: Job) -> str | None:
        """The problems of a spec that may be launched next: before a launch, on a new
        generation (a manual act would relaunch), and while Invalid (to see it fixed).
        None: nothing in the way."""
        status, generation = job.status, job.meta.generation
        if (
            status.launch_state == "Created"
            and status.phase != "Invalid"
            and generation == status.observed_generation
        ):
            return None
        problems = self.validate(job)
        return summary(problems) if problems else None

    def validate(self, job: Job) -> list[InvalidJobError]:
        spec, meta = job.spec, job.meta
        problems = check_secrets(spec, meta.namespace, self.api.secret_data)
        key = (meta.uid, meta.generation)
        if key in self._valid:
            return problems
        # the children are built from the object as the API server returned it
        problems += check_spec(spec) + check_size(job.body, spec)
        if not problems:
            for dry in dry_run_pods(job.body, spec, job.status):
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
