"""The operator's error types: the one place API and Kafka failures become kopf outcomes."""

from __future__ import annotations

import kopf

from streamingjob_operator.children.validation import InvalidJobError  # noqa: F401  (lives in the pure layer


class OperatorError(Exception):
    """Base of the operator's own errors."""


class TransientError(kopf.TemporaryError, OperatorError):
    """Worth retrying: API server hiccups, conflicts, a child still terminating."""

    def __init__(self, message: str, delay: float = 2.0) -> None:
        super().__init__(message, delay=delay)


class ConflictError(TransientError):
    """The object changed under us (resourceVersion precondition failed)."""


class NotFoundError(OperatorError):
    """The object does not exist."""


class FatalError(kopf.PermanentError, OperatorError):
    """The API server refused the request (forbidden, an invalid object we built from the
    spec). Retrying at once cannot help: the reconciler records it in status (Degraded,
    reason ApiRejected) with a Warning Event and retries with backoff, as a fixed spec or
    RBAC rule can make it pass."""
