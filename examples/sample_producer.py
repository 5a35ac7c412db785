"""Creates a topic (if missing) and produces order events to it at a steady rate: JSON, or
Avro in the Confluent wire format with the schema registered in a schema registry.

python examples/sample_producer.py --bootstrap 127.0.0.1:9092 --topic orders --rate 500
python examples/sample_producer.py --topic orders-avro \
    --avro http://127.0.0.1:8081/apis/ccompat/v7 --poison-every 1000
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=15).topics:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "streamingjob.example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


def register(registry_url: str, subject: str, schema: dict) -> int:
    """The schema's id in the registry (registered if new), by its Confluent-compatible API."""
    body = json.dumps({"schema": json.dumps(schema)}).encode()
    request = urllib.request.Request(
        f"{registry_url}/subjects/{subject}/versions",
        data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.loads(answer.read())["id"])


def avro_encoder(registry_url: str, topic: str):
    """order -> its value in the wire format: magic byte 0, the schema id, the Avro binary."""
    import fastavro

    schema_id = register(registry_url, f"{topic}-value", ORDER)
    parsed = fastavro.parse_schema(ORDER)

    def encode(order: dict) -> bytes:
        out = io.BytesIO()
        out.write(struct.pack(">bI", 0, schema_id))
        fastavro.schemaless_writer(out, parsed, order)
        return out.getvalue()

    return encode


def as_json(order: dict) -> bytes:
    return json.dumps(order).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=int, default=500, help="records per second")
    parser.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    parser.add_argument("--avro", metavar="REGISTRY_URL", help="Avro, schemas in this registry")
    parser.add_argument(
        "--poison-every", type=int, default=0, help="every Nth value not Avro (a bad magic byte)"
    )
    parser.add_argument("--dead-letter-topic", help="create this topic too (the job's)")
    args = parser.parse_args()
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    if args.dead_letter_topic:
        ensure_topic(args.bootstrap, args.dead_letter_topic, args.partitions)
    encode = avro_encoder(args.avro, args.topic) if args.avro else as_json
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20})
    sent, started = 0, time.monotonic()
    while not args.count or sent < args.count:
        order = {"id": sent, "customer": f"c{sent % 97}", "amount": round(sent % 500 * 1.5, 2)}
        value = encode(order)
        if args.poison_every and sent % args.poison_every == args.poison_every - 1:
            value = b"\x01" + value[1:]  # a poison record for the dead-letter topic
        producer.produce(args.topic, key=str(order["customer"]), value=value)
        sent += 1
        if sent % 100 == 0:
            producer.poll(0)
            ahead = sent / args.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    producer.flush(30)
    print(f"produced {sent} records to {args.topic}")


if __name__ == "__main__":
    main()
