"""Rules the spec's fields share, each once as CEL (for the CRD) and once for pydantic (for the
runner and the operator), with one message: a location, the keys of a map, a null value.

This module must not import pyspark: the operator imports it too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    Field,
)

from spark_app.api.spec_base import (
    MAX_TEXT,
)

# A Hadoop file system location: file:///path or scheme://authority[/path]. Characters that
# Hadoop's Path parses specially (':' in the path, '?', '#', '%', spaces) are refused.
LOCATION = (
    r"^file:///[A-Za-z0-9._~/@=+,-]*$"
    r"|^[a-z][a-z0-9+.-]*://[A-Za-z0-9._~@:-]+(/[A-Za-z0-9._~/@=+,-]*)?$"
)
# Each rule is (CEL, message); `check_location` applies the same rules for pydantic, in order.
_LOCATION_RULES = [
    (
        "!self.startsWith('file:') || self.startsWith('file:///')",
        "a file:// location needs an absolute path: file:///path",
    ),
    (
        "!self.startsWith('s3a://') || self.matches('^s3a://[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?(/.*)?$')",
        "an s3a:// location starts with a bucket name (lower case): s3a://bucket/prefix",
    ),
    (
        "self.matches('^[a-z][a-z0-9+.-]*://')",
        "a location names its file system: file:///path on a mounted volume, "
        "s3a://bucket/prefix, hdfs://namenode/path (a bare path would be resolved against "
        "whatever fs.defaultFS is)",
    ),
    (
        "!self.matches('^file://(/+[.]{0,2})*$')",
        "a file:// location is a directory on a mounted volume, not the root (file:/// is the "
        "container's read-only root file system): file:///mnt/checkpoints",
    ),
]
_S3A_BUCKET = re.compile(r"^s3a://[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?(/.*)?$")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")
# The local root (an object store's or a name node's root is a fine base: every job writes
# below <location>/<namespace>/<name>).
_ROOT = re.compile(r"^file://(/+[.]{0,2})*$")
CLIENT_KEY = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"


def check_location(value: str) -> str:
    """The CEL rules of a location, for pydantic (the same messages)."""
    broken = [
        value.startswith("file:") and not value.startswith("file:///"),
        value.startswith("s3a://") and not _S3A_BUCKET.match(value),
        not _SCHEME.match(value),
        bool(_ROOT.match(value)),
    ]
    for (_, message), fails in zip(_LOCATION_RULES, broken, strict=True):
        if fails:
            raise ValueError(message)
    return value


def location_schema() -> dict[str, Any]:
    return {
        "x-kubernetes-validations": [{"rule": rule, "message": m} for rule, m in _LOCATION_RULES]
    }


def check_keys(value: dict[str, str], pattern: str, what: str) -> dict[str, str]:
    for key in value:
        if not re.match(pattern, key):
            raise ValueError(f"{what} key {key[:100]!r} must match {pattern}")
    return value


def keys_schema(pattern: str, limit: int) -> dict[str, Any]:
    """CEL for map keys (a structural schema has no propertyNames); the full pattern is the
    models' (a regex over unbounded keys would exceed the API server's CEL cost budget)."""
    return {
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(k, size(k) >= 1 && size(k) <= {limit})",
                "message": f"keys must have 1 to {limit} characters ({pattern})",
            },
            NO_NULL_VALUES,
        ]
    }


# A null in a map of strings: the API server would drop the key without a word (it prunes
# nulls of fields that are not nullable), so the job would run without the setting. The value
# schemas are therefore nullable and this rule refuses the null, naming it.
NULL_VALUE = "a value is null (the key would be dropped): quote it or remove the key"
NO_NULL_VALUES: dict[str, Any] = {
    "rule": "self.all(k, type(self[k]) != null_type)",
    "message": NULL_VALUE,
}
# A string value of such a map: nullable in the schema (refused by NO_NULL_VALUES instead).
MapValue = Annotated[str, Field(max_length=MAX_TEXT, json_schema_extra={"nullable": True})]
Options = Annotated[dict[str, MapValue], Field(max_length=100)]


def refusing_keys_schema(fields: dict[str, str], key: str, refused: str) -> dict[str, Any]:
    """A map of client keys whose CEL rule refuses the keys in `fields` (`key`: the CEL
    expression of a key as compared), naming the field to use for each."""
    schema = keys_schema(CLIENT_KEY, 255)
    schema["x-kubernetes-validations"].append(
        {
            "rule": f"self.all(k, !({key} in {list(fields)}))",
            "message": f"{refused} are refused: "
            + ", ".join(f"{name} (use {field})" for name, field in fields.items()),
        }
    )
    return schema
