"""spec.job.sql as the models and the CRD see it: exclusive with transform (one message naming
both fields, in pydantic and in the CEL rule), bounded, never blank; and the clipping of
Spark's messages (spark_app.runner.sql_transform.spark_message)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spark_app.api.job_spec import MAX_SQL, SQL_OR_TRANSFORM
from spark_app.api.manifest import ManifestError, load_manifest
from spark_app.runner.sql_transform import MESSAGE_LIMIT, spark_message
from streamingjob_operator.api.crd import build_crd

pytestmark = pytest.mark.unit

MANIFEST: dict[str, Any] = {
    "apiVersion": "sparkkafka.dev/v1alpha1",
    "kind": "StreamingJob",
    "metadata": {"name": "orders"},
    "spec": {
        "job": {
            "source": {"bootstrapServers": "kafka:9092", "subscribe": ["orders"], "groupId": "g"},
            "sink": {"format": "noop"},
        },
        "checkpoint": {"location": "file:///mnt/ckpt"},
    },
}


def with_job(**job: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(MANIFEST)
    manifest["spec"]["job"].update(job)
    return manifest


def refusal(**job: Any) -> str:
    with pytest.raises(ManifestError) as caught:
        load_manifest(with_job(**job))
    return str(caught.value)


def test_sql_and_transform_together_are_refused_naming_both_fields():
    said = refusal(sql="SELECT * FROM source", transform="orders:typed")
    assert "spec.job.sql" in said and "spec.job.transform" in said
    assert SQL_OR_TRANSFORM in said


@pytest.mark.parametrize("sql", ["", "   ", "\n\t", "x" * (MAX_SQL + 1)])
def test_an_empty_blank_or_too_long_query_is_refused_naming_the_field(sql):
    assert "spec.job.sql:" in refusal(sql=sql)


def test_a_query_up_to_the_bound_with_surrounding_whitespace_is_kept_as_written():
    padding = "x" * (MAX_SQL - 40)
    sql = f"\n SELECT * FROM source -- {padding}\n"
    assert len(sql) <= MAX_SQL
    job = load_manifest(with_job(sql=sql)).spec.job
    assert job.sql == sql and job.transform is None


def _job_schema() -> dict[str, Any]:
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root["properties"]["spec"]["properties"]["job"]


def test_the_crd_carries_the_bounds_the_view_name_and_the_exclusion_rule():
    job = _job_schema()
    sql = job["properties"]["sql"]
    assert (sql["minLength"], sql["maxLength"], sql["type"]) == (1, MAX_SQL, "string")
    assert "view `source`" in sql["description"] and "Excludes transform" in sql["description"]
    rules = {r["message"]: r for r in job["x-kubernetes-validations"]}
    assert rules[SQL_OR_TRANSFORM] == {
        "rule": "!(has(self.sql) && has(self.transform))",
        "message": SQL_OR_TRANSFORM,
        "fieldPath": ".sql",
    }


UNRESOLVED = (
    "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter with name "
    "`valu` cannot be resolved. Did you mean one of the following? [`value`, `key`]. SQLSTATE: "
    "42703; line 3 pos 6;\n'Project [*]\n+- 'Filter ('valu > 1)\n   +- ~SubqueryAlias source\n"
)


def test_an_analysis_error_keeps_its_class_and_position_without_the_plan():
    assert spark_message(UNRESOLVED) == UNRESOLVED.split(";\n")[0]
    assert spark_message(UNRESOLVED).endswith("SQLSTATE: 42703; line 3 pos 6")


def test_a_long_parse_error_keeps_its_header_and_the_lines_at_the_caret():
    lines = [f"  , column_{n}" for n in range(400)]
    lines[300] = "  , oops oops"
    sql = "\n".join(["SELECT 1", *lines[:301], "-----^^^", *lines[301:]])
    text = (
        "\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'oops'. SQLSTATE: 42601 (line 302, pos 5)"
        f"\n\n== SQL ==\n{sql}\n"
    )
    said = spark_message(text)
    assert len(said) <= MESSAGE_LIMIT
    assert said.startswith("[PARSE_SYNTAX_ERROR] Syntax error at or near 'oops'")
    assert "(line 302, pos 5)" in said and "== SQL ==" in said
    assert said.splitlines()[-3:] == ["  , oops oops", "-----^^^", "  , column_301"]
    assert "column_10\n" not in said  # far from the error: left out


def test_a_message_without_context_is_clipped_to_the_limit():
    said = spark_message("[SOME_ERROR] " + "x" * 5000)
    assert len(said) == MESSAGE_LIMIT and said.startswith("[SOME_ERROR]") and said.endswith("...")
