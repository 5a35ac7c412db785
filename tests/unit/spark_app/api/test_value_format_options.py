"""valueFormat=avro options: the registry, the reader schema, credentials kept out of sight."""

import pickle
import urllib.parse

import pytest

from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.formats.schema_registry_client import client_for

pytestmark = pytest.mark.unit

BASE = {"kafka.bootstrap.servers": "b:9092", "subscribe": "orders", "kafka.group.id": "g"}
AVRO = {
    **BASE,
    "valueFormat": "avro",
    "schemaRegistryUrl": "http://registry.data.svc:8081/apis/ccompat/v7/",
}


def test_raw_is_the_default_and_takes_no_registry_options():
    assert SourceOptions.parse(BASE).value_decoding is None
    with pytest.raises(OptionError, match="valueSubject is used only with valueFormat=avro"):
        SourceOptions.parse({**BASE, "valueSubject": "x"})


def test_avro_reads_the_topics_value_subject_at_its_latest_version_by_default():
    decoding = SourceOptions.parse(AVRO).value_decoding
    assert decoding is not None
    assert decoding.registry_url == "http://registry.data.svc:8081/apis/ccompat/v7"
    assert (decoding.subject, decoding.version) == ("orders-value", "latest")
    assert decoding.username is None


def test_a_pinned_version_and_subject():
    options = {**AVRO, "valueSubject": "o", "valueSchemaVersion": "3"}
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and (decoding.subject, decoding.version) == ("o", 3)
    with pytest.raises(OptionError, match="valueSchemaVersion='0' must be latest or a version"):
        SourceOptions.parse({**AVRO, "valueSchemaVersion": "0"})


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"schemaRegistryUrl": ""}, "schemaRegistryUrl is required with valueFormat=avro"),
        ({"schemaRegistryUrl": "registry:8081"}, "schemaRegistryUrl is required"),
        ({"valueFormat": "xml"}, "valueFormat='xml' must be one of raw, avro, json, protobuf"),
        ({"schemaRegistryPassword": "pw"}, "schemaRegistryPassword needs schemaRegistryUser"),
        ({"subscribe": "a,b"}, "valueSubject is required with valueFormat=avro unless"),
    ],
)
def test_bad_avro_options_name_the_option_and_the_fix(extra, error):
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse({**AVRO, **extra})


# Built from parts: user info in a URL literal reads as a host name to test_no_registry_hosts.
WITH_CREDENTIALS = urllib.parse.urlunsplit(("http", "u:s3cret@registry.data.svc:8081", "", "", ""))


def test_credentials_never_show_in_errors_or_reprs():
    with pytest.raises(OptionError) as error:
        SourceOptions.parse({**AVRO, "schemaRegistryUrl": WITH_CREDENTIALS})
    assert "s3cret" not in str(error.value)
    assert "schemaRegistryUser" in str(error.value)
    options = SourceOptions.parse(
        {**AVRO, "schemaRegistryUser": "u", "schemaRegistryPassword": "s3cret"}
    )
    decoding = options.value_decoding
    assert decoding is not None and decoding.password == "s3cret"
    for text in (repr(options), repr(decoding), repr(client_for(decoding))):
        assert "s3cret" not in text
    assert pickle.loads(pickle.dumps(options)) == options  # travels to executors


def test_raw_values_keep_sparks_columns_without_a_registry():
    from spark_app.source.source import KafkaCheckpointedDataSource

    schema = KafkaCheckpointedDataSource(dict(BASE)).schema()
    assert schema.fieldNames()[1] == "value" and schema["value"].dataType.typeName() == "binary"


SECURED = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.password": "s3cret"}


def test_a_dead_letter_topic_on_the_sources_cluster_and_credentials_named_after_the_job():
    options = {**AVRO, **SECURED, "kafka.fetch.max.bytes": "1000", "deadLetterTopic": "dead"}
    target = SourceOptions.parse({**options, "jobName": "orders", "jobEpoch": "4"}).dead_letter
    assert target is not None
    assert (target.topic, target.job, target.epoch, target.group) == ("dead", "orders", 4, "g")
    # how to reach and log in, not the consumer's tuning
    assert dict(target.client) == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.password": "s3cret",
    }
    assert target.progress_group == "g.dead-letter"
    assert target.transactional_id("orders", 2) == "streamingjob.g.dead-letter.orders.2"
    assert "s3cret" not in repr(target) and "s3cret" not in repr(pickle.loads(pickle.dumps(target)))
    other = SourceOptions.parse({**options, "deadLetterBootstrapServers": "d:9092"}).dead_letter
    assert other is not None and other.client["bootstrap.servers"] == "d:9092"
    assert other.job == "g"  # no job name given: the group's


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({**BASE, "deadLetterTopic": "dead"}, "deadLetterTopic is used only with valueFormat=avro"),
        (
            {**AVRO, "deadLetterTopic": "dead", "kafka.group.id": "", "startingOffsets": "earliest",
             "commitOffsetsOnCheckpoints": "false"},
            "deadLetterTopic needs kafka.group.id",
        ),
    ],
)  # fmt: skip
def test_a_dead_letter_topic_without_what_it_needs_names_it(options, error):
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse(options)


# --- the reader schema given inline, subject name strategies, the registry's CA --------------

INLINE = '{"type": "record", "name": "Order", "namespace": "shop", "fields": []}'


def test_an_inline_reader_schema_names_no_subject():
    decoding = SourceOptions.parse({**AVRO, "subscribe": "a,b", "valueSchema": INLINE})
    assert decoding.value_decoding is not None
    assert decoding.value_decoding.reader_schema == INLINE
    assert decoding.value_decoding.subject is None  # several topics are fine: no look-up
    assert "Order" not in repr(decoding.value_decoding)  # long text: never in a repr


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"valueSchemaVersion": "2"}, "valueSchema and valueSchemaVersion exclude each other"),
        ({"valueSubject": "s"}, "valueSchema and valueSubject exclude each other"),
        ({"valueSubjectStrategy": "record"}, "valueSchema and valueSubjectStrategy exclude"),
    ],
)
def test_an_inline_reader_schema_excludes_a_subject_and_a_version(extra, error):
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse({**AVRO, "valueSchema": INLINE, **extra})


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        ("{not json", "option valueSchema is not JSON"),
        ('"string"', "option valueSchema must be an Avro record schema"),
        ('{"type": "enum", "name": "E", "symbols": ["A"]}', "must be an Avro record schema"),
    ],
)
def test_an_inline_reader_schema_must_be_a_record_schema_in_json(schema, error):
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse({**AVRO, "valueSchema": schema})


@pytest.mark.parametrize(
    ("extra", "subject"),
    [
        ({}, "orders-value"),  # TopicNameStrategy, the default
        ({"valueSubjectStrategy": "topic"}, "orders-value"),
        ({"valueSubjectStrategy": "record", "valueRecordName": "shop.Order"}, "shop.Order"),
        (
            {"valueSubjectStrategy": "TOPIC-RECORD", "valueRecordName": "shop.Order"},
            "orders-shop.Order",
        ),
        # an explicit subject wins over the strategy
        ({"valueSubjectStrategy": "record", "valueRecordName": "a.B", "valueSubject": "s"}, "s"),
    ],
)
def test_subject_name_strategies(extra, subject):
    decoding = SourceOptions.parse({**AVRO, **extra}).value_decoding
    assert decoding is not None and decoding.subject == subject


def test_the_record_strategy_reads_one_subject_across_topics_topic_record_refuses_them():
    record = {"valueSubjectStrategy": "record", "valueRecordName": "shop.Order"}
    decoding = SourceOptions.parse({**AVRO, "subscribe": "a,b", **record}).value_decoding
    assert decoding is not None and decoding.subject == "shop.Order"
    pattern = {**AVRO, "subscribe": None, "subscribePattern": "o.*"}
    del pattern["subscribe"]
    for options in ({**AVRO, "subscribe": "a,b"}, pattern):
        topic_record = {**options, **record, "valueSubjectStrategy": "topic-record"}
        with pytest.raises(OptionError, match=r"valueSubjectStrategy=topic-record: then it is"):
            SourceOptions.parse(topic_record)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"valueSubjectStrategy": "record"}, "valueRecordName .* is required with"),
        ({"valueSubjectStrategy": "topic-record"}, "valueRecordName .* is required with"),
        (
            {"valueSubjectStrategy": "record", "valueRecordName": "1shop.Order"},
            "'1shop.Order' is not an Avro full name",
        ),
        ({"valueRecordName": "shop.Order"}, "valueRecordName is used only with"),
        ({"valueSubjectStrategy": "name"}, "valueSubjectStrategy='name' must be one of"),
    ],
)
def test_a_strategy_without_what_it_needs_names_the_option(extra, error):
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse({**AVRO, **extra})


def test_a_ca_file_is_for_an_https_registry_only():
    https = {
        **AVRO,
        "schemaRegistryUrl": "https://schema-registry.data.svc:8443",
        "schemaRegistryCaFile": "/ca",
    }
    decoding = SourceOptions.parse(https).value_decoding
    assert decoding is not None and decoding.ca_file == "/ca"
    with pytest.raises(OptionError, match="schemaRegistryCaFile needs an https schemaRegistryUrl"):
        SourceOptions.parse({**AVRO, "schemaRegistryCaFile": "/ca"})
    with pytest.raises(OptionError, match="schemaRegistryCaFile is used only with valueFormat"):
        SourceOptions.parse({**BASE, "schemaRegistryCaFile": "/ca"})
