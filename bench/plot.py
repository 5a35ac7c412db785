"""The figures of docs/benchmarks.md, drawn from bench/results/*.json (`make plots`).

Plain SVG written here, no plotting library: the figures are text, so they are reviewed in a
diff, rebuilt byte for byte from the same results, and a unit test
(tests/unit/test_bench_plots.py) fails when a result changed and its figure was not redrawn.
Every number drawn comes from a results file; `headline()` gives the ones the README quotes,
formatted as the figures show them.

    python bench/plot.py            write docs/img/*.svg
    python bench/plot.py --check    exit 1 when a committed figure differs from its results
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from plot_latency import latency_figure  # noqa: E402
from svg import (  # noqa: E402
    BLUE,
    GREEN,
    INK,
    LABEL_W,
    ORANGE,
    PLOT_W,
    RIGHT_W,
    TARGET,
    WIDTH,
    Svg,
    axis,
    axis_end,
    header,
    legend,
    num,
)

RESULTS, FIGURES = REPO / "bench" / "results", REPO / "docs" / "img"

TIMES = "\N{MULTIPLICATION SIGN}"
# The source benchmark's queries, fastest first: (label, rates_per_s key, processing key).
SOURCE_QUERIES = (
    (
        "(d) ours, native read path, fetch engine",
        "d_kafka_checkpointed_native_fetch_local2",
        "native",
    ),
    (
        "(e) ours, native read path, librdkafka",
        "e_kafka_checkpointed_native_librdkafka_local2",
        "librdkafka",
    ),
    ("(c) raw confluent consume() loop, 2 processes", "c_raw_confluent_consume_2proc", "raw"),
    ("(a) ours, pure-Python read path", "a_kafka_checkpointed_python_local2", "python"),
    ("(b) Spark's built-in Kafka source", "b_spark_builtin_kafka_local2", "builtin"),
)
# The decode benchmark's queries: (label, rates_per_s key, processing key).
DECODE_QUERIES = (
    ("(b) ours, raw values: the read alone", "b_ours_raw_native_fetch_local2", "raw"),
    ("(c) Spark's kafka source + from_avro", "c_spark_kafka_from_avro_local2", "spark"),
    ("(a) ours, valueFormat=avro (Rust decoder)", "a_ours_avro_native_fetch_local2", "ours"),
)
# The table sink benchmark's sinks, as drawn (those a run left out are not): (label, key).
TABLE_SINKS = (
    ("Parquet file sink, local disk", "parquet"),
    ("Delta sink, local disk", "delta"),
    ("Delta sink before (main's code), local disk", "delta_before"),
    ("Parquet file sink, MinIO (s3a://)", "parquet_s3a"),
    ("Delta sink, MinIO (s3a://)", "delta_s3a"),
)
# The kind scenarios of bench/results/e2e.json, in the README's order.
E2E_SCENARIOS = (
    ("driver killed → restored batch", "driver_killed_to_first_restored_batch_committed"),
    ("standby: driver killed → restored batch", "standby_failover_seconds"),
    (
        "leader deleted → other replica acts",
        "leader_pod_deleted_to_first_reconcile_by_the_other_replica",
    ),
    ("kubectl drain → restored batch", "node_drained_to_first_restored_batch_committed"),
    ("kubectl scale 2 → 3 → first batch", "scale_to_first_batch_seconds"),
    (
        "node lost (grace 40 s) → restored batch",
        "node_lost_to_first_restored_batch_committed_default_grace",
    ),
    (
        "standby: node lost (20 s) → restored batch",
        "node_lost_to_first_restored_batch_committed_grace_20s_standby",
    ),
)


def seconds(value: float) -> str:
    if isinstance(value, int):  # a target, as the results file gives it
        return f"{value} s"
    return f"{num(value, 1 if value >= 10 else 2)} s"


def megabytes(value: float) -> str:
    return f"{num(value, 0)} MB"


def millions(value: float) -> str:
    return f"{num(value / 1e6, 2)} M"


def thousands(value: float) -> str:
    return f"{num(value / 1e3, 1)} K"


def load(results: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(results.glob("*.json"))}


@dataclass(frozen=True)
class Bars:
    """Horizontal bars: one group a row label, one bar per series in each group."""

    title: str
    subtitle: str
    series: tuple[tuple[str, str], ...]  # (name, colour)
    groups: tuple[tuple[str, tuple[float, ...]], ...]  # (label, one value per series)
    step: float  # between grid lines; the axis ends at the first one past every value
    fmt: Callable[[float], str]
    tick_fmt: Callable[[float], str]


def bar_chart(bars: Bars) -> str:
    bar_h, gap = 16, 14
    rows_h = len(bars.groups) * (len(bars.series) * bar_h + gap)
    svg = Svg(height=66 + rows_h + 60)
    y = header(svg, bars.title, bars.subtitle)
    x_max = axis_end([v for _, values in bars.groups for v in values], bars.step)
    axis(svg, y - 4, y + rows_h - gap + 4, x_max, bars.step, bars.tick_fmt)
    for label, values in bars.groups:
        svg.text(LABEL_W - 8, y + bar_h * len(values) / 2 + 4, label, 12, text_anchor="end")
        for (_, colour), value in zip(bars.series, values, strict=True):
            w = PLOT_W * value / x_max
            svg.rect(LABEL_W, y, w, bar_h - 3, colour)
            svg.text(LABEL_W + w + 5, y + bar_h - 5, bars.fmt(value), 11)
            y += bar_h
        y += gap
    legend(svg, y + 34, bars.series)
    return svg.render()


def source_figure(source: dict) -> str:
    groups = tuple(
        (label, (source["rates_per_s"][wall], source["processing_rates_per_s"][processing]))
        for label, wall, processing in SOURCE_QUERIES
    )
    subtitle = (
        f"{num(source['records'] / 1e6, 0)} M records {TIMES} {source['valueBytes']} B, "
        f"{source['partitions']} partitions, local[2] on {source['cores']} cores; "
        f"best of {len(source['runs_s']['native'])} alternating runs"
    )
    return bar_chart(
        Bars(
            "Source throughput: rows per second (millions)",
            subtitle,
            (("wall: the query's start and stop included", BLUE), ("processing", GREEN)),
            groups,
            step=0.5e6,
            fmt=millions,
            tick_fmt=lambda v: num(v / 1e6, 1),
        )
    )


def decode_figure(decode: dict) -> str:
    groups = tuple(
        (
            label,
            (
                decode["rates_per_s"][wall],
                decode["processing_rates_per_s"][key],
                decode["records_per_cpu_s"][key],
            ),
        )
        for label, wall, key in DECODE_QUERIES
    )
    alone = decode["rates_per_s"]["d_decoder_alone_one_core"]
    rust = decode["rates_per_s"]["e_native_decoder_alone_one_core"]
    subtitle = (
        f"{num(decode['records'] / 1e6, 1)} M Avro records, local[2]; best of "
        f"{len(decode['runs_s']['ours'])} runs; decoders alone, per CPU second: "
        f"Rust {millions(rust)}, Python (fastavro) {millions(alone)}"
    )
    return bar_chart(
        Bars(
            "Avro decoding: rows per second (millions)",
            subtitle,
            (
                ("wall", BLUE),
                ("processing", GREEN),
                ("per CPU second of JVM + Python", ORANGE),
            ),
            groups,
            step=0.25e6,
            fmt=millions,
            tick_fmt=lambda v: num(v / 1e6, 2),
        )
    )


def table_sink_figure(tables: dict) -> str:
    spread = tables["rates_per_s_spread"]
    groups = tuple(
        (label, (spread[key]["median"], spread[key]["min"]))
        for label, key in TABLE_SINKS
        if key in spread
    )
    ratio = tables["ratios"]["delta_over_parquet"]
    subtitle = (
        f"{num(tables['records'] / 1e3, 0)} K JSON records {TIMES} {tables['valueBytes']} B, "
        f"batches of {num(tables['maxOffsetsPerTrigger'] / 1e3, 0)} K, the runner on local[2]; "
        f"Delta / Parquet {num(ratio['median'], 2)}{TIMES} ({num(ratio['min'], 2)}"
        f"\N{EN DASH}{num(ratio['max'], 2)})"
    )
    rounds = len(tables["runs"]["parquet"])
    return bar_chart(
        Bars(
            "Table sinks: records per second in the batches (thousands)",
            subtitle,
            ((f"median of {rounds} interleaved rounds", BLUE), ("slowest round", ORANGE)),
            groups,
            step=10e3,
            fmt=thousands,
            tick_fmt=lambda v: num(v / 1e3, 0),
        )
    )


def offsets_figure(now: dict, before: dict) -> str:
    lag_now, lag_before = now["commitLag_s"], before["commitLag_s"]
    return bar_chart(
        Bars(
            "A durable batch's offsets reach the consumer group",
            f"{now['ratePerS']} records/s, trigger {now['trigger']}; bench/offsets_bench.py",
            (("before (the earlier runner, same bench)", ORANGE), ("now", GREEN)),
            (
                ("commits/N entry → group, p50", (lag_before["p50"], lag_now["p50"])),
                ("commits/N entry → group, p99", (lag_before["p99"], lag_now["p99"])),
            ),
            step=0.5,
            fmt=seconds,
            tick_fmt=lambda v: f"{num(v, 1)} s",
        )
    )


def recovery_figure(e2e: dict) -> str:
    rows_h = len(E2E_SCENARIOS) * 34
    svg = Svg(height=66 + rows_h + 60)
    y = header(
        svg,
        "On kind: from the fault to the job's next committed batch",
        "each run's samples (dots), their median (bar) and the target for the median (dashed)",
    )
    x_max = axis_end(
        [e2e[key]["target_p50_seconds"] for _, key in E2E_SCENARIOS]
        + [sample["seconds"] for _, key in E2E_SCENARIOS for sample in e2e[key]["samples"]],
        10,
    )
    axis(svg, y - 4, y + rows_h, x_max, 10, lambda v: f"{num(v, 0)} s")

    def at(value: float) -> float:
        return LABEL_W + PLOT_W * value / x_max

    for label, key in E2E_SCENARIOS:
        scenario = e2e[key]
        mid = y + 15
        svg.text(LABEL_W - 8, mid + 4, label, 12, text_anchor="end")
        target = at(scenario["target_p50_seconds"])
        svg.line(target, y + 3, target, y + 27, TARGET, dash=True)
        for sample in scenario["samples"]:
            svg.dot(at(sample["seconds"]), mid, BLUE)
        svg.rect(at(scenario["p50_seconds"]) - 1.5, y + 5, 3, 20, INK)
        svg.text(WIDTH - RIGHT_W + 8, mid + 4, f"p50 {seconds(scenario['p50_seconds'])}", 11)
        y += 34
    legend(svg, y + 34, (("a sample", BLUE), ("the median", INK)), dashed="target")
    return svg.render()


def operator_figure(operator: dict) -> str:
    targets = operator["targets"]
    rows = (
        (
            f"{operator['jobs']} jobs created → all drivers",
            "all_drivers_seconds",
            "all_drivers_seconds",
            seconds,
        ),
        (
            "a driver failed → relaunched, p99",
            "relaunch_p99_seconds",
            "relaunch_p99_seconds",
            seconds,
        ),
        ("the operator's memory (RSS)", "operator_peak_rss_mb", "rss_mb", megabytes),
    )
    return bar_chart(
        Bars(
            f"Operator with {operator['jobs']} jobs: each figure as a share of its budget",
            "bench/operator_bench.py: the operator (kopf run) against a real kube-apiserver + etcd",
            (("measured / target (lower is better; 100 % = the target)", BLUE),),
            tuple(
                (
                    f"{label}: {fmt(operator[k])} of {fmt(targets[t])}",
                    (100 * operator[k] / targets[t],),
                )
                for label, k, t, fmt in rows
            ),
            step=25.0,
            fmt=lambda v: f"{num(v, 0)} %",
            tick_fmt=lambda v: f"{num(v, 0)} %",
        )
    )


def figures(results: dict[str, dict]) -> dict[str, str]:
    """File name under docs/img/ → its SVG."""
    drawn = {
        "source-throughput.svg": source_figure(results["source"]),
        "decode-throughput.svg": decode_figure(results["decode"]),
        "recovery-on-kind.svg": recovery_figure(results["e2e"]),
        "operator-1000-jobs.svg": operator_figure(results["operator"]),
        "group-offsets.svg": offsets_figure(results["offsets"], results["offsets-before"]),
        "table-sinks.svg": table_sink_figure(results["table-sink"]),
    }
    if "latency" in results:
        drawn["latency.svg"] = latency_figure(results["latency"])
    return drawn


def headline(results: dict[str, dict]) -> dict[str, str]:
    """The figures the README's summary quotes, formatted as the plots show them."""
    source, operator, e2e = results["source"], results["operator"], results["e2e"]
    delta_over_parquet = results["table-sink"]["ratios"]["delta_over_parquet"]
    return {
        "source d/b processing": f"{num(source['processing_ratios']['d_over_b'], 2)}{TIMES}",
        "source d/b wall": f"{num(source['ratios']['d_over_b'], 2)}{TIMES}",
        "source d/c processing": f"{num(source['processing_ratios']['d_over_c'], 2)}{TIMES}",
        "operator all drivers": seconds(operator["all_drivers_seconds"]),
        "offsets p99": seconds(results["offsets"]["commitLag_s"]["p99"]),
        **{label: seconds(e2e[key]["p50_seconds"]) for label, key in E2E_SCENARIOS[:5]},
        "delta / parquet": f"{num(delta_over_parquet['median'], 2)}{TIMES}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for name, svg in figures(load(RESULTS)).items():
        path = FIGURES / name
        if args.check:
            if not path.exists() or path.read_text() != svg:
                stale.append(name)
        else:
            FIGURES.mkdir(parents=True, exist_ok=True)
            path.write_text(svg)
            print(f"wrote {path}")
    if stale:
        print(f"out of date with {RESULTS}: {', '.join(stale)}; run `make plots`")
        return 1
    if args.check:
        print(f"{FIGURES}: up to date with {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
