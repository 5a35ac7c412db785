"""Creates a topic (if missing) and produces JSON order events to it at a steady rate.

python examples/sample_producer.py --bootstrap 127.0.0.1:9092 --topic orders --rate 500
"""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=15).topics:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rate", type=int, default=500, help="records per second")
    parser.add_argument("--count", type=int, default=0, help="stop after this many (0: never)")
    args = parser.parse_args()
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20})
    sent, started = 0, time.monotonic()
    while not args.count or sent < args.count:
        order = {"id": sent, "customer": f"c{sent % 97}", "amount": round(sent % 500 * 1.5, 2)}
        producer.produce(args.topic, key=str(order["customer"]), value=json.dumps(order))
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
