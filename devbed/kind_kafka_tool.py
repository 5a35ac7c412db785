"""The Kafka tool the kind bed's client pod runs (`python -c KAFKA_TOOL`: create a topic,
produce, read offsets, dead letters and the cluster's metadata) and the typed orders it writes
in Avro under the Confluent wire format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Avro's binary encoding of the primitive types an order has (the Avro specification), part
# of KAFKA_TOOL: the source reads them with fastavro, the tool writes them without it (it runs
# in the operator's image)
AVRO_WRITER = r"""
import struct

def avro_long(n):  # zig-zag, then a varint of 7 bits a byte, the lowest first
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))

def avro_string(s):
    data = s.encode()
    return avro_long(len(data)) + data

AVRO_WRITERS = {"long": avro_long, "string": avro_string, "double": lambda x: struct.pack("<d", x)}
"""

KAFKA_TOOL = (
    AVRO_WRITER
    + r"""
import json, os, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
command, bootstrap, topic, *rest = sys.argv[1:]

def produce_ids(producer, ids, encode=lambda n: json.dumps({"id": n}).encode()):
    for n in ids:
        producer.produce(topic, key=str(n).encode(), value=encode(n))
        producer.poll(0)

def produce_loop(start, rate, stop, encode=lambda n: json.dumps({"id": n}).encode()):
    producer = make_producer()
    n, began = start, time.monotonic()
    while not os.path.exists(stop):
        due = start + int((time.monotonic() - began) * rate)
        produce_ids(producer, range(n, max(n, due)), encode)
        n = max(n, due)
        time.sleep(0.02)
    assert producer.flush(60) == 0
    print("PRODUCED", n, flush=True)

# Registers `schema` under <topic>-value (as a Confluent serializer does) and returns an
# encoder of id n: the wire format (magic 0, schema id, Avro binary) of the order
# typed_order(n) of devbed/kind_kafka_tool.py, or for every poison_every-th id a poison record:
# alternately truncated (3 bytes, shorter than the header) and a bad magic byte.
def avro_orders(registry, schema, poison_every):
    import urllib.request
    body = json.dumps({"schema": schema, "schemaType": "AVRO"}).encode()
    request = urllib.request.Request(
        f"{registry}/subjects/{topic}-value/versions", data=body, method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        schema_id = json.loads(answer.read())["id"]
    fields = [(f["name"], f["type"]) for f in json.loads(schema)["fields"]]

    def encode(n):
        if n % poison_every == 0:
            return b"\x00\x00\x00" if (n // poison_every) % 2 == 0 else b"\x01" + bytes(8)
        order = {"id": n, "item": f"item-{n % 7}", "amount": n / 4}
        body = b"".join(AVRO_WRITERS[kind](order[name]) for name, kind in fields)
        return struct.pack(">bI", 0, schema_id) + body
    return encode


def partitions(consumer):
    return sorted(consumer.list_topics(topic, timeout=20).topics[topic].partitions)

# acks=all (librdkafka's default), idempotent: a retry is written once, nearly always (a leader
# change that bumps the producer's epoch can write a record twice: librdkafka's issue #4953)
def make_producer():
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

def read_to_end(isolation, timeout):  # every message such a reader sees, from start to end
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "isolation.level": isolation})
    tps = [TopicPartition(topic, p, 0) for p in partitions(consumer)]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=20)[1] for tp in tps}
    consumer.assign([tp for tp in tps if ends[tp.partition] > 0])
    seen, deadline = [], time.monotonic() + timeout
    # a read_committed reader passes the transactions' markers too: position reaches the end
    while any(tp.offset < ends[tp.partition] for tp in consumer.position(consumer.assignment())):
        if time.monotonic() > deadline:
            sys.exit(f"{topic} not read to its end {ends} (an open transaction?)")
        seen += [m for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return seen

if command == "create-topic":  # partitions, replication factor
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, int(rest[0]), int(rest[1]))])[topic].result(60)
elif command == "produce":
    producer = make_producer()
    produce_ids(producer, range(int(rest[0]), int(rest[1])))
    assert producer.flush(60) == 0
elif command == "produce-loop":  # start, rate/s, stop file: prints the id after the last one
    produce_loop(int(rest[0]), float(rest[1]), rest[2])
elif command == "produce-avro":  # registry URL, schema, poison every, start, stop
    encode = avro_orders(rest[0], rest[1], int(rest[2]))
    producer = make_producer()
    produce_ids(producer, range(int(rest[3]), int(rest[4])), encode)
    assert producer.flush(60) == 0
elif command == "produce-avro-loop":  # registry URL, schema, poison every, start, rate, stop file
    encode = avro_orders(rest[0], rest[1], int(rest[2]))
    produce_loop(int(rest[3]), float(rest[4]), rest[5], encode)
elif command == "dead-letters":  # what a read_committed reader sees, from the start to the end
    print(json.dumps([
        {"key": m.key().decode(), "value": m.value().hex(),
         "headers": {k: v.decode() for k, v in m.headers() or [] if v is not None}}
        for m in read_to_end("read_committed", float(rest[0]))
    ]))
elif command == "keys":  # [[partition, offset, key | null]] of every record, start to end
    print(json.dumps([[m.partition(), m.offset(), m.key() and m.key().decode()]
                      for m in read_to_end("read_uncommitted", 60)]))
elif command == "offsets":  # {"group": {p: o|None}, "end": {p: o}}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": rest[0]})
    tps = [TopicPartition(topic, p) for p in partitions(consumer)]
    group = {tp.partition: (tp.offset if tp.offset >= 0 else None)
             for tp in consumer.committed(tps, timeout=20)}
    end = {tp.partition: consumer.get_watermark_offsets(tp, timeout=20)[1] for tp in tps}
    consumer.close()
    print(json.dumps({"group": group, "end": end}))
elif command == "cluster":  # {"brokers": [id], "partitions": {p: {leader, replicas, isr}}}
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20)
    found = metadata.topics.get(topic)
    partitions = {p: {"leader": m.leader, "replicas": m.replicas, "isr": m.isrs}
                  for p, m in (found.partitions if found and not found.error else {}).items()}
    print(json.dumps({"brokers": sorted(metadata.brokers), "partitions": partitions}))
"""
)


# The typed records of the e2e tier: orders in Avro, their schema in the bed's registry.
ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "e2e",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


def typed_order(n: int) -> dict:
    """The order of id n as KAFKA_TOOL's avro_orders writes it."""
    return {"id": n, "item": f"item-{n % 7}", "amount": n / 4}


@dataclass(frozen=True)
class AvroOrders:
    """How the client pod writes orders in the Confluent wire format: ORDER_SCHEMA
    registered under <topic>-value at `registry`, and each `poison_every`-th id a record no
    reader can decode (KAFKA_TOOL's avro_orders)."""

    registry: str
    poison_every: int

    def args(self) -> tuple[str, ...]:
        return self.registry, json.dumps(ORDER_SCHEMA), str(self.poison_every)

    def is_poison(self, n: int) -> bool:
        return n % self.poison_every == 0

    def reason(self, n: int) -> str:
        """The source's poison reason (spark_app/formats/decoding.py) of id n's record."""
        return "truncated" if (n // self.poison_every) % 2 == 0 else "bad-magic-byte"
