"""The typed Kafka sink's encoders side by side in one run, on one core: the same rows (an order
of eight fields: long, int, double, string, boolean, timestamp, a list of strings, a nested
struct) into the Confluent wire format as Avro, JSON Schema and Protobuf
(spark_app/formats/value_encoder.py), each with the schema the sink would register for the
query's struct (writer_schemas, protobuf_writer: compiled by protoc first, as on the driver).
The encoders are interleaved in every round; a rate is rows per CPU second (this process's)
of one encoder's pass over all rows, its median over the rounds; ratios are to Avro's.
Every encoder's output is checked to read back first (Avro by fastavro, JSON by json,
Protobuf by Protobuf), so a fast wrong encoder cannot win.

    python bench/sink_encode_bench.py            writes bench/results/sink-encode.json
    python bench/sink_encode_bench.py --quick    a smoke check, writes nothing
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_app.formats.protobuf_values import pinned_reader
from spark_app.formats.protobuf_writer import protobuf_schema
from spark_app.formats.schema_registry_client import RegisteredSchema
from spark_app.formats.value_encoder import ValueEncoder
from spark_app.formats.writer_schemas import avro_schema, json_schema

RESULTS = Path(__file__).resolve().parent / "results" / "sink-encode.json"


def field(name: str, kind, nullable: bool = True) -> dict:
    return {"name": name, "type": kind, "nullable": nullable, "metadata": {}}


ORDER = {
    "type": "struct",
    "fields": [
        field("id", "long", nullable=False),
        field("qty", "integer"),
        field("ratio", "double"),
        field("item", "string"),
        field("paid", "boolean"),
        field("at", "timestamp"),
        field("tags", {"type": "array", "elementType": "string", "containsNull": False}),
        field("ship", {"type": "struct", "fields": [field("city", "string")]}),
    ],
}


def rows(count: int) -> list[dict]:
    at = datetime(2026, 11, 30, 9, 5, tzinfo=UTC)
    return [
        {"id": n, "qty": n % 9, "ratio": n / 7, "item": f"item-{n % 97}", "paid": n % 2 == 0,
         "at": at, "tags": ["a", "b"][: n % 3], "ship": {"city": "Oslo"} if n % 5 else None}
        for n in range(count)
    ]  # fmt: skip


def encoders() -> dict[str, ValueEncoder]:
    made = {}
    for fmt, schema in (
        ("avro", json.dumps(avro_schema(ORDER, "order"))),
        ("json", json.dumps(json_schema(ORDER, "order"))),
        ("protobuf", protobuf_schema(ORDER, "order")),
    ):
        options = {"valueFormat": fmt, "valueSchemaId": "1", "valueSchema": schema,
                   "valueType": json.dumps(ORDER)}  # fmt: skip
        if fmt == "protobuf":
            compiled = pinned_reader(RegisteredSchema(1, 1, schema, "PROTOBUF"), None, None)
            options["valueDescriptors"] = base64.b64encode(
                compiled.compiled.descriptor_set
            ).decode()
        encoder = ValueEncoder.of_options(options)
        assert encoder is not None
        made[fmt] = encoder
    return made


def check(made: dict[str, ValueEncoder], sample: list[dict]) -> None:
    """Each encoder's bytes read back as the row (ids and fields by each format's reader)."""
    import fastavro
    from google.protobuf import json_format, message_factory

    parsed = fastavro.parse_schema(avro_schema(ORDER, "order"))
    schema = protobuf_schema(ORDER, "order")
    descriptor = pinned_reader(RegisteredSchema(1, 1, schema, "PROTOBUF"), None, None).descriptor()
    message = message_factory.GetMessageClass(descriptor)
    for row in sample:
        avro = fastavro.schemaless_reader(io.BytesIO(made["avro"].encode(row)[5:]), parsed, parsed)
        document = json.loads(made["json"].encode(row)[5:])
        proto = json_format.MessageToDict(
            message.FromString(made["protobuf"].encode(row)[6:]),
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )
        assert avro["id"] == document["id"] == int(proto["id"]) == row["id"], (avro, proto)
        assert avro["item"] == document["item"] == proto["item"] == row["item"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5, help="rounds, the encoders interleaved")
    parser.add_argument("--quick", action="store_true", help="a smoke check; writes nothing")
    args = parser.parse_args(argv)
    count, runs = (2_000, 1) if args.quick else (args.records, args.runs)
    data, made = rows(count), encoders()
    check(made, data[:50])
    seconds: dict[str, list[float]] = {fmt: [] for fmt in made}
    for _ in range(runs):
        for fmt, encoder in made.items():
            started = time.process_time()
            for row in data:
                encoder.encode(row)
            seconds[fmt].append(time.process_time() - started)
    rates = {fmt: round(count / statistics.median(s)) for fmt, s in seconds.items()}
    result = {
        "records": count,
        "runs": runs,
        "python": platform.python_version(),
        "rates_per_s": rates,
        "ratios_to_avro": {fmt: round(rate / rates["avro"], 3) for fmt, rate in rates.items()},
    }
    print(json.dumps(result, indent=2))
    if not args.quick:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
