"""Prints a consumer group's committed offsets and lag per partition of a topic."""

from __future__ import annotations

import argparse

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group})
    partitions = consumer.list_topics(args.topic, timeout=10).topics[args.topic].partitions
    tps = [TopicPartition(args.topic, p) for p in sorted(partitions)]
    print(f"group {args.group} on {args.topic}:")
    for tp in consumer.committed(tps, timeout=10):
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        committed = tp.offset if tp.offset >= 0 else None
        lag = high - committed if committed is not None else high
        print(f"  partition {tp.partition}: committed {committed}, log end {high}, lag {lag}")
    consumer.close()


if __name__ == "__main__":
    main()
