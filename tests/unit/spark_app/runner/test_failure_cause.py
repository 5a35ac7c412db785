"""The runner's one line on why a query failed: the source's own error out of Spark's
wrapping, which the operator shows in the Degraded condition (runner.failure_cause)."""

import pytest

from spark_app.runner.preflight import failure_cause

pytestmark = pytest.mark.unit

SPARK_WRAPPED = """[STREAM_FAILED] Query [id = 1f, runId = 2e] terminated with exception: \
Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: \
Lost task 0.0 in stage 3.0 (TID 7) (10.0.0.5 executor driver): \
org.apache.spark.api.python.PythonException: \
Traceback (most recent call last):
  File "/opt/app/spark_app/source/native_read.py", line 170, in _batches
    raise topic_deleted(p, exc.args[0]) from None
spark_app.source.partition_reader.TopicDeletedError: topic orders was deleted while the job read \
orders-2 [40, 90) (stuck at offset 40); the batch fails
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)
"""


def test_the_sources_own_error_is_taken_out_of_sparks_wrapping():
    assert failure_cause(SPARK_WRAPPED) == (
        "topic orders was deleted while the job read orders-2 [40, 90) (stuck at offset 40); "
        "the batch fails"
    )


def test_the_last_of_chained_errors_is_the_one_raised():
    text = "KafkaException: first\nDuring handling...\nDataLossError: orders-0: offsets 3..9"
    assert failure_cause(text) == "orders-0: offsets 3..9"


def test_a_poison_record_or_a_registry_outage_is_the_cause():
    poison = SPARK_WRAPPED.replace(
        "spark_app.source.partition_reader.TopicDeletedError: topic orders was deleted while the "
        "job read orders-2 [40, 90) (stuck at offset 40); the batch fails",
        "spark_app.formats.decoding.PoisonRecordError: poison record orders-2 offset 41: "
        "truncated: 3 bytes",
    )
    assert failure_cause(poison) == "poison record orders-2 offset 41: truncated: 3 bytes"
    outage = (
        "x\nspark_app.formats.schema_registry_client.RegistryUnavailable: orders-0 offset 9: down"
    )
    assert failure_cause(outage) == "orders-0 offset 9: down"
    # an executor fetching a writer schema from an https registry it cannot verify
    untrusted = (
        "x\nspark_app.formats.schema_registry_client.RegistryTLSError: schema registry "
        "https://schema-registry.data.svc:8443: its TLS certificate does not verify with the CA "
        "in option schemaRegistryCaFile='/ca.crt'"
    )
    assert failure_cause(untrusted).endswith("option schemaRegistryCaFile='/ca.crt'")


def test_any_other_failure_is_sparks_first_line():
    assert failure_cause("[STREAM_FAILED] boom\nmore") == "[STREAM_FAILED] boom"
    assert failure_cause("") == "unknown error"


def test_a_dead_letter_topic_that_cannot_be_written_is_the_cause():
    text = SPARK_WRAPPED.replace(
        "spark_app.source.partition_reader.TopicDeletedError: topic orders was deleted while the "
        "job read orders-2 [40, 90) (stuck at offset 40); the batch fails",
        "spark_app.sinks.dead_letter.DeadLetterError: could not write 1 dead record(s) of "
        "orders[2] to the dead-letter topic dead: TOPIC_AUTHORIZATION_FAILED",
    )
    assert failure_cause(text) == (
        "could not write 1 dead record(s) of orders[2] to the dead-letter topic dead: "
        "TOPIC_AUTHORIZATION_FAILED"
    )


def test_a_sink_transaction_that_did_not_commit_is_the_cause():
    """The exactly-once Kafka sink's failed commit names the range, the topic and the setting
    in the job's status, not Spark's wrapping."""
    said = (
        "the transaction writing the output of orders[2] offsets 40-90 to out did not commit "
        "(KafkaError{code=INVALID_TXN_STATE}); it ran 200s, past "
        "spec.job.sink.transactionTimeoutMs (180000 ms): the broker aborted it; raise the "
        "timeout or lower source.maxOffsetsPerTrigger"
    )
    text = SPARK_WRAPPED.replace(
        "spark_app.source.partition_reader.TopicDeletedError: topic orders was deleted while the "
        "job read orders-2 [40, 90) (stuck at offset 40); the batch fails",
        f"spark_app.sinks.kafka_sink.KafkaSinkError: {said}",
    )
    assert failure_cause(text) == said
