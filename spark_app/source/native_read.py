"""The native read path: fetched records go straight into Arrow buffers.

`streamingjob_native` (native/, Rust: arrow-rs, pyo3, librdkafka through rdkafka-sys) reads
one partition's `[start, end)` and hands each record batch over the Arrow C data interface;
no Python object is made per record. Two engines read (the `nativeEngine` option):
`fetch` sends Kafka Fetch requests to the partition's leader itself and decodes the record
batches into Arrow (the fastest: no librdkafka message per record), for the client
settings it understands; `librdkafka` takes librdkafka's consumer messages, for every
setting; `auto` is fetch when it can, else librdkafka (the reason logged once per worker).
Both read exactly as the pure-Python path does (position-based end, cut at `end`, an
out-of-range start is an error), and the policy stays here: data loss per failOnDataLoss,
the no-progress error, Kafka errors as confluent's `KafkaException`, so all paths behave alike.

`readPath=auto` (the default) uses the native path when the module can be imported and the
client configuration is one it accepts, and falls back to pure Python otherwise; `readPath=native`
makes either an error. The driver says which path the executors take, once per query
(`read_path_line`); a worker logs a fallback the driver could not foresee, once per worker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from spark_app.formats.native_module import module
from spark_app.formats.native_module import unavailable_reason as _unavailable_reason
from spark_app.source.leader_epochs import ended_with_its_epoch
from spark_app.source.partition_range import (
    KafkaInputPartition,
    arrow_schema,
    gc_paused,
    log_truncated,
    no_progress,
    offsets_lost,
    read_cut,
    topic_deleted,
)

log = logging.getLogger(__name__)


class NativeUnavailable(RuntimeError):
    """readPath=native, but the native read path cannot be used here."""


_warned: set[str] = set()


def _log_once(level: int, message: str, why: str) -> None:
    """Logs `message` (with `why`) once per worker and reason: a worker reads many ranges."""
    if why not in _warned:
        _warned.add(why)
        log.log(level, message, why)


def executor_read_path(read_path: str) -> str:
    """The read path the driver hands its partitions: `auto` becomes `python` where the module
    does not load (the driver's image is the executors'), so no worker tries it and repeats
    the driver's line."""
    if read_path == "auto" and module() is None:
        return "python"
    return read_path


def read_path_line(read_path: str, native_engine: str) -> str:
    """One line for the driver's log: which read path the executors take, why, and how to
    get the native one."""
    if read_path == "python":
        return "read path: pure Python (confluent-kafka), as readPath=python asks"
    if module() is not None:
        return f"read path: native (Rust, records straight into Arrow; engine {native_engine})"
    why = _unavailable_reason[-1] if _unavailable_reason else ""
    missing = (
        "streamingjob_native is not installed"
        if why.startswith("No module named")
        else f"streamingjob_native does not load ({why})"
    )
    if read_path == "native":
        return f"read path: native on request, but {missing}: reads fail; `make native` builds it"
    return (
        f"read path: pure Python (confluent-kafka), because {missing}; "
        "`make native` builds the native one (Rust, about 2x the rows/s)"
    )


def _fallback(p: KafkaInputPartition, why: str) -> None:
    if p.read_path == "native":
        raise NativeUnavailable(f"{p.name}: readPath=native, but {why}")
    _log_once(logging.WARNING, "native read path unavailable (%s); reading with pure Python", why)


def _as_string(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def open_range(p: KafkaInputPartition, config: dict):
    """A native reader of `[p.start, p.end)`, or None to read with pure Python."""
    native = module()
    if native is None:
        _fallback(p, f"streamingjob_native cannot be imported: {_unavailable_reason[-1]}")
        return None
    try:
        reader = native.RangeReader(
            [(k, _as_string(v)) for k, v in config.items()],
            p.topic,
            p.partition,
            p.start,
            p.end,
            p.include_headers,
            p.max_records_per_batch,
            p.poll_timeout_ms,
            p.native_engine,
            -1 if p.start_epoch is None else p.start_epoch,
            -1 if p.end_epoch is None else p.end_epoch,
        )
    except native.ConfigError as exc:
        _fallback(p, f"it cannot use the client configuration: {exc}")
        return None
    if reader.fallback_reason:
        message = "native fetcher not used (%s); reading with librdkafka"
        _log_once(logging.INFO, message, reader.fallback_reason)
    return reader


def drain(reader, p: KafkaInputPartition) -> Iterator:
    """The range's record batches, with Spark's exact Arrow schema."""
    return gc_paused(_batches(reader, p))


def _batches(reader, p: KafkaInputPartition) -> Iterator:
    import pyarrow as pa
    from confluent_kafka import KafkaError, KafkaException

    native = module()
    if native is None:  # drain() is only called once a reader of the module exists
        raise RuntimeError("the native read path is not available")
    schema = arrow_schema(p.include_headers)
    checked = False
    try:
        while True:
            try:
                exported = reader.next_batch()
            except native.OffsetsLost as exc:
                position, low = exc.args
                offsets_lost(p, position, low)  # raises unless failOnDataLoss=false
                reader.skip_to(low)
                continue
            except native.LogTruncated as exc:
                position, divergence = exc.args
                log_truncated(p, position, divergence)  # raises unless failOnDataLoss=false
                reader.skip_to(divergence)
                continue
            except native.UnsupportedBroker as exc:  # nativeEngine=fetch: auto falls back
                error = KafkaError(KafkaError._UNSUPPORTED_FEATURE, str(exc))
                raise KafkaException(error) from None
            except native.NoProgress as exc:
                if ended_with_its_epoch(p, exc.args[0]):
                    return  # the plan's leader's log ends there
                raise no_progress(p, exc.args[0]) from None
            except native.TopicDeleted as exc:
                raise topic_deleted(p, exc.args[0]) from None
            except native.KafkaError as exc:
                code, reason = exc.args
                raise KafkaException(KafkaError(code, reason)) from None
            if reader.fallback_reason:  # auto: a broker the fetcher cannot speak to
                message = "native fetcher not used (%s); reading with librdkafka"
                _log_once(logging.INFO, message, reader.fallback_reason)
            if exported is None:
                if reader.cut is not None:
                    read_cut(p, *reader.cut)
                return
            batch = pa.RecordBatch._import_from_c(exported.array_address, exported.schema_address)
            if not checked:  # the native schema is fixed: checking the first batch suffices
                if not batch.schema.equals(schema):
                    raise TypeError(f"native batch schema {batch.schema} is not Spark's {schema}")
                checked = True
            yield batch
    finally:
        reader.close()
