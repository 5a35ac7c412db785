"""A compatible new version of the value's subject under a Delta job: a restore keeps the
version its epoch started with (what the job writes does not change under an automatic
restart), a redeploy takes the new one and the table merges its new nullable column.

The runner as a real process on local Spark, a real broker and a real schema registry
(Apicurio), the table read back through delta-rs."""

from __future__ import annotations

import copy

import pytest
from confluent_kafka import Producer

from devbed.object_store import Storage
from devbed.schema_registry import wire_format
from tests.integration.spark_app.test_delta_sink import checkpoint_of
from tests.integration.spark_app.test_runner import wait_for_all
from tests.support.delta_output import delta_rows, delta_sink, storage_table
from tests.support.kafka_tools import new_topic
from tests.support.runner_process import RunnerProcess, job_manifest

pytestmark = pytest.mark.integration

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "test.evolve",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
V2 = copy.deepcopy(V1)  # compatible: one more optional field
V2["fields"].append({"name": "note", "type": ["null", "string"], "default": None})


def produce_orders(bootstrap: str, topic: str, schema_id: int, schema: dict, ids: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in ids:
        record = {"id": n, "name": f"order-{n}"}
        if any(f["name"] == "note" for f in schema["fields"]):
            record["note"] = f"note-{n}"
        producer.produce(topic, key=str(n).encode(), value=wire_format(schema_id, schema, record))
    assert producer.flush(30) == 0


def value_fields(storage: Storage) -> list[str]:
    import pyarrow as pa

    schema = pa.schema(storage_table(storage).schema().to_arrow())
    return [field.name for field in schema.field("value").type]


def test_a_restore_keeps_the_epochs_version_and_a_redeploy_merges_the_new_column(
    kafka, schema_registry, tmp_path
):
    topic = new_topic(kafka.bootstrap, partitions=1)
    subject = f"{topic}-value"
    storage = Storage(tmp_path)
    manifest = job_manifest(
        "evolve",
        kafka.bootstrap,
        topic,
        tmp_path,
        storage,
        value={"format": "avro", "schemaRegistry": {"url": schema_registry.url}},
    )
    manifest["spec"]["job"]["sink"] = delta_sink(storage)

    def latest() -> int:
        return int(schema_registry.call("GET", f"/subjects/{subject}/versions/latest")["version"])

    v1_id = schema_registry.register(subject, V1)
    first = latest()
    produce_orders(kafka.bootstrap, topic, v1_id, V1, range(0, 300))
    runner = RunnerProcess(manifest, tmp_path)
    runner.start()
    started = wait_for_all(runner, kafka.bootstrap, topic)
    runner.kill()  # a crash: the operator restores in the same epoch

    v2_id = schema_registry.register(subject, V2)  # compatible: an optional field more
    second = latest()
    assert second != first
    produce_orders(kafka.bootstrap, topic, v2_id, V2, range(300, 600))
    runner.start()
    restored = wait_for_all(runner, kafka.bootstrap, topic)
    assert runner.terminate() == 0, runner.tail()
    pinned = {"subject": subject, "version": first}
    assert started["readerSchemas"] == {"value": {**pinned, "pinned": "resolved"}}
    assert restored["startPath"] == "restored"
    assert restored["readerSchemas"] == {"value": {**pinned, "pinned": "checkpoint"}}
    assert value_fields(storage) == ["id", "name"]  # the epoch writes what it started with

    redeploy = RunnerProcess(manifest, tmp_path, epoch=2)
    redeploy.start("--previous-checkpoint", checkpoint_of(storage, "evolve", 1))
    produce_orders(kafka.bootstrap, topic, v2_id, V2, range(600, 900))
    fresh = wait_for_all(redeploy, kafka.bootstrap, topic)
    assert redeploy.terminate() == 0, redeploy.tail()
    assert fresh["startPath"] == "fresh"
    assert fresh["readerSchemas"] == {
        "value": {"subject": subject, "version": second, "pinned": "resolved"}
    }
    assert value_fields(storage) == ["id", "name", "note"]  # merged: a nullable column more
    rows = delta_rows(storage)
    assert sorted(r["id"] for r in rows) == list(range(900))  # each record once
    for row in rows:  # read with v1 (no note) before the redeploy, with v2 after it
        n = row["id"]
        assert row["value"]["name"] == f"order-{n}"
        assert row["value"]["note"] == (f"note-{n}" if n >= 600 else None), row
