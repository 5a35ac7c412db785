"""The exactly-once Kafka sink's pure parts: the replay decision, the catch-up's merge of the
sink's progress, the writers' names, the settings' rules and the plan check
(spark_app/sinks/kafka_eos_sink.py and task_ranges.py, spark_app/runner/eos_progress.py,
spark_app/api/sink_rules.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spark_app.api.job_spec import JobSpec
from spark_app.api.sink_rules import (
    Progress,
    TaskRange,
    already_committed,
    checkpoint_id,
    headers_problem,
    interval_ms,
    mixing_problem,
    mixing_step,
    transaction_problem,
    transactional_id,
    transactional_prefix,
)
from spark_app.api.sink_spec import SinkSpec
from spark_app.runner.checkpoint_log import DurableBatch
from spark_app.runner.eos_progress import committed_ranges, merge
from spark_app.runner.query import kafka_sink_options
from spark_app.sinks import sink_tally, task_ranges
from spark_app.sinks.kafka_eos_sink import EosSinkOptions, ExactlyOnceKafkaWriter, SinkTaskResult
from spark_app.sinks.kafka_sink import KafkaSinkError

pytestmark = pytest.mark.unit

HERE = "file:///ckpt/ns/orders/5f0c2a9e-1b2c-4d3e-8f90-123456789abc/epoch-3"
RANGE = TaskRange("orders", 2, 100, 250)


def test_a_replayed_range_this_checkpoint_committed_is_skipped_and_nothing_else_is():
    mine = checkpoint_id(HERE)
    assert already_committed(Progress(250, mine), mine, RANGE)
    assert already_committed(Progress(400, mine), mine, RANGE)  # a later range's commit
    assert not already_committed(Progress(100, mine), mine, RANGE)  # the batch before
    assert not already_committed(Progress(-1, ""), mine, RANGE)  # never written
    # another epoch's progress never skips: its group was caught up to it, or the user
    # rewound the group to have the output again
    other = checkpoint_id(HERE.replace("epoch-3", "epoch-2"))
    assert not already_committed(Progress(900, other), mine, RANGE)


def test_writers_are_named_per_job_and_source_partition_the_same_in_every_epoch():
    prefix = transactional_prefix("orders", HERE)
    assert prefix == transactional_prefix("orders", HERE.replace("epoch-3", "epoch-4"))
    assert prefix != transactional_prefix("orders", HERE.replace("5f0c", "6f0c"))  # new uid
    assert transactional_id(prefix, "in", 7) == f"{prefix}.sink.in.7"
    assert checkpoint_id(HERE) != checkpoint_id(HERE.replace("epoch-3", "epoch-4"))
    assert len(checkpoint_id(HERE)) == 24  # offset metadata is bounded


def test_the_catch_up_moves_each_partition_to_its_committed_range_never_past_the_plan():
    durable = DurableBatch(4, {("t", 0): 10, ("t", 1): 20}, {("t", 0): 3, ("t", 1): 3})
    planned = DurableBatch(5, {("t", 0): 15, ("t", 1): 30})
    # batch 5 committed for partition 1 only (the driver died before commits/5); the leader
    # epoch kept with partition 0's end still holds, partition 1's new position has none
    moved = merge(durable, planned, {("t", 1): 30})
    assert moved == DurableBatch(5, {("t", 0): 10, ("t", 1): 30}, {("t", 0): 3})
    # an older epoch's progress or one behind the durable batch moves nothing
    assert merge(durable, planned, {("t", 0): 10}) is durable
    assert merge(durable, planned, {("t", 0): 99}) is durable  # past the plan: not ours
    assert merge(durable, None, {("t", 0): 15}) is durable
    # killed in batch 0: nothing durable in the commit log, the sink's output is
    first = merge(None, DurableBatch(0, {("t", 0): 5, ("t", 1): 6}), {("t", 0): 5})
    assert first == DurableBatch(0, {("t", 0): 5})


def test_only_the_previous_checkpoints_progress_counts_for_the_catch_up():
    prefix = transactional_prefix("orders", HERE)
    groups = {
        transactional_id(prefix, "t", 0): Progress(15, checkpoint_id(HERE)),
        transactional_id(prefix, "t", 1): Progress(30, "another checkpoint"),
    }

    def read(group: str, topic: str, partition: int) -> Progress:
        assert (topic, partition) == ("out", 0)
        return groups.get(group, Progress(-1))

    found = committed_ranges(read, prefix, "out", HERE, [("t", 0), ("t", 1), ("t", 2)])
    assert found == {("t", 0): 15}


def test_kafka_sink_options_name_the_writers_and_default_to_exactly_once():
    sink = SinkSpec.model_validate({"format": "kafka", "topic": "out"})
    assert sink.guarantee == "exactly-once"
    options = kafka_sink_options(sink, "orders", HERE)
    assert options == {
        "deliveryGuarantee": "exactly-once",
        "transactionalIdPrefix": transactional_prefix("orders", HERE),
        "checkpointId": checkpoint_id(HERE),
        "transactionTimeoutMs": "180000",
    }
    parsed = EosSinkOptions.parse({**options, "topic": "out", "kafka.bootstrap.servers": "b:9"})
    assert (parsed.topic, parsed.transaction_timeout_ms, parsed.client) == (
        "out",
        180000,
        {"bootstrap.servers": "b:9"},
    )
    loose = SinkSpec.model_validate(
        {"format": "kafka", "topic": "out", "deliveryGuarantee": "at-least-once"}
    )
    assert kafka_sink_options(loose, "orders", HERE) == {"deliveryGuarantee": "at-least-once"}
    with pytest.raises(KafkaSinkError, match="checkpointId"):
        EosSinkOptions.parse({"topic": "out", "transactionalIdPrefix": "p"})


def test_the_driver_side_counts_each_batchs_transactions_in_the_runs_file(tmp_path):
    """What the runner's report shows (sinkTransactions): added batch after batch, from
    whichever process Spark calls commit and abort in; garbage in the file counts as none."""
    tally = tmp_path / "sink-report.json"
    options = kafka_sink_options(SinkSpec.model_validate({"format": "kafka", "topic": "o"}),
                                 "orders", HERE, tmp_path)  # fmt: skip
    assert options["tallyPath"] == str(tally)
    writer = ExactlyOnceKafkaWriter({**options, "topic": "o", "kafka.bootstrap.servers": "b:9"})
    writer.commit([SinkTaskResult("in", 0, 500, False), SinkTaskResult("in", 1, 0, True)], 0)
    writer.commit([SinkTaskResult("in", 0, 20, False), None], 1)  # a task that sent no message
    writer.abort([], 2)
    counts = {"transactions": 2, "replaysSkipped": 1, "records": 520, "batchesAborted": 1}
    assert sink_tally.read(tally) == counts
    tally.write_text('{"transactions": "many", "records": -4}')
    assert sink_tally.read(tally) == dict.fromkeys(sink_tally.KEYS, 0)
    ExactlyOnceKafkaWriter({**options, "tallyPath": "", "topic": "o",
                            "kafka.bootstrap.servers": "b:9"}).abort([], 3)  # fmt: skip
    assert sink_tally.read(tmp_path / "none.json") == dict.fromkeys(sink_tally.KEYS, 0)


def _job(sink: dict, trigger: dict | None = None) -> dict:
    source = {"bootstrapServers": "b:9092", "subscribe": ["in"], "groupId": "g"}
    return {"source": source, "sink": sink, "trigger": trigger or {}}


@pytest.mark.parametrize(
    ("sink", "trigger", "named"),
    [
        ({"format": "kafka", "topic": "o", "transactionTimeoutMs": 60000}, None, "greater than"),
        ({"format": "kafka", "topic": "o", "transactionTimeoutMs": 901000}, None, "less than"),
        (
            {"format": "kafka", "topic": "o", "transactionTimeoutMs": 200000},
            {"processingTime": "4 minutes"},
            "spec.job.trigger.processingTime '4 minutes' is not shorter than "
            "spec.job.sink.transactionTimeoutMs",
        ),
        ({"format": "kafka", "topic": "o"}, {"processingTime": "3 minutes"}, "processingTime"),
        (
            {
                "format": "kafka",
                "topic": "o",
                "deliveryGuarantee": "at-least-once",
                "transactionTimeoutMs": 200000,
            },
            None,
            "transactionTimeoutMs is for deliveryGuarantee exactly-once",
        ),
        (
            {"format": "json", "path": "file:///o", "deliveryGuarantee": "at-least-once"},
            None,
            "settings of the kafka sink",
        ),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_field(sink, trigger, named):
    with pytest.raises(ValidationError, match=named.replace("(", r"\(")):
        JobSpec.model_validate(_job(sink, trigger))


def test_settings_that_fit_are_accepted():
    sink = {"format": "kafka", "topic": "o", "transactionTimeoutMs": 300000}
    job = JobSpec.model_validate(_job(sink, {"processingTime": "2 minutes"}))
    assert job.sink.guarantee == "exactly-once"
    assert JobSpec.model_validate(_job({"format": "json", "path": "file:///o"})).sink.guarantee
    assert transaction_problem("kafka", "at-least-once", None, "1 hour") is None
    assert interval_ms("500 milliseconds") == 500
    assert interval_ms("1 second") == 1000
    assert interval_ms("2 minutes") == 120_000


def test_a_plan_that_mixes_source_partitions_is_found():
    narrow = (
        "Project [cast(value#1 as string) AS value#20]\n"
        "+- Filter (partition#3 = 0)\n"
        "   +- SubqueryAlias source\n"
        "      +- StreamingRelationV2 kafka_checkpointed, [key#0, value#1]\n"
    )
    assert mixing_step(narrow) is None
    grouped = (  # Spark 4.3's analyzed plan of a streaming GROUP BY (~: a streaming node)
        "~Aggregate [cast(key#0 as string)], [cast(count(1) as string) AS value#3]\n"
        "+- ~SubqueryAlias source\n"
        "   +- View (`source`, [key#0, value#1])\n"
        "      +- ~StreamingRelationV2 kafka_checkpointed, [key#0, value#1]\n"
    )
    assert mixing_step(grouped) == "Aggregate"
    assert mixing_step(":  +- Join Inner, (a#1 = b#2)\n") == "Join"
    assert mixing_step("+- RepartitionByExpression [key#0], 4\n") == "RepartitionByExpression"


def test_a_task_claims_the_ranges_read_in_it_once_and_no_other_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(task_ranges.tempfile, "gettempdir", lambda: str(tmp_path))
    task = {"now": ("7", "run-a")}
    monkeypatch.setattr(task_ranges, "_task", lambda: task["now"])
    task_ranges.announce(RANGE)
    task["now"] = ("7", "run-b")  # the same attempt id in another driver's run
    task_ranges.announce(TaskRange("orders", 3, 0, 9))
    assert task_ranges.claim() == [TaskRange("orders", 3, 0, 9)]
    assert task_ranges.claim() == []  # claimed once
    task["now"] = ("7", "run-a")
    assert task_ranges.the_one(task_ranges.claim()) == RANGE
    with pytest.raises(task_ranges.NoTaskRange, match="shuffles"):
        task_ranges.the_one([])
    with pytest.raises(task_ranges.NoTaskRange, match=r"orders\[2\], orders\[3\]"):
        task_ranges.the_one([RANGE, TaskRange("orders", 3, 0, 9)])


def test_a_headers_column_is_written_only_with_the_sources_type():
    assert headers_problem("array<struct<key:string,value:binary>>") is None
    problem = headers_problem("string")
    assert (
        problem is not None and problem.startswith("spec.job.sink: ") and "gives string" in problem
    )


def test_a_query_that_reads_a_source_range_twice_is_refused():
    """A union of the source with itself runs two tasks on each range; they share the range's
    writer, and the second one's output was skipped as committed (found on a real broker: 298
    records expected, 200 written). Spark 4.3's analyzed plan of such a query:"""
    union = (
        "~Union false, false\n"
        ":- ~Project [key#0, value#1]\n"
        ":  +- ~SubqueryAlias source\n"
        ":     +- ~StreamingRelationV2 kafka_checkpointed, [key#0, value#1]\n"
        "+- ~Project [key#0 AS key#7, value#1 AS value#8]\n"
        "   +- ~Filter (partition#3 = 0)\n"
        "      +- ~SubqueryAlias source\n"
        "         +- ~StreamingRelationV2 kafka_checkpointed, [key#0, value#1]\n"
    )
    assert mixing_step(union) == "Union"
    problem = mixing_problem(union)
    assert problem is not None and "Union" in problem and "at-least-once" in problem


def test_a_rebalance_hint_is_a_shuffle_refused_before_reading():
    """`SELECT /*+ REBALANCE */ ...`: Spark 4.3's analyzed plan names the shuffle
    RebalancePartitions; without the refusal the job starts, and the write tasks after the
    shuffle find no range announced (task_ranges.the_one) and fail each batch."""
    plan = (
        "~RebalancePartitions\n"
        "+- ~Project [key#0, value#1]\n"
        "   +- ~SubqueryAlias source\n"
        "      +- ~StreamingRelationV2 kafka_checkpointed, [key#0, value#1]\n"
    )
    assert mixing_step(plan) == "RebalancePartitions"
