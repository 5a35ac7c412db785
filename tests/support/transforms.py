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


def fails_each_first_attempt(frame: DataFrame) -> DataFrame:
    """Every task's first attempt fails (a transient failure: a broker restarting under a
    commit), the retry passes the records on unchanged."""
    from pyspark import TaskContext

    @F.udf(returnType="binary")
    def once(value: bytes) -> bytes:
        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0:
            raise RuntimeError("this task's first attempt fails")
        return value

    return frame.withColumn("value", once("value"))
