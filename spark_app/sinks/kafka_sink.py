"""The Kafka sink: writes `value` (and optional `key`) columns to a topic, at-least-once.

Executors produce with an idempotent producer (acks=all) and flush before the task reports
success, so a batch is committed only after Kafka acknowledged every record; a retried task or
a restored batch may write records again (the documented at-least-once of Kafka sinks).

A leader change costs a pause, not a failed batch: librdkafka retries each record (idempotence
keeps the order and nearly always writes it once: a leader change that bumps the producer's
epoch can write one twice, librdkafka's open issue #4953) until its delivery timeout,
`_DELIVERY_TIMEOUT_MS` (2 min, twice the driver's look-up deadline of `spark_app.kafka.retry`,
which says why that outlasts a broker restart), and the flush waits for the last record's
answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from spark_app.formats.value_encoder import ValueEncoder

_DELIVERY_TIMEOUT_MS = 120_000
# every record is answered (acknowledged or failed) within its delivery timeout
_FLUSH_MARGIN_S = 10.0


@dataclass
class ProducedRecords(WriterCommitMessage):
    count: int


class KafkaSinkError(RuntimeError):
    pass


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str]):
        self.topic = options.get("topic") or ""
        self.client = {k[6:]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        if not self.topic:
            raise KafkaSinkError("option topic is required for the kafka sink")
        if not self.client.get("bootstrap.servers"):
            raise KafkaSinkError("option kafka.bootstrap.servers is required for the kafka sink")
        self.encoder = ValueEncoder.of_options(options)  # None: the value as it is

    def write(self, iterator: Iterator) -> ProducedRecords:
        from confluent_kafka import Producer

        failures: list[str] = []

        def delivered(err, _msg) -> None:
            if err is not None:
                failures.append(str(err))

        producer = Producer(
            {
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": _DELIVERY_TIMEOUT_MS,
                "log_level": 3,
                **self.client,
            }
        )
        count = 0
        for batch in iterator:
            names = batch.schema.names
            if "value" not in names:
                raise KafkaSinkError(
                    f"the kafka sink needs a value column (binary or string); got {names}"
                )
            values = encoded(self.encoder, batch.column("value").to_pylist())
            keys = batch.column("key").to_pylist() if "key" in names else [None] * len(values)
            for key, value in zip(keys, values, strict=True):
                while True:
                    try:
                        producer.produce(self.topic, value=value, key=key, on_delivery=delivered)
                        break
                    except BufferError:  # local queue full: serve callbacks, then retry
                        producer.poll(0.1)
                count += 1
            producer.poll(0)
        set_ms = self.client.get("message.timeout.ms") or self.client.get("delivery.timeout.ms")
        delivery_s = int(set_ms or _DELIVERY_TIMEOUT_MS) / 1000
        remaining = producer.flush(delivery_s + _FLUSH_MARGIN_S)
        if remaining or failures:
            raise KafkaSinkError(
                f"{remaining} record(s) unacknowledged and {len(failures)} failed writing to "
                f"{self.topic}: {failures[:3]}"
            )
        return ProducedRecords(count)

    def commit(self, messages: list, batchId: int) -> None:
        pass  # every record was acknowledged before its task succeeded

    def abort(self, messages: list, batchId: int) -> None:
        pass


def encoded(encoder: ValueEncoder | None, values: list) -> list:
    """The value column's rows as the topic gets them: encoded with the sink's schema, or as
    they are (string or bytes)."""
    return values if encoder is None else [encoder.encode(v) for v in values]
