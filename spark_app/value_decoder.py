"""valueFormat=avro on the executors: the one decode step after the read.

Each read path (the native fetch and librdkafka engines, pure Python) yields the same raw
Arrow batches; their `value` column is decoded here, in the Python worker that read them,
so all paths share one decoder and the JVM only ever sees typed batches. A poison record
fails the read (`PoisonRecordError`), so the batch and nothing after it is committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_app.decoding import AvroDecoder, decode_value_column
from spark_app.partition_reader import KafkaInputPartition, gc_paused
from spark_app.typed_values import TypedValues

# Per Python worker process, which Spark reuses for many tasks: each writer schema id is
# fetched once per process, and ids already held keep decoding through a registry outage.
_decoders: dict[TypedValues, AvroDecoder] = {}


def decoder_for(values: TypedValues) -> AvroDecoder:
    if values not in _decoders:
        _decoders[values] = AvroDecoder(values.decoding.registry_client(), values.reader)
    return _decoders[values]


def decoded(batches: Iterator[Any], p: KafkaInputPartition) -> Iterator[Any]:
    """`batches` (a read of `p`) with their values decoded."""
    if p.values is None:
        raise ValueError(f"{p.name}: no reader schema to decode with")
    # Decoding makes no reference cycles either (fresh dicts and lists per record): the
    # collector stays paused, as while reading.
    return gc_paused(_decode(batches, decoder_for(p.values), p.start))


def _decode(batches: Iterator[Any], decoder: AvroDecoder, range_start: int) -> Iterator[Any]:
    try:
        for batch in batches:
            yield decode_value_column(batch, decoder, range_start)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:  # the read's consumer, also when a poison record stops it
            close()
