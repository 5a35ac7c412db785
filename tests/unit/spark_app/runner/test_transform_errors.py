"""A transform that raises while the query is planned is invalid input (exit 2, InvalidSpec):
it would raise again at every restart."""

from __future__ import annotations

import pytest

from spark_app.api.job_spec import JobSpec
from spark_app.runner.query import InvalidJob, transformed

pytestmark = pytest.mark.unit


def _job(transform: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "source": {"bootstrapServers": "localhost:9092", "subscribe": ["t"], "groupId": "g"},
            "sink": {"format": "parquet", "path": "file:///tmp/out"},
            "transform": transform,
        }
    )


def test_a_transform_that_raises_names_the_field_the_function_and_the_error():
    with pytest.raises(InvalidJob) as raised:
        transformed(None, _job("tests.support.transforms:needs_a_missing_package"), object())
    assert str(raised.value) == (
        "spec.job.transform: tests.support.transforms:needs_a_missing_package raised "
        "ModuleNotFoundError: No module named 'not_installed_anywhere'"
    )


def test_a_transform_that_cannot_be_loaded_says_where_it_must_be():
    with pytest.raises(InvalidJob, match="must be importable in the driver image"):
        transformed(None, _job("tests.support.transforms:no_such_function"), object())
