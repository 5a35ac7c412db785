"""Which source range a sink task writes the output of: told by the read in the same task.

In a query without a shuffle (a filter, a projection, a Python transform row by row), Spark
runs a batch's read of one source partition range and the sink's write of its output in one
task; the source's read (`source.source.KafkaStreamReader.read`) and the sink's write run in two
Python workers of that task. The exactly-once Kafka sink needs the range its task writes the
output of (`kafka_eos_sink`: its transaction commits the range's end as its progress), so the
read announces it in a small file named by the task's attempt id, beside the workers, and
the write claims it (and removes the file). The name holds the Spark job group too (the
query's run id): task attempt ids start again at 0 in a new driver, and two drivers on one
machine (local runs) share the directory.

No announcement for a write task means its output is not one source range's (a shuffle: an
aggregation, a join, a repartition): the exactly-once sink refuses it, naming the setting.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from spark_app.api.sink_rules import TaskRange

__all__ = ["NoTaskRange", "TaskRange", "announce", "claim", "the_one"]

_DIRECTORY = "streamingjob-task-ranges"
_JOB_GROUP = "spark.jobGroup.id"


class NoTaskRange(RuntimeError):
    pass


def _directory() -> Path:
    return Path(tempfile.gettempdir()) / _DIRECTORY


def _task() -> tuple[str, str]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise NoTaskRange("not in a Spark task")
    return str(context.taskAttemptId()), context.getLocalProperty(_JOB_GROUP) or ""


def announce(task_range: TaskRange) -> None:
    """Called by the read of `task_range`: what the write in this task covers."""
    attempt, group = _task()
    directory = _directory()
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{group}-{attempt}-{task_range.topic}-{task_range.partition}"
    staged = directory / f".{name}.{os.getpid()}"
    staged.write_text(json.dumps({"group": group, **asdict(task_range)}))
    staged.replace(directory / name)  # whole or absent for the claim


def claim() -> list[TaskRange]:
    """The ranges read in this task (removed: claimed once)."""
    attempt, group = _task()
    found = []
    for path in _directory().glob(f"{glob.escape(group)}-{attempt}-*"):
        try:
            announced = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError):
            continue  # claimed already (a speculative copy of the task)
        if announced.pop("group") == group:
            found.append(TaskRange(**announced))
    return found


def the_one(ranges: list[TaskRange]) -> TaskRange:
    """The single range a task's output comes from, else NoTaskRange saying why."""
    if len(ranges) == 1:
        return ranges[0]
    if not ranges:
        raise NoTaskRange(
            "this task's output does not come from one source partition's read (the query "
            "shuffles: an aggregation, a join, a repartition)"
        )
    names = ", ".join(f"{r.topic}[{r.partition}]" for r in ranges)
    raise NoTaskRange(f"this task's output comes from several source partitions: {names}")
