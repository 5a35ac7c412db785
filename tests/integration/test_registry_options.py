"""The schema-registry options against a real registry (Apicurio, Confluent-compatible API): a
reader schema given inline asks the registry only for writer schemas by id; each subject name
strategy finds the subject a Confluent serializer registers under; an https registry is
verified with the CA of schemaRegistryCaFile, and refused clearly without it
(spark_app/api/options.py, spark_app/formats/typed_values.py,
spark_app/formats/schema_registry_client.py)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devbed.schema_registry import SchemaRegistry, wire_format
from devbed.tls import Authority
from spark_app.api.decoding_options import ValueDecoding
from spark_app.api.options import SourceOptions
from spark_app.formats import typed_values
from spark_app.formats.decoding import AvroDecoder, ReaderSchemaError, resolve_reader_schema
from spark_app.formats.schema_registry_client import (
    RegistryTLSError,
    SchemaRegistryClient,
    client_for,
)

pytestmark = pytest.mark.integration


def _order(namespace: str) -> dict:
    return {
        "type": "record",
        "name": "Order",
        "namespace": namespace,
        "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
    }


def _decoding(registry: SchemaRegistry, topics: str, **options: str) -> ValueDecoding:
    raw = {
        "kafka.bootstrap.servers": "127.0.0.1:9",  # no broker: the options alone
        "subscribe": topics,
        "kafka.group.id": "g",
        "valueFormat": "avro",
        "schemaRegistryUrl": registry.url,
        "schemaRegistryTimeoutMs": "2000",
        **options,
    }
    decoding = SourceOptions.parse(raw).value_decoding
    assert decoding is not None
    return decoding


# --- a reader schema given inline -----------------------------------------------------------


def test_an_inline_reader_schema_reads_records_of_every_registered_writer_schema(
    schema_registry: SchemaRegistry,
) -> None:
    namespace = f"inline{uuid.uuid4().hex[:8]}"
    v1 = _order(namespace)
    v2 = {**v1, "fields": [*v1["fields"], {"name": "note", "type": "string", "default": ""}]}
    subject = f"{namespace}-value"
    id1, id2 = schema_registry.register(subject, v1), schema_registry.register(subject, v2)
    # The reader: only `id`, and a field no writer has, with its default.
    channel = {"name": "channel", "type": "string", "default": "web"}
    reader = {**v1, "fields": [{"name": "id", "type": "long"}, channel]}
    # A topic with no subject of its own: an inline reader schema looks none up.
    decoding = _decoding(schema_registry, "no-such-subject-topic", valueSchema=json.dumps(reader))
    values = typed_values.at_query_start(decoding)
    assert values.reader.schema_id is None
    assert values.describe() == f"inline reader schema {namespace}.Order (option valueSchema)"
    client = client_for(decoding)
    decoder = AvroDecoder(client, values.reader)
    rows = [
        decoder.decode(wire_format(id1, v1, {"id": 1, "item": "a"})),
        decoder.decode(wire_format(id2, v2, {"id": 2, "item": "b", "note": "n"})),
        decoder.decode(wire_format(id1, v1, {"id": 3, "item": "c"})),
    ]
    assert rows == [{"id": n, "channel": "web"} for n in (1, 2, 3)]
    assert client.requests == 2  # the two writer schemas by id, once each; no subject


def test_an_inline_reader_schema_no_writer_resolves_to_is_a_poison_record(
    schema_registry: SchemaRegistry,
) -> None:
    namespace = f"inline{uuid.uuid4().hex[:8]}"
    writer = _order(namespace)
    schema_id = schema_registry.register(f"{namespace}-value", writer)
    reader = {**writer, "fields": [{"name": "sku", "type": "string"}]}  # no default: unresolvable
    decoding = _decoding(schema_registry, "t", valueSchema=json.dumps(reader))
    decoder = AvroDecoder(client_for(decoding), typed_values.at_query_start(decoding).reader)
    poison = decoder.decode(wire_format(schema_id, writer, {"id": 1, "item": "a"}))
    assert getattr(poison, "reason", None) == "unresolvable-schema"


# --- subject name strategies ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "subject_of"),
    [
        ("topic", lambda topic, record: f"{topic}-value"),
        ("record", lambda topic, record: record),
        ("topic-record", lambda topic, record: f"{topic}-{record}"),
    ],
)
def test_each_strategy_reads_the_subject_a_confluent_serializer_registers(
    schema_registry: SchemaRegistry, strategy: str, subject_of
) -> None:
    namespace = f"s{uuid.uuid4().hex[:8]}"
    topic, record = f"orders-{namespace}", f"{namespace}.Order"
    # Only the strategy's own subject exists: any other would be "no such subject".
    schema_id = schema_registry.register(subject_of(topic, record), _order(namespace))
    options = {"valueSubjectStrategy": strategy}
    if strategy != "topic":
        options["valueRecordName"] = record
    decoding = _decoding(schema_registry, topic, **options)
    assert decoding.subject == subject_of(topic, record)
    values = typed_values.at_query_start(decoding)
    assert (values.reader.schema_id, values.reader.version) == (schema_id, 1)


def test_the_record_strategy_reads_one_subject_for_several_topics_and_a_subject_wins(
    schema_registry: SchemaRegistry,
) -> None:
    namespace = f"s{uuid.uuid4().hex[:8]}"
    record = f"{namespace}.Order"
    schema_id = schema_registry.register(record, _order(namespace))
    by_record = {"valueSubjectStrategy": "record", "valueRecordName": record}
    values = typed_values.at_query_start(_decoding(schema_registry, "a,b", **by_record))
    assert values.reader.schema_id == schema_id
    pinned = schema_registry.register(f"{namespace}-pinned", _order(f"{namespace}.p"))
    decoding = _decoding(schema_registry, "a,b", **by_record, valueSubject=f"{namespace}-pinned")
    assert typed_values.at_query_start(decoding).reader.schema_id == pinned


def test_a_strategy_whose_subject_is_not_registered_names_it(
    schema_registry: SchemaRegistry,
) -> None:
    namespace = f"s{uuid.uuid4().hex[:8]}"
    schema_registry.register(f"orders-{namespace}-value", _order(namespace))  # topic's only
    by_record = {"valueSubjectStrategy": "record", "valueRecordName": f"{namespace}.Order"}
    with pytest.raises(ReaderSchemaError, match=rf"subject '{namespace}.Order' has no version"):
        typed_values.at_query_start(_decoding(schema_registry, f"orders-{namespace}", **by_record))


# --- an https registry verified with a CA file ----------------------------------------------


@pytest.fixture(scope="module")
def tls_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    certs = tmp_path_factory.mktemp("registry-tls")
    authority = Authority.create(certs / "ca")
    server = authority.issue(["127.0.0.1", "localhost"])
    with SchemaRegistry(certs / "registry", tls=server) as registry:
        yield registry


def test_an_https_registry_is_read_with_its_ca_file(tls_registry: SchemaRegistry) -> None:
    assert tls_registry.url.startswith("https://")
    assert tls_registry.tls is not None
    namespace = f"tls{uuid.uuid4().hex[:8]}"
    schema_id = tls_registry.register(f"orders-{namespace}-value", _order(namespace))
    ca = str(tls_registry.tls.ca)
    decoding = _decoding(tls_registry, f"orders-{namespace}", schemaRegistryCaFile=ca)
    values = typed_values.at_query_start(decoding)
    assert values.reader.schema_id == schema_id
    client = client_for(decoding)
    decoder = AvroDecoder(client, resolve_reader_schema(client, f"orders-{namespace}-value"))
    record = {"id": 1, "item": "a"}
    assert decoder.decode(wire_format(schema_id, _order(namespace), record)) == record
    assert client.schema_by_id(schema_id).schema_id == schema_id  # by id, over https too


def test_an_https_registry_without_its_ca_is_refused_at_once_naming_the_option(
    tls_registry: SchemaRegistry, tmp_path: Path
) -> None:
    namespace = f"tls{uuid.uuid4().hex[:8]}"
    tls_registry.register(f"orders-{namespace}-value", _order(namespace))
    other = Authority.create(tmp_path / "other", name="not the registry's CA")
    for ca_file, trusted in [
        (None, "the system's CA bundle (option schemaRegistryCaFile unset)"),
        (str(other.cert), f"the CA in option schemaRegistryCaFile='{other.cert}'"),
    ]:
        options = {"schemaRegistryCaFile": ca_file} if ca_file else {}
        # a long retry budget: a verification failure must not be retried as an outage
        decoding = _decoding(tls_registry, f"orders-{namespace}", **options)
        client = SchemaRegistryClient(tls_registry.url, timeout_s=60, ca_file=ca_file)
        started = time.monotonic()
        with pytest.raises(RegistryTLSError) as error:
            client.subject_version(f"orders-{namespace}-value")
        assert time.monotonic() - started < 10
        assert trusted in str(error.value)
        assert "Set schemaRegistryCaFile to the CA that signed" in str(error.value)
        with pytest.raises(ReaderSchemaError, match="does not verify with") as start:
            typed_values.at_query_start(decoding)
        assert "schemaRegistryCaFile" in str(start.value)
