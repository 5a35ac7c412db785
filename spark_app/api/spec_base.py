"""What every spec model shares: the base model and the bounded string patterns.

Every value is bounded (a 1 MiB string once made each status write fail) and no string may be
blank or carry surrounding whitespace. Patterns are written for both regex engines that check
them: pydantic's (Rust) and the API server's (Go RE2): ASCII classes, no lookaround.

Pure (no pyspark): the operator imports it through `spark_app.api.manifest`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from spark_app.api.offsets import TOPIC_PATTERN

MAX_TEXT = 4096
# Kafka's topic names (with max_length=MAX_TOPIC beside it).
TOPIC = TOPIC_PATTERN
TOPIC_RULE = "Kafka topic names: 1 to 249 of a-z A-Z 0-9 . _ -, not '.' or '..'"
# host:port[,host:port]; a host is a name, an IPv4 address or a bracketed IPv6 address.
_HOST_PORT = r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}"
BOOTSTRAP = f"^{_HOST_PORT}(,{_HOST_PORT})*$"
# Text without leading or trailing whitespace (and not blank).
TRIMMED = r"^[^\s](.*[^\s])?$"
# Kubernetes object names (a Secret's) and Secret keys.
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"


def secret_name(description: str) -> Any:
    """The field naming a Secret in the job's namespace."""
    return Field(min_length=1, max_length=253, pattern=K8S_NAME, description=description)


def secret_key(default: str, description: str) -> Any:
    """The field naming one key of that Secret."""
    return Field(
        default=default, min_length=1, max_length=253, pattern=SECRET_KEY, description=description
    )


class SpecModel(BaseModel):
    """camelCase in YAML, snake_case in Python; unknown fields are an error, not a surprise."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )
