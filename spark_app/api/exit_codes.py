"""The runner's exit codes and its termination message's mark: the contract between the runner
(spark_app.runner.runner, which exits with them) and the operator (which turns them into
conditions, or holds an invalid job).
"""

from __future__ import annotations

# The runner's exit codes when Kafka refuses the job's credentials / the TLS handshake fails
# (spark_app.runner.runner); the operator turns them into conditions.
EXIT_KAFKA_AUTH, EXIT_KAFKA_TLS = 3, 4
KAFKA_EXIT_REASONS = {EXIT_KAFKA_AUTH: "KafkaAuthFailed", EXIT_KAFKA_TLS: "KafkaTLSFailed"}
# ... and when a fresh epoch could not commit the previous epoch's last durable batch to the
# group (Kafka or the checkpoint's storage away): nothing was read, the start is retried.
EXIT_CATCH_UP_FAILED = 5
# ... and when the brokers did not answer or a subscribed topic does not exist at the start
# (it may be created): nothing was read, the start is retried with backoff.
EXIT_KAFKA_UNAVAILABLE = 6
# The input cannot run (spec.job.sql, spec.job.transform, the manifest): nothing was read or
# committed, and a restart would fail the same way, so the operator holds the job (phase
# Invalid, reason InvalidSpec) until the spec changes.
EXIT_INVALID = 2
# ... and only with this mark at the start of its termination message: exit 2 alone is any
# program's (Python's own for a missing file, argparse's for an unknown option of an older
# runner), which is an ordinary failure, restarted with backoff.
REFUSED_MARK = "the runner refused the job: "
RUNNER_EXIT_REASONS = {
    **KAFKA_EXIT_REASONS,
    EXIT_CATCH_UP_FAILED: "CatchUpFailed",
    EXIT_KAFKA_UNAVAILABLE: "KafkaUnavailable",
    EXIT_INVALID: "InvalidSpec",
}
