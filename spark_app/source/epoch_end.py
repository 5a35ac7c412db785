"""Where the log a leader epoch wrote ends now, asked of the source partition's leader
(KIP-320's OffsetsForLeaderEpoch, through librdkafka's validation of a position that carries
its epoch): the dead-letter progress asks it before it skips records a later leader may have
written below it (semantics rule 16)."""

from __future__ import annotations

import dataclasses
import time

from spark_app.source.partition_range import KafkaInputPartition, client_config, no_progress
from spark_app.source.partition_reader import TRUNCATED_AT, validate_start


def log_end_of_epoch(p: KafkaInputPartition, epoch: int, offset: int) -> int:
    """`offset`, or where the log of leader `epoch` ends now when that is below it (an
    unclean election truncated the log there since the epoch's leader wrote up to
    `offset`). Fails as a read does when the leader does not answer within pollTimeoutMs."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(client_config(p))
    try:
        consumer.assign([TopicPartition(p.topic, p.partition, offset)])
        validate_start(consumer, dataclasses.replace(p, start=offset, start_epoch=epoch))
        deadline = time.monotonic() + p.poll_timeout_ms / 1000
        while time.monotonic() < deadline:
            for message in consumer.consume(1, 0.2):
                error = message.error()
                truncated = error is not None and TRUNCATED_AT.search(error.str())
                if truncated:
                    return min(offset, int(truncated.group(1)))
                if error is None or error.code() in (
                    KafkaError._PARTITION_EOF,  # validated: the log holds the epoch's offsets
                    KafkaError._AUTO_OFFSET_RESET,  # below the log start: deleted, not rewritten
                    KafkaError.OFFSET_OUT_OF_RANGE,
                ):
                    return offset
                raise KafkaException(error)
        raise no_progress(dataclasses.replace(p, start=offset, end=offset + 1), offset)
    finally:
        consumer.close()
