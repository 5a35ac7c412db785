"""The autoscaler's values: a reading of a running job (Sample), the policy from spec.autoscaler,
the job as it runs, the rates measured over a window, and the recommendation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# Utilization may deviate this much from the target before anything changes.
DEAD_BAND = 0.2


Action = Literal["none", "hold", "up", "down"]


@dataclass(frozen=True)
class Sample:
    """One reading: the lag reader's log ends and lag, and the runner's counters."""

    time: float  # seconds (any origin, the same as `now`)
    log_end: int | None  # sum of the log-end offsets of the job's partitions
    lag: int | None  # sum of log end - committed
    batches: int | None  # batches the run completed (cumulative)
    rows: int | None  # their input rows
    busy_seconds: float | None  # their summed durations (triggerExecution)
    execution_seconds: float | None  # the executors' part of them (addBatch)
    task_seconds: float | None = None  # every executor's time in tasks (None: not reported)

    def complete(self) -> bool:
        values = (self.log_end, self.lag, self.batches, self.rows, self.busy_seconds)
        return None not in (*values, self.execution_seconds)


@dataclass(frozen=True)
class Policy:
    """spec.autoscaler, as numbers."""

    min_executors: int = 1
    max_executors: int = 10
    target_utilization: float = 0.7
    catch_up_seconds: float = 300.0
    stabilization_seconds: float = 180.0
    scale_down_delay_seconds: float = 600.0
    metrics_window_seconds: float = 120.0
    dead_band: float = DEAD_BAND


@dataclass(frozen=True)
class Job:
    """What the model needs of the job besides its samples."""

    executors: int
    run_started: float  # the current run's launch (a rescale is a launch)
    now: float
    partitions: int = 0  # 0: unknown (no cap)
    cores: int = 1  # per executor: task slots
    rates: Mapping[int, float] = field(default_factory=dict)  # per executor, by count run


@dataclass(frozen=True)
class Rates:
    input_rate: float  # records/s
    processing_rate: float  # records per second, all current executors
    per_executor_rate: float
    busy_fraction: float  # batch seconds per second (against the trigger interval)
    lag: int
    load: float  # records/s to plan for: max(input, u x (input + lag / catch-up))
    utilization: float  # load over the current executors' processing rate


@dataclass(frozen=True)
class Recommendation:
    action: Action  # none: no decision; hold: decided to stay
    executors: int  # the count to run (the current one unless up/down)
    reason: str
    wanted: int | None = None  # what the load needs, before the anti-thrash rules
    rates: Rates | None = None
