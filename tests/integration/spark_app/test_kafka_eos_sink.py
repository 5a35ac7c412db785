"""The exactly-once Kafka sink: every record's output once for a read_committed reader,
through a driver killed between the sink's transactions and `commits/N`, a restore and a
redeploy (rules 4 and 9 with a Kafka topic as the sink).

The runner runs as a real process on local Spark against a real broker; the output topic is
read back as a consumer must read it (`isolation.level=read_committed`). The kill point that
matters is after every task of batch N committed its transaction and before Spark's
commit-log entry: the sink's fault point (`CRASH_AFTER_COMMIT_ENV`, in the writer's driver
side commit, which Spark calls after every task succeeded) SIGKILLs the driver exactly there.
Without the replay check (`sink_rules.already_committed`) the restore writes the batch
again; without the catch-up of the sink's progress (`eos_progress`) the redeploy does.
"""

from __future__ import annotations

import io
import json
import signal
import struct
from collections import Counter
from decimal import Decimal
from pathlib import Path

import fastavro
import jsonschema
import pytest
from confluent_kafka import Producer
from google.protobuf import json_format, message_factory

from devbed.object_store import Storage
from devbed.schema_registry import SchemaRegistry, wire_format
from spark_app.api.exit_codes import REFUSED_MARK
from spark_app.formats.protobuf_values import pinned_reader
from spark_app.formats.schema_registry_client import RegisteredSchema
from spark_app.runner.checkpoint_log import source_end_offsets
from spark_app.sinks.kafka_eos_sink import CRASH_AFTER_COMMIT_ENV
from tests.integration.spark_app.test_runner import wait_for_all
from tests.integration.spark_app.test_typed_records import ORDER_V1, order
from tests.support.kafka_tools import consume_to_end, group_offsets, new_topic, produce
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration


def kafka_job(name: str, bootstrap: str, topic: str, out: str, tmp_path: Path) -> dict:
    manifest = job_manifest(name, bootstrap, topic, tmp_path)
    manifest["spec"]["job"]["sink"] = {"format": "kafka", "topic": out}
    return manifest


def output_ids(bootstrap: str, topic: str, isolation: str = "read_committed") -> Counter:
    return Counter(json.loads(m.value())["id"] for m in consume_to_end(bootstrap, topic, isolation))


def once_each(ids: Counter) -> int:
    """How many ids the output holds, after checking that it holds each of them once."""
    duplicated = sorted((i, n) for i, n in ids.items() if n > 1)
    assert not duplicated, (
        f"{len(duplicated)} ids more than once for read_committed, e.g. {duplicated[:5]}"
    )
    return len(ids)


def checkpoint(tmp_path: Path, job: str, epoch: int) -> Path:
    return tmp_path / "checkpoints" / "test" / job / f"epoch-{epoch}"


def killed_after_the_sinks_commit(runner: RunnerProcess, batch: int, job: str = "eos") -> int:
    """`runner` SIGKILLed once batch `batch`'s transactions committed: no `commits/<batch>`.
    Returns how many records the batches up to it read (their output is committed)."""
    assert runner.wait(240) == -signal.SIGKILL, runner.tail()
    location = checkpoint(runner.workdir, job, runner.epoch)
    assert (location / "offsets" / str(batch)).exists()
    assert not (location / "commits" / str(batch)).exists()
    return sum(source_end_offsets((location / "offsets" / str(batch)).read_text()).values())


def test_a_kill_after_the_sinks_commit_then_a_restore_and_a_redeploy_write_each_record_once(
    kafka, tmp_path
):
    source = new_topic(kafka.bootstrap, partitions=3)
    out = new_topic(kafka.bootstrap, partitions=2)
    produce(kafka.bootstrap, source, range(6000))  # 4 batches of 1500 (maxOffsetsPerTrigger)
    manifest = kafka_job("eos", kafka.bootstrap, source, out, tmp_path)

    # epoch 1 dies after batch 1's transactions committed, before commits/1
    first = RunnerProcess(manifest, tmp_path, env={CRASH_AFTER_COMMIT_ENV: "1"}).start()
    read = killed_after_the_sinks_commit(first, 1)
    assert once_each(output_ids(kafka.bootstrap, out)) == read  # batches 0 and 1

    # the restore replays batch 1 (written already: skipped), then dies the same way in 2
    first.env = {CRASH_AFTER_COMMIT_ENV: "2"}
    first.start()
    before, read = read, killed_after_the_sinks_commit(first, 2)
    assert once_each(output_ids(kafka.bootstrap, out)) == read
    group = group_offsets(kafka.bootstrap, "eos-group", source)
    assert sum(o or 0 for o in group.values()) <= before  # batch 1's end at most

    # a redeploy: a new checkpoint from the group, which the catch-up moved to the sink's
    # progress (batch 2's end: the commit log says batch 1)
    second = RunnerProcess(manifest, tmp_path, epoch=2)
    previous = f"{Storage(tmp_path).checkpoints}/test/eos/epoch-1"  # as the runner had it
    report = second.start("--previous-checkpoint", previous).wait_for_batch(0)
    caught_up = report["previousCheckpoint"]
    assert (caught_up["outcome"], caught_up["batch"]) == ("committed", 2), caught_up
    produce(kafka.bootstrap, source, range(6000, 8000))
    report = wait_for_all(second, kafka.bootstrap, source)
    assert second.terminate() == 0
    # what it wrote, counted for status and metrics: a new checkpoint replays nothing
    tally = report["sinkTransactions"]
    assert (tally["records"], tally["replaysSkipped"], tally["batchesAborted"]) == (
        8000 - read,
        0,
        0,
    ), tally
    assert tally["transactions"] >= 3, tally  # each batch's three ranges: one at least

    ids = output_ids(kafka.bootstrap, out)
    assert once_each(ids) == 8000
    assert ids == Counter(range(8000))
    # each task wrote to both of the sink's partitions (the source's keys spread its range),
    # while its progress is keyed by partition 0 only (sink_rules.PROGRESS_PARTITION)
    read_in = consume_to_end(kafka.bootstrap, source, "read_committed")
    source_of = {json.loads(m.value())["id"]: m.partition() for m in read_in}
    read_out = consume_to_end(kafka.bootstrap, out, "read_committed")
    spread = {(source_of[json.loads(m.value())["id"]], m.partition()) for m in read_out}
    assert spread == {(s, p) for s in range(3) for p in range(2)}, spread
    ends = report["latestBatch"]["endOffsets"][source]
    assert group_offsets(kafka.bootstrap, "eos-group", source) == {
        int(p): o for p, o in ends.items()
    }


GROUPED = (
    "SELECT CAST(key AS STRING) AS key, CAST(count(*) AS STRING) AS value FROM source GROUP BY key"
)
# two tasks per range of partition 0: without the refusal the second one's output was
# skipped as committed (200 records written of 298)
SELF_UNION = (
    "SELECT key, value FROM source UNION ALL SELECT key, value FROM source WHERE partition = 0"
)


@pytest.mark.parametrize(
    ("sql", "mode", "step"),
    [(GROUPED, "complete", "Aggregate"), (SELF_UNION, "append", "Union")],
    ids=["grouped", "self-union"],
)
def test_a_query_that_mixes_source_partitions_is_refused_before_reading(
    kafka, tmp_path, sql, mode, step
):
    source = new_topic(kafka.bootstrap, partitions=2)
    out = new_topic(kafka.bootstrap, partitions=1)
    produce(kafka.bootstrap, source, range(100))
    manifest = kafka_job("grouped", kafka.bootstrap, source, out, tmp_path)
    manifest["spec"]["job"]["sql"] = sql
    manifest["spec"]["job"]["sink"]["outputMode"] = mode
    termination = tmp_path / "termination-log"
    termination.touch()
    env = {"STREAMJOB_TERMINATION_LOG": str(termination)}
    runner = RunnerProcess(manifest, tmp_path, env=env).start()
    assert runner.wait(180) == 2, runner.tail()
    message = termination.read_text().removeprefix(REFUSED_MARK)
    assert message.startswith("spec.job.sink.deliveryGuarantee: exactly-once writes"), message
    assert step in message and "at-least-once" in message
    assert group_offsets(kafka.bootstrap, "grouped-group", source) == {0: None, 1: None}
    assert output_ids(kafka.bootstrap, out) == Counter()


# the typed records tests' orders in (ORDER_V1), a struct of four of their fields out, built
# in SQL, the quantity doubled (the price a double for Protobuf, which has no decimal)
TYPED_SQL = (
    "SELECT key, struct(value.id AS id, value.quantity * 2 AS quantity, {price} AS price, "
    "value.tags AS tags) AS value FROM source"
)


def typed_job(
    kafka, registry: SchemaRegistry, tmp_path: Path, records: int, out_format: str = "avro"
) -> tuple[dict, str]:
    """A job reading Avro orders (registered under <source>-value) and writing them, changed,
    to a new topic as `out_format` (avro, json or protobuf) through the sink
    (`spec.job.sink.value`); its manifest and the output topic."""
    source = new_topic(kafka.bootstrap, partitions=2)
    out = new_topic(kafka.bootstrap, partitions=1)
    schema_id = registry.register(f"{source}-value", ORDER_V1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for n in range(records):
        producer.produce(
            source, key=str(n).encode(), value=wire_format(schema_id, ORDER_V1, order(n))
        )
    assert producer.flush(30) == 0
    manifest = kafka_job("typed", kafka.bootstrap, source, out, tmp_path)
    job = manifest["spec"]["job"]
    job["source"]["value"] = {"format": "avro", "schemaRegistry": {"url": registry.url}}
    price = "CAST(value.price AS DOUBLE)" if out_format == "protobuf" else "value.price"
    job["sql"] = TYPED_SQL.format(price=price)
    job["sink"]["value"] = {"format": out_format}  # the query's schema, as <out>-value
    return manifest, out


def decoded_output(bootstrap: str, out: str, registered: dict) -> list[dict]:
    """Every record of `out` for a read_committed reader, decoded as a consumer that knows
    only the registry does: the wire format's id is the registered schema's, the payload
    Avro read with it, JSON valid under it, or the first message of the Protobuf file
    (compiled by protoc) parsed by Protobuf."""
    schema_type = registered.get("schemaType", "AVRO")
    if schema_type == "PROTOBUF":
        return protobuf_output(bootstrap, out, registered)
    schema = json.loads(registered["schema"])
    if schema_type == "AVRO":
        schema = fastavro.parse_schema(schema)
    decoded = []
    for message in consume_to_end(bootstrap, out, "read_committed"):
        value = message.value()
        assert struct.unpack(">bI", value[:5]) == (0, registered["id"])
        if schema_type == "AVRO":
            decoded.append(fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, schema))
        else:
            document = json.loads(value[5:])
            jsonschema.validate(document, schema)
            decoded.append({**document, "price": Decimal(str(document["price"]))})
    return decoded


def protobuf_output(bootstrap: str, out: str, registered: dict) -> list[dict]:
    found = RegisteredSchema(registered["id"], registered["version"], registered["schema"])
    message_class = message_factory.GetMessageClass(pinned_reader(found, None, None).descriptor())
    decoded = []
    for message in consume_to_end(bootstrap, out, "read_committed"):
        value = message.value()
        assert struct.unpack(">bIb", value[:6]) == (0, registered["id"], 0)  # the 1st message
        document = json_format.MessageToDict(
            message_class.FromString(value[6:]),
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,  # an empty list too
        )
        # Protobuf's JSON gives an int64 as a string
        price = Decimal(str(document["price"]))
        decoded.append({**document, "id": int(document["id"]), "price": price})
    return decoded


@pytest.mark.parametrize("out_format", ["avro", "json", "protobuf"])
def test_a_typed_pipeline_writes_records_its_registry_serves_each_order_once_through_a_kill(
    kafka, schema_registry, tmp_path, out_format
):
    """Issue 43: Avro in, Avro (or JSON Schema, or Protobuf) out. The sink registers the
    query's schema under <out>-value and writes the Confluent wire format with its id; killed
    after batch 1's transactions and restored (the same schema: the same id, no new version).
    A consumer that knows nothing but the registry reads every order once, changed."""
    manifest, out = typed_job(kafka, schema_registry, tmp_path, 3000, out_format)
    (source,) = manifest["spec"]["job"]["source"]["subscribe"]
    runner = RunnerProcess(manifest, tmp_path, env={CRASH_AFTER_COMMIT_ENV: "1"}).start()
    killed_after_the_sinks_commit(runner, 1, "typed")
    runner.env = {}
    runner.start()
    wait_for_all(runner, kafka.bootstrap, source)
    assert runner.terminate() == 0
    registered = schema_registry.call("GET", f"/subjects/{out}-value/versions/latest")
    assert registered["version"] == 1  # the restore registered nothing new
    decoded = decoded_output(kafka.bootstrap, out, registered)
    assert Counter(r["id"] for r in decoded) == Counter(range(3000))
    for record in decoded:
        expected = {k: order(record["id"])[k] for k in ("id", "quantity", "price", "tags")}
        assert record == {**expected, "quantity": 2 * expected["quantity"]}


def test_a_pinned_schema_that_cannot_take_the_querys_value_is_refused_before_reading(
    kafka, schema_registry, tmp_path
):
    """`spec.job.sink.value.version` names a version without the query's `tags`: exit 2 (the
    job Invalid) naming the field and what is missing, nothing read, nothing written."""
    manifest, out = typed_job(kafka, schema_registry, tmp_path, 10)
    kept = ("id", "quantity", "price")  # not the query's tags
    narrower = {**ORDER_V1, "fields": [f for f in ORDER_V1["fields"] if f["name"] in kept]}
    schema_registry.register(f"{out}-value", narrower)
    manifest["spec"]["job"]["sink"]["value"]["version"] = 1
    termination = tmp_path / "termination-log"
    termination.touch()
    runner = RunnerProcess(manifest, tmp_path, env={"STREAMJOB_TERMINATION_LOG": str(termination)})
    assert runner.start().wait(180) == 2, runner.tail()
    message = termination.read_text().removeprefix(REFUSED_MARK)
    assert message.startswith(f"spec.job.sink.value.version: {out}-value version 1 cannot"), message
    assert "it has no field tags" in message
    (source,) = manifest["spec"]["job"]["source"]["subscribe"]
    assert group_offsets(kafka.bootstrap, "typed-group", source) == {0: None, 1: None}
    assert consume_to_end(kafka.bootstrap, out, "read_uncommitted") == []
