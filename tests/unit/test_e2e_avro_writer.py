"""The e2e client tool's own Avro writer (it runs in the operator's image, without fastavro)
encodes orders byte for byte as fastavro does, which the source reads them with."""

from __future__ import annotations

import io

import fastavro
import pytest

from devbed.kind_kafka_tool import AVRO_WRITER, ORDER_SCHEMA, typed_order

pytestmark = pytest.mark.unit

TOOL: dict = {}
exec(AVRO_WRITER, TOOL)  # as KAFKA_TOOL runs it


def fastavro_bytes(schema: object, value: object) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


@pytest.mark.parametrize("n", [0, 1, -1, 63, 64, -64, -65, 8192, 2**31, 2**63 - 1, -(2**63)])
def test_longs_encode_as_fastavro_writes_them(n: int) -> None:
    assert TOOL["avro_long"](n) == fastavro_bytes("long", n)


def test_orders_encode_as_fastavro_writes_them_and_read_back() -> None:
    fields = ORDER_SCHEMA["fields"]
    for n in [0, 1, 127, 128, 2**40, *range(0, 100_000, 997)]:
        order = typed_order(n)
        mine = b"".join(TOOL["AVRO_WRITERS"][f["type"]](order[f["name"]]) for f in fields)
        assert mine == fastavro_bytes(ORDER_SCHEMA, order), n
        parsed = fastavro.parse_schema(ORDER_SCHEMA)
        assert fastavro.schemaless_reader(io.BytesIO(mine), parsed, parsed) == order
