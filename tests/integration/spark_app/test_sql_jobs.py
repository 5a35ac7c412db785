"""spec.job.sql on the runner: a real broker, local Spark, the runner as a process.

A filter and a projection over the source's view write exactly the expected rows, each checked
against the record Kafka holds; an invalid query exits 2 before anything is read, its
termination message naming spec.job.sql with Spark's error class and position; statements that
are not one query are refused from the parse, never run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from pyspark.sql import SparkSession

from devbed.ports import free_port
from spark_app.api.exit_codes import REFUSED_MARK
from spark_app.runner.sql_transform import SqlRefused, apply_sql
from tests.support.file_sink import committed_files
from tests.support.kafka_tools import (
    consume_to_end,
    group_offsets,
    log_end_offsets,
    new_topic,
    produce,
)
from tests.support.runner_process import RunnerProcess, job_manifest
from tests.support.spark_session import local_session

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]

# A filter and a projection: expressions over the value cast to a string, and Kafka's
# metadata columns as they are.
FILTER_AND_PROJECT = """
SELECT CAST(key AS STRING) AS order_key,
       get_json_object(CAST(value AS STRING), '$.id') AS id_text,
       upper(CAST(value AS STRING)) AS shouted,
       topic, partition, offset, timestampType
FROM source
WHERE CAST(get_json_object(CAST(value AS STRING), '$.id') AS INT) % 7 = 0
"""


def sink_rows(output: Path) -> list[dict]:
    """Every row the file sink committed (through its _spark_metadata log), all epochs."""
    rows = []
    for epoch in sorted(output.glob("epoch-*")):
        for path in committed_files(epoch):
            rows += pq.read_table(path).to_pylist()
    return rows


def expected_rows(bootstrap: str, topic: str) -> list[dict]:
    """What the query gives each record Kafka holds, computed here from the record itself."""
    rows = []
    for message in consume_to_end(bootstrap, topic, "read_committed"):
        text = message.value().decode()
        if json.loads(text)["id"] % 7:
            continue
        rows.append(
            {
                "order_key": message.key().decode(),
                "id_text": str(json.loads(text)["id"]),
                "shouted": text.upper(),
                "topic": topic,
                "partition": message.partition(),
                "offset": message.offset(),
                "timestampType": message.timestamp()[0] - 1,  # librdkafka counts from 1
            }
        )
    return rows


def by_position(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def test_a_sql_filter_and_projection_writes_exactly_the_expected_rows(kafka, tmp_path):
    topic = new_topic(kafka.bootstrap, partitions=3)
    produce(kafka.bootstrap, topic, range(3000))
    manifest = job_manifest("sql", kafka.bootstrap, topic, tmp_path, startingOffsets="earliest")
    job = manifest["spec"]["job"]
    job["sql"] = FILTER_AND_PROJECT
    job["trigger"] = {"availableNow": True}
    runner = RunnerProcess(manifest, tmp_path).start()
    assert runner.wait(240) == 0, runner.tail()

    written = by_position(sink_rows(tmp_path / "output"))
    expected = by_position(expected_rows(kafka.bootstrap, topic))
    assert len(expected) == len(range(0, 3000, 7))
    assert len(written) == len(expected)  # no record twice, none missing
    for got, want in zip(written, expected, strict=True):
        assert got == want
    assert sorted(int(r["id_text"]) for r in written) == list(range(0, 3000, 7))
    ends = log_end_offsets(kafka.bootstrap, topic)
    assert group_offsets(kafka.bootstrap, "sql-group", topic) == ends  # all of it read


def test_the_run_sql_example_keeps_the_large_orders_as_columns(kafka, tmp_path):
    """`make run-sql`'s job (examples/local-sql-job.yaml) on the sample producer's orders:
    exactly the orders of 600 or more, their fields as columns, each where Kafka holds it."""
    topic = new_topic(kafka.bootstrap, partitions=3)
    producer = [sys.executable, str(REPO / "examples" / "sample_producer.py")]
    to = ["--bootstrap", kafka.bootstrap, "--topic", topic]
    subprocess.run([*producer, *to, "--count", "2000", "--rate", "100000"], check=True, timeout=120)
    manifest = yaml.safe_load((REPO / "examples" / "local-sql-job.yaml").read_text())
    ours = job_manifest("sqlexample", kafka.bootstrap, topic, tmp_path)
    ours["spec"]["job"]["sql"] = manifest["spec"]["job"]["sql"]  # the example's own query
    ours["spec"]["job"]["trigger"] = {"availableNow": True}
    ours["spec"]["job"]["source"]["startingOffsets"] = "earliest"
    runner = RunnerProcess(ours, tmp_path).start()
    assert runner.wait(240) == 0, runner.tail()

    expected = []
    for message in consume_to_end(kafka.bootstrap, topic, "read_committed"):
        order = json.loads(message.value())
        if order["amount"] >= 600:
            where = {"partition": message.partition(), "offset": message.offset()}
            expected.append({**order, **where})
    written = [{k: r[k] for k in expected[0]} for r in sink_rows(tmp_path / "output")]
    assert len(expected) == 400  # amounts (n % 500) * 1.5: 400 of 2000 reach 600
    assert by_position(written) == by_position(expected)
    assert set(pq.read_schema(committed_files(tmp_path / "output" / "epoch-1")[0]).names) == {
        "id", "customer", "amount", "partition", "offset", "timestamp"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        (
            "SELECT CAST(value AS STRING) AS v\nFROM source\nWHER offset > 3",
            [
                "spec.job.sql: [PARSE_SYNTAX_ERROR] Syntax error at or near 'offset'",
                "(line 3, pos 5)",
                "== SQL ==\nSELECT CAST(value AS STRING) AS v\nFROM source\nWHER offset > 3\n"
                "-----^^^",
            ],
        ),
        (
            "SELECT CAST(value AS STRING) AS v\nFROM source\nWHERE offst > 3",
            [
                "spec.job.sql: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or "
                "function parameter with name `offst` cannot be resolved.",
                "SQLSTATE: 42703; line 3 pos 6",
            ],
        ),
    ],
    ids=["syntax-error", "unknown-column"],
)
def test_an_invalid_query_exits_2_naming_the_field_and_reads_nothing(kafka, tmp_path, sql, said):
    topic = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, topic, range(100))
    manifest = job_manifest("badsql", kafka.bootstrap, topic, tmp_path)
    manifest["spec"]["job"]["sql"] = sql
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {"STREAMJOB_TERMINATION_LOG": str(termination)}
    runner = RunnerProcess(manifest, tmp_path, env=env).start()
    assert runner.wait(180) == 2, runner.tail()

    marked = termination.read_text()  # the mark: the runner's refusal, not any exit 2
    assert marked.startswith(REFUSED_MARK + "spec.job.sql: [")
    message = marked.removeprefix(REFUSED_MARK)
    for part in said:
        assert part in message, message
    assert "'Project" not in message  # Spark's plan is left out
    assert message in runner.output()  # the driver's log says the same
    report = runner.report()
    assert report["state"] == "failed" and report["error"] == message
    assert "latestBatch" not in report
    assert group_offsets(kafka.bootstrap, "badsql-group", topic) == {0: None, 1: None}
    assert not list((tmp_path / "checkpoints").rglob("offsets/*"))  # no batch planned
    assert not (tmp_path / "output").exists() or not sink_rows(tmp_path / "output")


def test_a_registry_away_at_the_start_is_a_failure_to_retry_not_invalid_input(kafka, tmp_path):
    """The source resolves its reader schema when the DataFrame is built, before the query:
    an unreachable registry then is exit 1 (the operator restarts with backoff), not exit 2
    (held as InvalidSpec), though Spark reports both as an AnalysisException."""
    topic = new_topic(kafka.bootstrap, partitions=1)
    manifest = job_manifest("noregistry", kafka.bootstrap, topic, tmp_path)
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    value = {"format": "avro", "schemaRegistry": {"url": url, "timeoutSeconds": 1}}
    manifest["spec"]["job"]["source"]["value"] = value
    manifest["spec"]["job"]["sql"] = "SELECT value.* FROM source"
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {"STREAMJOB_TERMINATION_LOG": str(termination)}
    runner = RunnerProcess(manifest, tmp_path, env=env).start()
    assert runner.wait(180) == 1, runner.tail()
    said = termination.read_text()
    assert said.startswith("the source could not start: ") and "schemaRegistryUrl" in said
    assert group_offsets(kafka.bootstrap, "noregistry-group", topic) == {0: None}


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = local_session("sql-statements")
    yield session
    session.stop()


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("DROP VIEW source", "not a query but a DropView statement"),
        ("SET spark.sql.shuffle.partitions=7", "not a query but a SetCommand statement"),
        ("CREATE TABLE t AS SELECT * FROM source", "not a query but a "),
        ("INSERT INTO t SELECT * FROM source", "not a query but a InsertIntoStatement"),
        ("SELECT * FROM source; DROP VIEW source", "[PARSE_SYNTAX_ERROR]"),
        ("VALUES (1)", "the query does not read the view `source`"),
    ],
)
def test_what_is_not_one_query_over_the_source_is_refused_without_running(spark, sql, said):
    """On a stream of Spark's own (rate): the statement is refused naming spec.job.sql, and
    a DROP, SET or CREATE never ran (the view, the setting and the catalog are as before)."""
    frame = spark.readStream.format("rate").load()
    frame.createOrReplaceTempView("source")  # as a restart in the same session would find it
    before = spark.conf.get("spark.sql.shuffle.partitions")
    with pytest.raises(SqlRefused) as refused:
        apply_sql(spark, frame, sql)
    assert str(refused.value).startswith("spec.job.sql: ") and said in str(refused.value)
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
    assert [t.name for t in spark.catalog.listTables()] == ["source"]
    assert apply_sql(spark, frame, "SELECT value FROM source;").isStreaming  # one ';' is fine
