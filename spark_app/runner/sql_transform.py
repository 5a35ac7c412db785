"""`spec.job.sql`: a Spark SQL query over the source, run on the source's DataFrame registered
as the temporary view `source` (`job_spec.SQL_VIEW`), instead of a transform in an image.

Spark parses and analyses a statement when `spark.sql` is called, before any query starts, so
every mistake is found before anything is read. A statement that is not a query (DROP TABLE,
SET, INSERT, ...) would be *run* by `spark.sql` at once: it is refused from the parse alone.
Errors keep Spark's own text (its error class, line and position, the `^^^` context), clipped.
"""

from __future__ import annotations

import re

from spark_app.api.job_spec import SQL_VIEW

FIELD = "spec.job.sql"
MESSAGE_LIMIT = 1500  # Spark's part of a message: the termination log holds 4 KiB in all
# Analysis errors end their first part with the position, then print the query plan.
_POSITION_THEN_PLAN = re.compile(r"; line \d+ pos \d+(?=;\n)")


class SqlRefused(ValueError):
    """spec.job.sql cannot run; the message starts with the field's name."""


def apply_sql(spark, frame, statement: str):
    """The DataFrame of `statement` over `frame` (the view `source`): a streaming query,
    analysed. Raises SqlRefused naming the field, with Spark's message."""
    from pyspark.errors import AnalysisException

    check_single_query(spark, statement)
    frame.createOrReplaceTempView(SQL_VIEW)
    try:
        result = spark.sql(statement)
    except AnalysisException as exc:  # unknown columns, functions, tables; type mismatches
        raise SqlRefused(f"{FIELD}: {spark_message(str(exc))}") from None
    if not result.isStreaming:
        raise SqlRefused(
            f"{FIELD}: the query does not read the view `{SQL_VIEW}` (a query over constants "
            f"only, such as VALUES, has no stream to follow): SELECT ... FROM {SQL_VIEW}"
        )
    return result


def check_single_query(spark, statement: str) -> None:
    """Parses without running: one statement, and that statement a query."""
    from pyspark.errors import ParseException

    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        plan = parser.parsePlan(statement)  # one statement (two are a syntax error here)
    except ParseException as exc:
        raise SqlRefused(f"{FIELD}: {spark_message(str(exc))}") from None
    try:
        parser.parseQuery(_without_final_semicolons(statement))
    except ParseException:
        raise SqlRefused(
            f"{FIELD}: not a query but a {plan.nodeName()} statement; spec.job.sql is one "
            f"SELECT over the view `{SQL_VIEW}` (no DDL, DML, SET or several statements), "
            f"e.g. SELECT * FROM {SQL_VIEW} WHERE ..."
        ) from None


def _without_final_semicolons(statement: str) -> str:
    """parsePlan allows `SELECT ...;`, parseQuery not: the same text without them."""
    return statement.rstrip().rstrip(";").rstrip()


def spark_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Spark's message for users: its error class, position and `^^^` context, without the
    query plan analysis errors append; a long one keeps the lines around the `^^^`."""
    text = text.strip()
    if found := _POSITION_THEN_PLAN.search(text):
        text = text[: found.end()]
    if len(text) > limit:
        text = _around_caret(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _around_caret(text: str) -> str:
    """A parse error's header and the few lines of its `== SQL ==` context at the `^^^`."""
    lines = text.splitlines()
    caret = next((i for i, line in enumerate(lines) if line.rstrip().endswith("^^^")), None)
    if caret is None or "== SQL ==" not in lines:
        return text
    start = lines.index("== SQL ==") + 1
    shown = lines[max(start, caret - 3) : caret + 2]
    return "\n".join([*lines[:start], *(["..."] if caret - 3 > start else []), *shown])
