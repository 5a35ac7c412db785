"""The job runner with its Delta sink profiled: where a batch's time goes in foreachBatch.

    python bench/delta_profile.py OUT.json --manifest job.yaml [runner arguments]

Runs `spark_app.runner.runner.main` in this process (the code on PYTHONPATH: this checkout's or
another's, for a before/after) with the function `spark_app.runner.query` hands to foreachBatch
wrapped: each call runs under cProfile in the callback thread that makes it, and at the end
OUT.json gets the seconds every step took, summed over the batches. Steps are found by
function name, so the same wrapper measures either version of spark_app/sinks/delta_sink.py.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

# label: (a file name's end, or "~" for a built-in; a function name, or its start for "~")
STEPS = {
    "toArrow: the batch run and collected to the driver": ("sql/classic/dataframe.py", "toArrow"),
    "committed_batch: the table's txn version (our log read)": (
        "spark_app/sinks/delta_sink.py",
        "committed_batch",
    ),
    "is_deltatable: a listing of _delta_log": ("deltalake/table.py", "is_deltatable"),
    "DeltaTable(...): a table opened, its log read": ("deltalake/table.py", "__init__"),
    "update_incremental: new log entries read": ("deltalake/table.py", "update_incremental"),
    "write_deltalake: Parquet files and the commit, in all": (
        "deltalake/writer/writer.py",
        "write_deltalake",
    ),
    "write_deltalake's own open of the table (a log read)": (
        "deltalake/writer/_utils.py",
        "try_get_table_and_table_uri",
    ),
    "RawDeltaTable.write: Parquet files and the commit": ("~", "<method 'write' of 'deltalake."),
}


def step_seconds(stats: pstats.Stats) -> dict[str, dict[str, float]]:
    """Cumulative seconds and calls of each step (0 when the code never calls it)."""
    found = {label: {"seconds": 0.0, "calls": 0} for label in STEPS}
    for (filename, _, function), (_, calls, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        for label, (file_end, name) in STEPS.items():
            builtin = file_end == "~" and filename == "~" and function.startswith(name)
            if builtin or (filename.endswith(file_end) and function == name):
                found[label]["seconds"] += cumulative
                found[label]["calls"] += calls
    return {k: {"seconds": round(v["seconds"], 3), "calls": v["calls"]} for k, v in found.items()}


def main(out: Path, runner_args: list[str]) -> int:
    import spark_app.runner.query as query
    from spark_app.runner.runner import main as runner_main

    profiler = cProfile.Profile()
    calls: list[float] = []
    original = query.batch_writer

    def profiled_writer(*args, **kwargs):
        write = original(*args, **kwargs)

        def write_batch(frame, batch_id: int) -> None:
            started = time.perf_counter()
            profiler.runcall(write, frame, batch_id)
            calls.append(time.perf_counter() - started)

        return write_batch

    query.batch_writer = profiled_writer
    code = runner_main(runner_args)
    result = {
        "batches": len(calls),
        "foreachBatch_s": round(sum(calls), 3),
        "steps": step_seconds(pstats.Stats(profiler)),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
