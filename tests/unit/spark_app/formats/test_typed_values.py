"""valueFormat=avro without services: the reader schema is pinned by schema() and travels with
the pickled data source to the reader and its partitions; the executors' decode step gives
batches of exactly the schema Spark checks, and names the record it stops at. On a real
broker and registry, through Spark: tests/integration/spark_app/test_typed_records.py."""

from __future__ import annotations

import json
import pickle
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from devbed.ports import free_port
from devbed.schema_registry import wire_format
from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.formats import typed_values
from spark_app.formats.avro_types import arrow_column
from spark_app.formats.decoding import (
    AvroDecoder,
    PoisonRecordError,
    ReaderSchemaError,
    decode_value_column,
)
from spark_app.formats.schema_registry_client import RegisteredSchema, RegistryUnavailable
from spark_app.formats.typed_values import TypedValues
from spark_app.source.partition_range import KafkaInputPartition, arrow_schema, spark_schema
from spark_app.source.partition_reader import to_record_batch
from spark_app.source.source import KafkaCheckpointedDataSource
from spark_app.source.value_decoder import decoded

pytestmark = pytest.mark.unit

SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {
            "name": "where",
            "type": {"type": "record", "name": "Where", "fields": [{"name": "c", "type": "int"}]},
        },
    ],
}
READER = RegisteredSchema(schema_id=41, version=3, schema=json.dumps(SCHEMA))
AVRO = {
    "kafka.bootstrap.servers": "b:9092",
    "subscribe": "orders",
    "kafka.group.id": "g",
    "valueFormat": "avro",
    "schemaRegistryUrl": "http://registry.data.svc:8081",
}
ORDER = {
    "id": 1,
    "day": date(2026, 11, 24),
    "price": Decimal("12.34"),
    "at": datetime(2026, 11, 24, 12, 0, 1, 500000, tzinfo=UTC),
    "note": None,
    "where": {"c": 7},
}


class NoRegistry:
    """A registry client that is never reachable."""

    url = "http://registry.data.svc:8081"

    def schema_by_id(self, schema_id: int) -> RegisteredSchema:
        raise RegistryUnavailable(f"schema registry {self.url} unavailable for 1s (GET x)")


def values() -> TypedValues:
    return TypedValues(SourceOptions.parse(AVRO).value_decoding, READER)  # type: ignore[arg-type]


def raw_batch(values: list[bytes | None], first_offset: int = 10) -> pa.RecordBatch:
    p = KafkaInputPartition("orders", 2, first_offset, first_offset + len(values), {})
    n = len(values)
    return to_record_batch(
        p,
        arrow_schema(False),
        first_offset=first_offset,
        offsets=None,
        keys=[None] * n,
        values=values,
        kinds=[1] * n,
        millis=[0] * n,
        headers=None,
    )


def test_schema_pins_the_reader_schema_for_the_reader_and_its_partitions(monkeypatch):
    monkeypatch.setattr(typed_values, "at_query_start", lambda decoding: values())
    source = KafkaCheckpointedDataSource(dict(AVRO))
    schema = source.schema()
    value = schema["value"].dataType
    assert value.fieldNames() == ["id", "day", "price", "at", "note", "where"]
    assert schema.fieldNames() == spark_schema(False).fieldNames()  # metadata columns kept
    # PySpark pickles the data source after schema() to the planning processes.
    reader = pickle.loads(pickle.dumps(source)).streamReader(schema)
    assert reader.values == values()
    assert pickle.loads(pickle.dumps(reader)).values == values()  # on to the executors
    assert "schema id 41" in repr(reader.values) and "Order" not in repr(reader.values)


def test_a_schema_of_the_queries_own_is_refused_with_avro():
    with pytest.raises(OptionError, match=r"without a schema of its own \(no \.schema"):
        KafkaCheckpointedDataSource(dict(AVRO)).streamReader(spark_schema(False))


def test_a_registry_down_at_query_start_names_the_option_and_the_fix():
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    options = {**AVRO, "schemaRegistryUrl": url, "schemaRegistryTimeoutMs": "300"}
    with pytest.raises(ReaderSchemaError) as error:
        KafkaCheckpointedDataSource(options).schema()
    text = str(error.value)
    assert f"option schemaRegistryUrl='{url}'" in text
    assert "Start the registry" in text and "schemaRegistryTimeoutMs=300" in text
    assert "GET /subjects/orders-value/versions/latest" in text


def test_decoded_batches_have_sparks_schema_and_records_of_the_reader_schema_need_no_registry():
    decoder = AvroDecoder(NoRegistry(), READER)  # type: ignore[arg-type]
    good = wire_format(41, SCHEMA, ORDER)
    batch = decode_value_column(raw_batch([good, None]), decoder)
    expected = typed_values.source_schema(spark_schema(False), values())
    assert batch.schema.equals(to_arrow_schema(expected, timezone="UTC"))  # Spark's check
    assert batch.column("value").to_pylist() == [ORDER, None]
    assert batch.column("offset").to_pylist() == [10, 11]


def test_a_poison_record_names_the_record_the_skip_and_what_the_skip_also_skips():
    decoder = AvroDecoder(NoRegistry(), READER)  # type: ignore[arg-type]
    good = wire_format(41, SCHEMA, ORDER)
    with pytest.raises(PoisonRecordError) as error:
        decode_value_column(raw_batch([good, b"\x01" + good[1:]]), decoder, range_start=8)
    assert str(error.value).startswith(
        "poison record orders-2 offset 11: bad-magic-byte: value: magic byte 1, expected 0. "
        "The batch fails and nothing of it is committed"
    )
    assert "move the group's offset of orders-2 to 12" in str(error.value)
    assert str(error.value).endswith("also skips offsets 8..10, which this batch read before it")
    assert (error.value.topic, error.value.partition, error.value.offset) == ("orders", 2, 11)
    with pytest.raises(PoisonRecordError) as first:
        decode_value_column(raw_batch([good[:3]]), decoder, range_start=10)
    assert "also skips" not in str(first.value)  # the first record of the range


def test_a_registry_outage_for_a_new_id_names_the_record():
    decoder = AvroDecoder(NoRegistry(), READER)  # type: ignore[arg-type]
    with pytest.raises(RegistryUnavailable) as error:
        decode_value_column(raw_batch([wire_format(42, SCHEMA, ORDER)]), decoder)
    assert str(error.value).startswith("orders-2 offset 10: schema registry http")
    assert "option schemaRegistryUrl" in str(error.value)


def test_the_decode_step_closes_the_read_when_a_poison_record_stops_it():
    closed = []

    def read():
        try:
            yield raw_batch([b"junk"])
        finally:
            closed.append(True)

    p = KafkaInputPartition("orders", 2, 10, 11, {}, values=values())
    with pytest.raises(PoisonRecordError, match="orders-2 offset 10: truncated"):
        list(decoded(read(), p))
    assert closed == [True]


def test_an_inline_reader_schema_asks_no_registry_and_decodes_like_a_registered_one():
    # The registry is never reachable: the inline schema needs it only for writer ids.
    url = f"http://127.0.0.1:{free_port()}"
    options = {**AVRO, "schemaRegistryUrl": url, "valueSchema": json.dumps(SCHEMA)}
    source = KafkaCheckpointedDataSource(options)
    schema = source.schema()
    assert (
        schema["value"].dataType
        == typed_values.source_schema(spark_schema(False), values())["value"].dataType
    )
    inline = pickle.loads(pickle.dumps(source)).streamReader(schema).values
    assert inline.reader.schema_id is None and inline.reader.version is None
    assert repr(inline) == "TypedValues(inline reader schema Order (option valueSchema))"
    # a record written with the same schema under id 41 needs the registry: outage, named
    decoder = AvroDecoder(NoRegistry(), inline.reader)  # type: ignore[arg-type]
    with pytest.raises(RegistryUnavailable):
        decoder.decode(wire_format(41, SCHEMA, ORDER))


def test_an_inline_reader_schema_that_is_not_valid_avro_names_the_option():
    bad = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "lung"}]}
    with pytest.raises(ReaderSchemaError, match="option valueSchema is not a valid Avro schema"):
        KafkaCheckpointedDataSource({**AVRO, "valueSchema": json.dumps(bad)}).schema()


def test_a_ca_file_that_cannot_be_read_names_the_option(tmp_path):
    options = {
        **AVRO,
        "schemaRegistryUrl": "https://registry.data.svc:8443",
        "schemaRegistryCaFile": str(tmp_path / "missing.crt"),
    }
    with pytest.raises(
        ReaderSchemaError, match=r"option schemaRegistryCaFile=.* is not a readable"
    ):
        KafkaCheckpointedDataSource(options).schema()


TIMES = {
    "type": "record",
    "name": "Times",
    "fields": [
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {
            "name": "many",
            "type": {"type": "array", "items": {"type": "long", "logicalType": "timestamp-micros"}},
        },
        {
            "name": "by_key",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "At",
                    "fields": [
                        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                        {"name": "of_day", "type": {"type": "int", "logicalType": "time-millis"}},
                    ],
                },
            },
        },
        {"name": "again", "type": "At"},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
TIMES_READER = RegisteredSchema(schema_id=7, version=1, schema=json.dumps(TIMES))


def times(n: int) -> dict:
    at = datetime(2026, 11, 24, 12, 0, 1, 500000 + n, tzinfo=UTC)
    return {
        "ms": datetime(2026, 11, 24, 12, 0, 1, 123000, tzinfo=UTC),
        "us": None if n % 2 else at,
        "local": datetime(2026, 11, 24, 12, 0, 2, 250000),
        "many": [at, at],
        "by_key": {"k": {"t": datetime(1969, 12, 31, 23, 59, 59, 1000, tzinfo=UTC), "of_day": 5}},
        "again": {"t": datetime(2026, 1, 1, tzinfo=UTC), "of_day": 86_399_999},
        "id": "0b2d6f8e-6c1e-4f5a-9a53-2f9c1f2e7a10",
    }


def test_a_batch_of_the_reader_schema_id_reads_timestamps_as_longs_into_the_same_column():
    decoder = AvroDecoder(NoRegistry(), TIMES_READER)  # type: ignore[arg-type]
    values = [wire_format(7, TIMES, times(n)) for n in range(3)] + [None]
    own = decoder.decode_batch(values)
    per_record = arrow_column([decoder.decode(v) for v in values], decoder.column_type)
    assert own is not None and own.type == per_record.type and own.equals(per_record)
    column = decode_value_column(raw_batch(values), decoder).column("value")
    assert column.to_pylist()[0]["many"][0] == times(0)["many"][0]  # to the microsecond
    assert column.to_pylist()[1]["us"] is None and column.to_pylist()[3] is None
    assert column.to_pylist()[0]["by_key"] == [
        ("k", {"t": times(0)["by_key"]["k"]["t"], "of_day": 5})
    ]


def test_a_batch_with_another_id_or_a_poison_record_goes_record_by_record():
    decoder = AvroDecoder(NoRegistry(), TIMES_READER)  # type: ignore[arg-type]
    good = wire_format(7, TIMES, times(0))
    assert decoder.decode_batch([good, wire_format(8, TIMES, times(1))]) is None
    assert decoder.decode_batch([good, good + b"\x00"]) is None  # bytes left after the value
    assert decoder.decode_batch([good, good[:-3]]) is None  # truncated
    inline = RegisteredSchema(schema_id=None, version=None, schema=json.dumps(TIMES))
    assert AvroDecoder(NoRegistry(), inline).decode_batch([good]) is None  # no id of its own
    with pytest.raises(RegistryUnavailable, match="offset 11"):  # id 8 needs the registry
        decode_value_column(raw_batch([good, wire_format(8, TIMES, times(1))]), decoder)
    with pytest.raises(PoisonRecordError, match="offset 11: malformed-payload"):
        decode_value_column(raw_batch([good, good + b"\x00"]), decoder)
    plain = AvroDecoder(NoRegistry(), READER)  # type: ignore[arg-type]
    assert plain.decode_batch([wire_format(41, SCHEMA, ORDER)]) is not None
    assert plain.decode(wire_format(41, SCHEMA, ORDER)) == ORDER  # decode keeps its datetimes
