"""The exactly-once Kafka sink's settings, the rules they must keep and its writers' names
(pure; the spec's models call the rules, the operator refuses a spec that breaks them,
naming the field).

Why these bounds: each task of a batch holds one transaction open while it reads its
source range and writes the output (`spark_app.sinks.kafka_eos_sink`). The broker aborts a
transaction older than its `transaction.timeout.ms`, so a writer that died holds
`read_committed` readers back at most that long; a live one whose task runs longer fails
its commit (the batch fails, naming the setting). Kafka refuses a timeout above the
broker's `transaction.max.timeout.ms` (15 minutes unless changed), and a task waits out a
partition leader change for up to the source's poll timeout (2 minutes) inside it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskRange:
    """The source range whose output one sink task writes (spark_app/sinks/task_ranges.py)."""

    topic: str
    partition: int
    start: int
    end: int  # exclusive: the progress a committed output reaches


# The exactly-once sink's counts per run (spark_app/sinks/sink_tally.py), as the runner reports
# them and the operator reads them (status.sinkTransactions): committed transactions, replayed
# ranges skipped as committed already, records written, batches Spark aborted
SINK_TALLY_KEYS = ("transactions", "replaysSkipped", "records", "batchesAborted")


@dataclass(frozen=True)
class Progress:
    """A progress group's committed offset for one key partition; -1: none committed
    (spark_app/kafka/transactions.py)."""

    offset: int
    metadata: str = ""


# The key of a writer's progress in its progress group: partition 0 of the sink topic, which
# exists on the sink's cluster (the source's topic may not) and whatever the topic's partition
# count. Only a key: the group is the writer's own, and its records go to any partition.
PROGRESS_PARTITION = 0

GUARANTEES = ("exactly-once", "at-least-once")
DEFAULT_GUARANTEE = "exactly-once"
DEFAULT_TRANSACTION_TIMEOUT_MS = 180_000
MIN_TRANSACTION_TIMEOUT_MS = 130_000  # the source's 120 s leader wait plus a margin
MAX_TRANSACTION_TIMEOUT_MS = 900_000  # the broker's transaction.max.timeout.ms default
TIMEOUT_FIELD = "spec.job.sink.transactionTimeoutMs"
KAFKA_ONLY = "deliveryGuarantee, transactionTimeoutMs and value are settings of the kafka sink"
AT_LEAST_ONCE_NO_TIMEOUT = (
    "transactionTimeoutMs is for deliveryGuarantee exactly-once (at-least-once writes "
    "without transactions): remove it"
)

_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000}


def interval_ms(processing_time: str) -> int:
    """A processingTime trigger ("5 seconds", "500 milliseconds") in milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s+([a-z]+?)s?\s*", processing_time.lower())
    if match is None or match.group(2) not in _UNIT_MS:
        raise ValueError(f"processingTime {processing_time!r} is not <number> <unit>")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def transaction_problem(
    sink_format: str,
    guarantee: str | None,
    timeout_ms: int | None,
    processing_time: str | None,
) -> str | None:
    """What is wrong with the sink's guarantee and transaction timeout for this trigger;
    None: they can work."""
    if sink_format != "kafka":
        return KAFKA_ONLY if (guarantee or timeout_ms is not None) else None
    if (guarantee or DEFAULT_GUARANTEE) != "exactly-once":
        return AT_LEAST_ONCE_NO_TIMEOUT if timeout_ms is not None else None
    timeout = DEFAULT_TRANSACTION_TIMEOUT_MS if timeout_ms is None else timeout_ms
    if not MIN_TRANSACTION_TIMEOUT_MS <= timeout <= MAX_TRANSACTION_TIMEOUT_MS:
        return (
            f"{TIMEOUT_FIELD} {timeout} is out of [{MIN_TRANSACTION_TIMEOUT_MS}, "
            f"{MAX_TRANSACTION_TIMEOUT_MS}]: a task waits up to 120 s for a partition leader "
            "inside its transaction, and brokers refuse more than transaction.max.timeout.ms "
            "(15 min by default)"
        )
    if processing_time and interval_ms(processing_time) >= timeout:
        return (
            f"spec.job.trigger.processingTime {processing_time!r} is not shorter than "
            f"{TIMEOUT_FIELD} ({timeout} ms): a batch gathers an interval's records and "
            "each task writes them in one transaction, which the broker aborts at the "
            "timeout; shorten the interval or raise transactionTimeoutMs"
        )
    return None


def checkpoint_id(location: str) -> str:
    """A checkpoint location, short (offset metadata is bounded) and stable."""
    return hashlib.sha256(location.rstrip("/").encode()).hexdigest()[:24]


def transactional_prefix(job: str, location: str) -> str:
    """The job's writers' name: its checkpoints' root (the location without `/epoch-<n>`,
    which holds the namespace, name and uid), the same for every epoch of the job."""
    root = location.rstrip("/").rsplit("/epoch-", 1)[0]
    return f"streamingjob.{job}.{hashlib.sha256(root.encode()).hexdigest()[:12]}"


def transactional_id(prefix: str, topic: str, partition: int) -> str:
    return f"{prefix}.sink.{topic}.{partition}"


# Logical plan nodes after which a task's output no longer comes from one source range
# (Spark moves rows between partitions, or into one: a shuffle, a global limit), or after
# which two tasks write the output of one range (a union of the source with itself: they
# would share its writer, and the second one's output would be skipped as committed).
_MIXING = (
    "Aggregate",
    "AggregateInPandas",
    "CoGroup",
    "Deduplicate",
    "DeduplicateWithinWatermark",
    "Distinct",
    "Except",
    "FlatMapCoGroupsInPandas",
    "FlatMapGroupsInPandas",
    "FlatMapGroupsInPandasWithState",
    "FlatMapGroupsWithState",
    "GlobalLimit",
    "Intersect",
    "Join",
    "MapGroups",
    "RebalancePartitions",
    "Repartition",
    "RepartitionByExpression",
    "Sort",
    "Tail",
    "TransformWithState",
    "TransformWithStateInPandas",
    "Union",
    "Window",
    "WindowInPandas",
)


def mixing_step(plan: str) -> str | None:
    """The first step of an analyzed logical plan (Spark's tree text) that mixes source
    partitions in a task's output; None: every task writes one source range's output."""
    for line in plan.splitlines():
        # tree drawing, then Spark's marks: ~ a streaming node, ' an unresolved one
        node = re.sub(r"^[\s:+\-|!~']*", "", line).split(" ", 1)[0].split("(", 1)[0]
        if node in _MIXING:
            return node
    return None


def mixing_problem(plan: str) -> str | None:
    step = mixing_step(plan)
    if step is None:
        return None
    return (
        f"spec.job.sink.deliveryGuarantee: exactly-once writes the output of each source "
        f"partition's range in its own Kafka transaction, but the query's {step} mixes "
        "partitions or reads a range twice: remove it from spec.job.sql or the transform, or "
        "set deliveryGuarantee: at-least-once"
    )


def already_committed(done: Progress, checkpoint: str, task_range: TaskRange) -> bool:
    """A replay of a range whose output this checkpoint's query committed: skip it. Another
    checkpoint's progress never skips (a new epoch starts where the catch-up put the group;
    a rewind by the user is output again, as asked)."""
    return done.metadata == checkpoint and done.offset >= task_range.end


HEADERS_TYPE = "array<struct<key:string,value:binary>>"  # the source's (includeHeaders)


def headers_problem(spark_type: str) -> str | None:
    """A `headers` column the exactly-once sink writes as the records' headers: the type the
    source reads them as, or the query must rename or drop it."""
    if spark_type == HEADERS_TYPE:
        return None
    return (
        f"spec.job.sink: the kafka sink writes a column headers as the records' headers, of "
        f"type {HEADERS_TYPE} (the source's with includeHeaders); the query gives "
        f"{spark_type}: cast, rename or drop it in spec.job.sql or the transform"
    )
