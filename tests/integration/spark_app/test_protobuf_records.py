"""valueFormat=protobuf end to end: a real broker, a real schema registry (Apicurio,
schemaType PROTOBUF with a reference) and a query on local Spark on the default read path.
Records of two schema versions decode to the reader message's typed column (every record
checked), a poison record goes to the dead-letter topic with its reason. The decoder's cases:
tests/integration/test_protobuf_decoding.py; the Avro twin and the per-path runs:
test_typed_records.py; the JSON one: test_json_records.py."""

from __future__ import annotations

from decimal import Decimal

import pytest

from devbed.kafka_broker import KafkaBroker
from devbed.schema_registry import SchemaRegistry
from spark_app.formats.decoding import MALFORMED_PAYLOAD
from tests.integration.spark_app.test_typed_records import (  # the Avro tests' query helpers
    Query,
    produce,
    rows_but_one_dead,
    spark,  # noqa: F401  (the module's Spark session fixture)
    values_by_id,
)
from tests.integration.test_protobuf_decoding import (  # the decoder tests' schemas
    ORDER_V1,
    ORDER_V2,
    PLACED,
    _classes,
    _order,
    _register,
)
from tests.support.kafka_tools import new_topic
from tests.support.protobuf_messages import proto_wire_format

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# v2, the reader (latest): v1's `tags` removed, `channel` added; fields in declaration order
VALUE_TYPE = (
    "struct<id:bigint,quantity:int,placed:timestamp,address:struct<city:string,zip:string>,"
    "channel:string,counts:map<string,bigint>,status:string,note:string,"
    "total_cents:decimal(20,0),coupon:string,lines:array<struct<sku:string,qty:bigint>>>"
)


def as_reader(n: int, channel: str) -> dict:
    """Record n as the v2 reader gives it, whichever version wrote it (see _order)."""
    return {
        "id": n,
        "quantity": n,
        "placed": PLACED,
        "address": {"city": "Lyon", "zip": None},
        "channel": channel,  # a v1 record has none: proto3's default, ""
        "counts": {"x": 1},
        "status": "SHIPPED",
        "note": f"note {n}" if n % 2 else None,  # proto3 optional: null when unset
        "total_cents": Decimal(2**63 + 5),
        "coupon": "WELCOME",
        "lines": [{"sku": "A-1", "qty": 2}],
    }


def test_protobuf_records_decode_to_typed_columns_and_poison_goes_to_the_dead_letter_topic(
    spark,  # noqa: F811
    kafka: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path,
):
    topic = new_topic(kafka.bootstrap, partitions=2, prefix="proto-typed")
    dead_topic = new_topic(kafka.bootstrap, partitions=1, prefix="proto-dlq")
    v1 = _register(schema_registry, f"{topic}-value", ORDER_V1)
    v2 = _register(schema_registry, f"{topic}-value", ORDER_V2)
    old, new = _classes(ORDER_V1), _classes(ORDER_V2)

    def written(classes: dict, n: int, **fields: object) -> object:
        note = {"note": f"note {n}"} if n % 2 else {}
        return _order(classes, id=n, quantity=n, **note, **fields)

    bad = proto_wire_format(v2, written(new, 8, channel="shop"))[:-3]  # cut inside a field
    older = [(n, proto_wire_format(v1, written(old, n, tags=["t"]))) for n in range(4)]
    newer = [(n, proto_wire_format(v2, written(new, n, channel="shop"))) for n in range(4, 8)]
    produce(kafka, topic, older)
    produce(kafka, topic, newer)
    produce(kafka, topic, [(99, None), (8, bad)])  # a tombstone (not poison), a poison record
    source = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "kafka.group.id": f"{topic}-g",
        "partitionDiscoveryIntervalMs": "0",
        "valueFormat": "protobuf",
        "schemaRegistryUrl": schema_registry.url,
        "deadLetterTopic": dead_topic,
    }
    query = Query(spark, source, tmp_path)
    # 8 good records and the tombstone; the poison record's copy is committed to the
    # dead-letter topic before its batch's output is
    rows = rows_but_one_dead(
        query, kafka, topic, dead_topic, (b"8", bad, MALFORMED_PAYLOAD.encode()), rows=9
    )
    # schema() gave the reader message's type (its import fetched and compiled at start)
    assert query.schema["value"].dataType.simpleString() == VALUE_TYPE
    by_id = values_by_id(rows)
    expected = {n: as_reader(n, "") for n in range(4)}
    expected |= {n: as_reader(n, "shop") for n in range(4, 8)}
    assert by_id == expected
    assert [r["key"] for r in rows if r["value"] is None] == [b"99"]
