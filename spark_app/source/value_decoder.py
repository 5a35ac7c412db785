"""Decoded columns (valueFormat, keyFormat: avro, json, protobuf) on the executors: the one
decode step after the read.

Each read path (the native fetch and librdkafka engines, pure Python) yields the same raw
Arrow batches; their `value` and `key` columns (those decoded) are decoded here, in the Python
worker that read them, so all paths share one decoder and the JVM only ever sees typed
batches. A poison record
fails the read (`PoisonRecordError`), so the batch and nothing after it is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from spark_app.formats.decoding import WireDecoder, decode_columns
from spark_app.formats.poison import DeadRecord
from spark_app.formats.schema_registry_client import client_for
from spark_app.formats.typed_values import TypedValues
from spark_app.sinks.dead_letter import read_name, write_dead_records
from spark_app.source.leader_epochs import log_end_of_epoch
from spark_app.source.partition_range import KafkaInputPartition, gc_paused

log = logging.getLogger(__name__)

# Per Python worker process, which Spark reuses for many tasks: each writer schema id is
# fetched once per process, and ids already held keep decoding through a registry outage.
_decoders: dict[TypedValues, WireDecoder] = {}


def decoder_for(values: TypedValues) -> WireDecoder:
    if values not in _decoders:
        client = client_for(values.decoding)
        _decoders[values] = WireDecoder(client, values.reader, values.decoding.format)
    return _decoders[values]


def decoded(batches: Iterator[Any], p: KafkaInputPartition) -> Iterator[Any]:
    """`batches` (a read of `p`) with their values and keys decoded (those `p` has reader
    schemas for)."""
    typed = [t for t in (p.values, p.keys) if t is not None]
    if not typed:
        raise ValueError(f"{p.name}: no reader schema to decode with")
    decoders = {t.decoding.column: decoder_for(t) for t in typed}
    # Decoding makes no reference cycles either (fresh dicts and lists per record): the
    # collector stays paused, as while reading.
    return gc_paused(_decode(batches, decoders, p))


def _decode(
    batches: Iterator[Any], decoders: dict[str, WireDecoder], p: KafkaInputPartition
) -> Iterator[Any]:
    read = None  # named by where its first batch begins (dead_letter.read_name)
    try:
        for batch in batches:
            if read is None and batch.num_rows:
                read = read_name(p.start, batch.column("offset")[0].as_py(), p.end_epoch)
            yield _decode_one(batch, decoders, p, read or "")
    finally:
        close = getattr(batches, "close", None)
        if close is not None:  # the read's consumer, also when a poison record stops it
            close()


def _decode_one(
    batch: Any, decoders: dict[str, WireDecoder], p: KafkaInputPartition, read: str
) -> Any:
    """One batch decoded; with a dead-letter topic, the records that cannot be are written
    there (in one transaction with the partition's progress) before the batch goes on."""
    dead: list[DeadRecord] | None = [] if p.dead_letter is not None else None
    out = decode_columns(batch, decoders, p.start, dead)
    if dead and p.dead_letter is not None:
        end = batch.column("offset")[-1].as_py() + 1  # this batch's records are handled
        written = write_dead_records(
            p.dead_letter,
            p.topic,
            p.partition,
            dead,
            end,
            read,
            lambda epoch, offset: log_end_of_epoch(p, epoch, offset),
        )
        log.warning(
            "%s: %d record(s) that cannot be decoded went to %s (%d written before), "
            "first at offset %d (%s): %s",
            p.name,
            written,
            p.dead_letter.topic,
            len(dead) - written,
            dead[0].offset,
            dead[0].column,
            dead[0].reason,
        )
    if p.headers_for_dead_letter_only and p.dead_letter is not None:
        out = out.drop_columns(["headers"])
    return out
