"""The Kafka sink's client: its cluster and whose credentials (spec.sinkKafkaCredentials)."""

from __future__ import annotations

import pytest

from spark_app.api.job_spec import JobSpec
from spark_app.api.options import SourceOptions
from spark_app.kafka.config import sink_client
from spark_app.kafka.metadata import matching_topics
from spark_app.runner.preflight import sink_lookup_options

pytestmark = pytest.mark.unit

SOURCE_ENV = {
    "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "KAFKA_SASL_USERNAME": "reader",
    "KAFKA_SASL_PASSWORD": "source-secret",
    "KAFKA_SSL_CA_LOCATION": "/etc/streamingjob-kafka-ca/ca.crt",
}
SINK_ENV = {
    "KAFKA_SINK_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "KAFKA_SINK_SASL_MECHANISM": "PLAIN",
    "KAFKA_SINK_SASL_USERNAME": "writer",
    "KAFKA_SINK_SASL_PASSWORD": "sink-secret",
}


def job(**sink: str) -> JobSpec:
    return JobSpec.model_validate(
        {
            "source": {"bootstrapServers": "in:9092", "subscribe": ["orders"], "groupId": "g"},
            "sink": {"format": "kafka", "topic": "out", **sink},
        }
    )


def test_a_sink_without_credentials_of_its_own_connects_as_the_source_does():
    assert sink_client(job(), SOURCE_ENV) == {
        "bootstrap.servers": "in:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "reader",
        "sasl.password": "source-secret",
        "ssl.ca.location": "/etc/streamingjob-kafka-ca/ca.crt",
    }


def test_a_sink_with_credentials_of_its_own_uses_them_alone_on_its_own_cluster():
    # none of the source's settings mixed in: its CA, for one, would not sign the sink's
    client = sink_client(job(bootstrapServers="out:9093"), SOURCE_ENV | SINK_ENV)
    assert client == {
        "bootstrap.servers": "out:9093",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "writer",
        "sasl.password": "sink-secret",
    }


def test_the_preflight_asks_the_sinks_cluster_with_options_the_source_takes():
    """What the runner's preflight hands the source's look-ups for a sink's cluster parses,
    and matches the sink's topic alone."""
    client = sink_client(job(bootstrapServers="out:9093"), SINK_ENV)
    options = SourceOptions.parse(sink_lookup_options(client, "out.v1"))
    assert options.bootstrap_servers == "out:9093"
    assert options.client()["sasl.username"] == "writer"
    assert matching_topics(options.topic_pattern or "", ["out.v1", "outXv1", "out.v10"]) == [
        "out.v1"
    ]
