"""Protobuf values in the Confluent wire format, from a real broker, decoded with schemas from
a real registry (Apicurio, Confluent-compatible API, schemaType PROTOBUF with references):
nested messages, repeated fields, maps, enums, Timestamp, proto3 optional and wrappers;
evolution both ways (a newer reader reads older records, a pinned older reader newer ones);
each poison kind; the registry asked once per id; reader errors at start. Through the seam
(spark_app/formats/decoding.py's resolve_reader_schema and WireDecoder, valueFormat=protobuf:
spark_app/formats/protobuf_values.py). Without services:
tests/unit/spark_app/formats/test_protobuf_values.py."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from confluent_kafka import Producer

from devbed.kafka_broker import KafkaBroker
from devbed.schema_registry import SchemaRegistry
from spark_app.api.manifest import API_GROUP, API_VERSION, load_manifest
from spark_app.formats.decoding import (
    BAD_MAGIC_BYTE,
    MALFORMED_PAYLOAD,
    TRUNCATED,
    UNKNOWN_SCHEMA_ID,
    UNRESOLVABLE_SCHEMA,
    Poison,
    ReaderSchemaError,
    WireDecoder,
    decode_value_column,
    resolve_reader_schema,
)
from spark_app.formats.protobuf_values import ProtobufReaderSchema
from spark_app.formats.schema_registry_client import SchemaRegistryClient
from spark_app.formats.value_encoder import ValueEncoder
from spark_app.runner.sink_schema import writer_options
from spark_app.source.partition_range import KafkaInputPartition
from spark_app.source.partition_reader import read_range
from tests.integration.test_avro_decoding import ORDER_V1 as AVRO_ORDER
from tests.support.kafka_tools import consume_values, new_topic
from tests.support.protobuf_messages import message_classes, proto_wire_format

pytestmark = pytest.mark.integration

# Imported by the order schemas through a registry reference.
ADDRESS = """syntax = "proto3";
package shop;
message Address {
  string city = 1;
  optional string zip = 2;
}
"""
ORDER_V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "shop/address.proto";

enum Status { STATUS_UNKNOWN = 0; PLACED = 1; SHIPPED = 2; }

message Order {
  int64 id = 1;
  int32 quantity = 2;
  google.protobuf.Timestamp placed = 3;
  Address address = 4;
  repeated string tags = 5;
  map<string, int64> counts = 6;
  Status status = 7;
  optional string note = 8;
  uint64 total_cents = 9;
  google.protobuf.StringValue coupon = 10;
  repeated Line lines = 11;
  message Line { string sku = 1; uint32 qty = 2; }
}

message Refund { int64 order_id = 1; }
"""
# v2: `tags` removed (its number reserved), `channel` added.
ORDER_V2 = ORDER_V1.replace(
    "  repeated string tags = 5;\n", "  reserved 5;\n  string channel = 12;\n"
)
PLACED = datetime(2026, 11, 24, 12, 30, 15, 123000, tzinfo=UTC)
COMMON = {
    "id": 7,
    "quantity": 3,
    "placed": PLACED,
    "address": {"city": "Lyon", "zip": None},
    "counts": {"x": 1},
    "status": "SHIPPED",
    "note": None,
    "total_cents": Decimal(2**63 + 5),
    "coupon": "WELCOME",
    "lines": [{"sku": "A-1", "qty": 2}],
}
V1_ROW = {**COMMON, "tags": ["a", "b"]}
V2_ROW = {**COMMON, "channel": "web"}


def _register(registry: SchemaRegistry, subject: str, text: str) -> int:
    """`text` under `subject`, importing shop/address.proto (registered once per registry)."""
    try:
        registry.call("GET", "/subjects/shop-address/versions/1")
    except OSError:  # urllib's HTTPError: not there yet
        registry.register("shop-address", ADDRESS, "PROTOBUF")
    reference = {"name": "shop/address.proto", "subject": "shop-address", "version": 1}
    return registry.register(subject, text, "PROTOBUF", [reference])


def resolve_reader(
    client: SchemaRegistryClient,
    subject: str,
    version: int | str = "latest",
    message: str | None = None,
) -> ProtobufReaderSchema:
    """The seam's reader at query start, for valueFormat=protobuf."""
    reader = resolve_reader_schema(client, subject, version, "protobuf", message)
    assert isinstance(reader, ProtobufReaderSchema)
    return reader


def _decoder(client: SchemaRegistryClient, reader: ProtobufReaderSchema) -> WireDecoder:
    return WireDecoder(client, reader, "protobuf")


def _classes(text: str) -> dict:
    return message_classes({"order.proto": text, "shop/address.proto": ADDRESS}, "order.proto")


def _order(classes: dict, **fields: object) -> object:
    """An order of `classes` with COMMON's values, then `fields`."""
    scalars = {"id": 7, "quantity": 3, "status": 2, "total_cents": 2**63 + 5}
    order = classes["shop.Order"](**{**scalars, **fields})
    order.placed.FromDatetime(PLACED.replace(tzinfo=None))
    order.address.city = "Lyon"
    order.counts["x"] = 1
    order.coupon.value = "WELCOME"
    order.lines.add(sku="A-1", qty=2)
    return order


def _produce(kafka: KafkaBroker, values: list[bytes | None]) -> str:
    topic = new_topic(kafka.bootstrap, partitions=1, prefix="proto")
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    return topic


def _decoded(kafka: KafkaBroker, decoder: WireDecoder, values: list[bytes | None]) -> list:
    return [decoder.decode(v) for v in consume_values(kafka.bootstrap, _produce(kafka, values))]


def test_older_and_newer_records_decode_to_the_latest_message(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    v1 = _register(schema_registry, "proto-latest-value", ORDER_V1)
    v2 = _register(schema_registry, "proto-latest-value", ORDER_V2)
    client = SchemaRegistryClient(schema_registry.url)
    reader = resolve_reader(client, "proto-latest-value")
    assert (reader.schema_id, reader.version) == (v2, 2)
    assert reader.message == "shop.Order"  # the first message of the file
    old, new = _classes(ORDER_V1), _classes(ORDER_V2)
    decoder = _decoder(client, reader)
    decoded = _decoded(
        kafka,
        decoder,
        [
            proto_wire_format(v1, _order(old, tags=["a", "b"])),
            proto_wire_format(v2, _order(new, channel="web", note="")),
        ],
    )
    # v1's tags are a field v2 does not know: skipped; v1 sent no channel: its default
    assert decoded == [{**V2_ROW, "channel": ""}, {**V2_ROW, "note": ""}]
    # the fields in the order the file declares them (channel where tags was)
    assert decoder.column_type.simpleString() == (
        "struct<id:bigint,quantity:int,placed:timestamp,address:struct<city:string,zip:string>,"
        "channel:string,counts:map<string,bigint>,status:string,note:string,"
        "total_cents:decimal(20,0),coupon:string,lines:array<struct<sku:string,qty:bigint>>>"
    )


def test_a_pinned_older_version_reads_newer_records_in_its_own_shape(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    v1 = _register(schema_registry, "proto-pinned-value", ORDER_V1)
    v2 = _register(schema_registry, "proto-pinned-value", ORDER_V2)
    client = SchemaRegistryClient(schema_registry.url)
    decoder = _decoder(client, resolve_reader(client, "proto-pinned-value", 1))
    decoded = _decoded(
        kafka,
        decoder,
        [
            proto_wire_format(v2, _order(_classes(ORDER_V2), channel="shop")),
            proto_wire_format(v1, _order(_classes(ORDER_V1), tags=["a", "b"])),
        ],
    )
    # v2 sends no tags (v1's reader: empty) and a channel v1 does not know (skipped)
    assert decoded == [{**V1_ROW, "tags": []}, V1_ROW]
    assert decoder.column_type.fieldNames()[-1] == "lines"


def test_poison_records_are_classified_and_decoding_goes_on(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    good_id = _register(schema_registry, "proto-poison-value", ORDER_V1)
    avro_id = schema_registry.register("poison-avro-value", AVRO_ORDER)
    # Another file whose first message has another full name.
    other_id = schema_registry.register(
        "poison-other-value", 'syntax = "proto3"; package other; message Order { int64 id = 1; }',
        "PROTOBUF",
    )  # fmt: skip
    classes = _classes(ORDER_V1)
    good = proto_wire_format(good_id, _order(classes, tags=["a", "b"]))
    header = good[:5]
    values = [
        b"\x01" + good[1:],  # bad magic byte
        proto_wire_format(987_654, _order(classes)),  # an id no one registered
        good[:3],  # not even a header
        header + b"\x06\x00",  # three indexes announced, one there
        header + b"\xff\xff\xff\xff\xff\xff\x00",  # not a 32-bit varint
        proto_wire_format(avro_id, _order(classes)),  # an Avro schema's id
        proto_wire_format(other_id, _order(classes)),  # another message's full name
        proto_wire_format(good_id, classes["shop.Refund"](order_id=7), [1]),  # another message
        proto_wire_format(good_id, classes["shop.Order.Line"](sku="x"), [0, 0]),  # nested one
        proto_wire_format(good_id, _order(classes), [3]),  # indexes naming no message
        good[:-3],  # the payload cut inside a field
        header + b"\x00" + b"\x0a\x05ab",  # a length past the payload's end
        None,  # a tombstone: not poison
        good,
    ]
    client = SchemaRegistryClient(schema_registry.url)
    decoded = _decoded(
        kafka, _decoder(client, resolve_reader(client, "proto-poison-value")), values
    )
    reasons = [d.reason if isinstance(d, Poison) else d for d in decoded]
    assert reasons == [
        BAD_MAGIC_BYTE,
        UNKNOWN_SCHEMA_ID,
        TRUNCATED,
        TRUNCATED,
        TRUNCATED,
        UNRESOLVABLE_SCHEMA,
        UNRESOLVABLE_SCHEMA,
        UNRESOLVABLE_SCHEMA,
        UNRESOLVABLE_SCHEMA,
        UNRESOLVABLE_SCHEMA,
        MALFORMED_PAYLOAD,
        MALFORMED_PAYLOAD,
        None,
        V1_ROW,
    ]
    messages = [d.message for d in decoded if isinstance(d, Poison)]
    assert "987654" in messages[1]
    assert f"schema id {avro_id} is AVRO, not PROTOBUF" in messages[5]
    assert "wrote message other.Order (indexes [0]), not the reader's shop.Order" in messages[6]
    assert "wrote message shop.Refund" in messages[7]
    assert "wrote message shop.Order.Line (indexes [0, 0])" in messages[8]
    assert "indexes [3] name no message" in messages[9]


def test_the_registry_is_asked_once_per_schema_id(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    v1 = _register(schema_registry, "proto-cache-value", ORDER_V1)
    v2 = _register(schema_registry, "proto-cache-value", ORDER_V2)
    old, new = _classes(ORDER_V1), _classes(ORDER_V2)
    values = [proto_wire_format(v1, _order(old)), proto_wire_format(v2, _order(new))] * 50
    values += [proto_wire_format(424_242, _order(old))] * 2  # unknown: a miss is kept too
    client = SchemaRegistryClient(schema_registry.url)
    decoder = _decoder(client, resolve_reader(client, "proto-cache-value"))
    before = client.requests
    decoded = _decoded(kafka, decoder, values)
    assert sum(isinstance(d, Poison) for d in decoded) == 2
    # v1 by id and the address it imports, then the unknown id; v2 is the reader's own
    assert client.requests - before == 3


def test_the_sources_batches_get_a_typed_value_column(
    kafka: KafkaBroker, schema_registry: SchemaRegistry
) -> None:
    v1 = _register(schema_registry, "proto-batches-value", ORDER_V1)
    classes = _classes(ORDER_V1)
    topic = _produce(kafka, [proto_wire_format(v1, _order(classes, id=n)) for n in range(5)])
    client = SchemaRegistryClient(schema_registry.url)
    decoder = _decoder(client, resolve_reader(client, "proto-batches-value"))
    config = {"bootstrap.servers": kafka.bootstrap}
    p = KafkaInputPartition(topic, 0, 0, 5, client_config=config, read_path="python")
    reader = read_range(p)
    try:
        batches = [decode_value_column(batch, decoder) for batch in reader]  # the seam's step
    finally:
        reader.close()
    rows = [row for batch in batches for row in batch.column("value").to_pylist()]
    assert [row["id"] for row in rows] == list(range(5))
    assert rows[0]["placed"] == PLACED and rows[0]["counts"] == [("x", 1)]
    assert rows[0]["total_cents"] == Decimal(2**63 + 5) and rows[0]["tags"] == []


def test_reader_errors_at_start_name_the_fix(schema_registry: SchemaRegistry) -> None:
    client = SchemaRegistryClient(schema_registry.url)
    with pytest.raises(ReaderSchemaError, match="'proto-nowhere-value' has no version latest"):
        resolve_reader(client, "proto-nowhere-value")
    schema_registry.register("proto-avro-start-value", AVRO_ORDER)
    with pytest.raises(ReaderSchemaError, match="version 1 is AVRO, not PROTOBUF"):
        resolve_reader(client, "proto-avro-start-value")
    _register(schema_registry, "proto-named-value", ORDER_V1)
    assert (
        resolve_reader(client, "proto-named-value", message="shop.Refund").message == "shop.Refund"
    )
    with pytest.raises(ReaderSchemaError, match=r"no top-level message 'Refund'; it has "
                       r"shop\.Order, shop\.Refund \(option valueMessageName"):  # fmt: skip
        resolve_reader(client, "proto-named-value", message="Refund")
    tree = 'syntax = "proto3"; package t; message Tree { repeated Tree children = 1; }'
    schema_registry.register("proto-tree-value", tree, "PROTOBUF")
    with pytest.raises(ReaderSchemaError, match=r"value\.children: message t\.Tree contains"):
        resolve_reader(client, "proto-tree-value")


# A sink's pinned schema: its first message takes the query's value, the Address it holds
# imported through a registry reference.
DELIVERY = """syntax = "proto3";
package shop;
import "shop/address.proto";

message Delivery {
  int64 id = 1;
  Address address = 2;
}
"""


def test_the_sink_writes_with_a_pinned_schema_that_imports_another_by_reference(
    schema_registry: SchemaRegistry,
) -> None:
    """Issue 43: `spec.job.sink.value: {format: protobuf, version: 1}` pinned to a schema that
    imports shop/address.proto by reference. The driver compiles it with the file it imports
    (spark_app/runner/sink_schema.py), the executors encode with those descriptors
    (spark_app/formats/value_encoder.py), and a reader that knows only the registry decodes
    every value back (the source's own decoder)."""
    schema_id = _register(schema_registry, "deliveries-value", DELIVERY)
    document = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "StreamingJob",
        "metadata": {"name": "deliveries", "namespace": "test"},
        "spec": {
            "job": {
                "source": {
                    "bootstrapServers": "127.0.0.1:1",  # never reached: no read here
                    "subscribe": ["orders"],
                    "groupId": "deliveries",
                    "value": {"format": "avro", "schemaRegistry": {"url": schema_registry.url}},
                },
                "sink": {
                    "format": "kafka",
                    "topic": "deliveries",
                    "value": {"format": "protobuf", "version": 1},
                },
            },
            "checkpoint": {"location": "file:///tmp/unused"},
        },
    }
    address = {"city": "string", "zip": "string"}
    column = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {
                "name": "address",
                "type": {
                    "type": "struct",
                    "fields": [
                        {"name": n, "type": t, "nullable": n == "zip", "metadata": {}}
                        for n, t in address.items()
                    ],
                },
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    options = writer_options(load_manifest(document).spec.job, column, {})
    assert options["valueSchemaId"] == str(schema_id)
    encoder = ValueEncoder.of_options(options)
    assert encoder is not None
    rows = [
        {"id": 1, "address": {"city": "Lyon", "zip": "69001"}},
        {"id": 2, "address": {"city": "Nantes", "zip": None}},
        {"id": 3, "address": None},
    ]
    client = SchemaRegistryClient(schema_registry.url)
    decoder = _decoder(client, resolve_reader(client, "deliveries-value", 1))
    assert [decoder.decode(encoder.encode(row)) for row in rows] == rows
