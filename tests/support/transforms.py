"""Transforms for tests (spec.job.transform: "tests.support.transforms:<name>")."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def even_ids(frame: DataFrame) -> DataFrame:
    """Keeps records whose JSON value has an even id; key and value pass through."""
    ids = F.get_json_object(F.col("value").cast("string"), "$.id").cast("long")
    return frame.where(ids % 2 == 0).select("key", "value")


def needs_a_missing_package(frame: DataFrame) -> DataFrame:
    """Fails while the query is planned, as a transform whose image lacks a package does."""
    import not_installed_anywhere  # type: ignore[import-not-found]  # noqa: F401

    return frame
