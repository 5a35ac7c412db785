"""The tables of docs/benchmarks.md's latency section, printed from bench/results/latency.json
(`python bench/latency_table.py`), so the page's figures are the results' own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "latency.json"
DASH, TIMES = "\N{EN DASH}", "\N{MULTIPLICATION SIGN}"
NAMES = {"native": "ours, native", "python": "ours, Python", "builtin": "Spark's source"}


def _cell(cell: dict | None) -> str:
    if not cell or "p99_ms" not in cell:
        return DASH
    text = f"{cell['p50_ms']:g} / {cell['p99_ms']:g} / {cell['max_ms']:g}"
    return text + ("" if cell.get("caught_up", True) else " (behind)")


def _times(value: float | None) -> str:
    return DASH if value is None else f"{value}{TIMES}"


def tables(latency: dict) -> str:
    cells = {
        (q["source"], q["sink"], q["trigger"], c["rate"]): c
        for q in latency["queries"]
        for c in q["cells"]
    }
    ratios = {(r["source"], r["sink"], r["trigger"], r["rate"]): r for r in latency["ratios"]}
    out = []
    for sink in latency["plan"]["sinks"]:
        out += [
            f"\n{'Text file sink' if sink == 'file' else 'Kafka sink'}: p50 / p99 / max in ms; "
            "p99 ratios ours / Spark's; batches per second with input\n",
            "| trigger | rate (reached) | ours, native | ours, Python | Spark's source "
            "| p99 native / Spark | p99 Python / Spark | batches/s native, Python, Spark |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for trigger_ms in latency["plan"]["triggers_ms"]:
            trigger = f"{trigger_ms} ms"
            for rate in latency["plan"]["rates"]:
                row = [cells.get((s, sink, trigger, rate)) for s in NAMES]
                reached = min((c["reached_per_s"] for c in row if c), default=0)
                batches = ", ".join(
                    f"{c['batches_per_s']:g}" if c and c.get("batches_per_s") is not None else DASH
                    for c in row
                )
                native = ratios.get(("native", sink, trigger, rate), {})
                python = ratios.get(("python", sink, trigger, rate), {})
                out.append(
                    f"| {trigger} | {rate:,} ({reached:,}) | {' | '.join(map(_cell, row))} "
                    f"| {_times(native.get('p99_over_builtin'))} "
                    f"| {_times(python.get('p99_over_builtin'))} | {batches} |"
                )
    realtime = [q for q in latency["queries"] if q["source"] == "realtime"]
    if realtime:
        out += [
            "\nSpark's real-time mode (its built-in source, Kafka sink), beside ours at "
            "trigger 0\n",
            "| rate (reached) | real-time mode | ours, native, trigger 0 | p99 ours / real-time |",
            "|---|---|---|---|",
        ]
        for cell in realtime[0]["cells"]:
            ours = cells.get(("native", "kafka", "0 ms", cell["rate"]))
            r = ratios.get(("native", "kafka", "0 ms", cell["rate"]), {})
            out.append(
                f"| {cell['rate']:,} ({cell['reached_per_s']:,}) | {_cell(cell)} | {_cell(ours)} "
                f"| {_times(r.get('p99_over_realtime'))} |"
            )
        if realtime[0]["error"]:
            out.append(f"\nreal-time mode: {realtime[0]['error']}")
    return "\n".join(out)


def profile_table(profile: dict) -> str:
    """bench/results/latency-profile.json as one table: a row per part of a batch (median ms),
    a column per query."""
    queries = profile["profiles"]
    rows: list[tuple[str, list[object]]] = [
        (
            "latency p50 / p99 (ms)",
            [f"{q['latency']['p50_ms']:g} / {q['latency']['p99_ms']:g}" for q in queries],
        ),
        ("batches per second", [q["batches_per_s"] for q in queries]),
        ("rows per batch", [q["rows_per_batch_median"] for q in queries]),
    ]
    for key in queries[0]["durationMs_median"]:
        rows.append((f"durationMs.{key}", [q["durationMs_median"][key] for q in queries]))
    for key in queries[0]["stages"]:
        rows.append((f"stage: {key}", [q["stages"][key] for q in queries]))
    ours = next(q["ours"] for q in queries if "ours" in q)
    for key in ours:
        rows.append((f"ours: {key}", [q.get("ours", {}).get(key, DASH) for q in queries]))
    head = "| per batch, median | " + " | ".join(q["query"] for q in queries) + " |"
    out = [head, "|---" * (len(queries) + 1) + "|"]
    out += [f"| {name} | " + " | ".join(str(v) for v in values) + " |" for name, values in rows]
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--profile":
        print(profile_table(json.loads((RESULTS.parent / "latency-profile.json").read_text())))
    else:
        print(tables(json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else RESULTS).read_text())))
