"""A position checked against the log of its leader epoch (KIP-320, semantics rule 16), through
librdkafka's validation of a position that carries its epoch: a read's start
(`validate_start`), where a leader epoch's log ends now (`log_end_of_epoch`: asked by the
dead-letter progress, and by a read stalled short of its planned end)."""

from __future__ import annotations

import dataclasses
import logging
import re
import time

from spark_app.source.partition_range import KafkaInputPartition, client_config, no_progress

log = logging.getLogger("spark_app.source.partition_reader")

# librdkafka's KIP-320 validation says where a truncated log diverges only in its text
TRUNCATED_AT = re.compile(r"log truncation detected.*broker end offset is (\d+)")


def validate_start(consumer, p: KafkaInputPartition) -> None:
    """Has librdkafka validate the start position with its leader epoch before it fetches
    (KIP-320): an assignment is taken as it is, a seek to a position that carries an epoch
    is checked with OffsetsForLeaderEpoch. A log truncated below the start then arrives as
    the offset reset `_out_of_range` maps (its "log truncation detected" text).

    The assignment's first fetch may beat the seek: a start below the log start has then
    already been reset, which (`auto.offset.reset=error`) queues its error and stops the
    partition, and the seek is refused with _STATE. That queued error is the answer the
    seek would have led to, so the read goes on to it (CI run 56: the job failed instead)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    at = TopicPartition(p.topic, p.partition, p.start, leader_epoch=p.start_epoch)
    try:
        consumer.seek(at)  # waits until the partition takes it; records fetched before dropped
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._STATE:
            raise


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


def ended_with_its_epoch(p: KafkaInputPartition, position: int) -> bool:
    """Whether a read that made no progress at `position` for pollTimeoutMs, short of its
    planned end, has read all the plan's leader wrote: an unclean election since the plan
    cut that log at or below `position`, and the new leader has written nothing past it
    yet (else the read would have met its records and ended before them). Then the read
    ends there, and the next batch's validated start finds the truncation."""
    if p.end_epoch is None or log_end_of_epoch(p, p.end_epoch, p.end) > position:
        return False
    log.warning(
        "%s: the log of leader epoch %d (the plan's) ends at or below %d now, before the "
        "batch's end %d: an unclean election truncated it. The read ends at %d; the next "
        "batch goes on from where the log diverged (failOnDataLoss decides)",
        p.name,
        p.end_epoch,
        position,
        p.end,
        position,
    )
    return True
