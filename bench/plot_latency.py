"""The latency figure of docs/benchmarks.md (bench/results/latency.json), drawn with
bench/svg.py's primitives: p99 latency against the input rate, one panel per sink and
trigger, one line per query, a log scale (the figures span milliseconds to a backlog's tens
of seconds)."""

from __future__ import annotations

import itertools
import math

from svg import BLUE, GREEN, GRID, INK, MUTED, ORANGE, WIDTH, Svg, header, num

# (query, label, colour, dashed)
LINES = (
    ("native", "ours, native read path", BLUE, False),
    ("python", "ours, pure Python", GREEN, False),
    ("builtin", "Spark's source, micro-batch", ORANGE, False),
    ("realtime", "Spark's source, real-time mode", INK, True),
)
LEFT, GAP, PANEL_H, ROW_GAP = 70, 24, 150, 58


def ms_label(value: float) -> str:
    return f"{num(value, 0)} ms" if value < 1000 else f"{num(value / 1000, 0)} s"


def _cells(latency: dict) -> dict[tuple[str, str, str], dict[int, float]]:
    """(source, sink, trigger) → {rate: p99 ms}; real-time mode is drawn in every trigger."""
    out: dict[tuple[str, str, str], dict[int, float]] = {}
    for query in latency["queries"]:
        points = {c["rate"]: c["p99_ms"] for c in query["cells"] if "p99_ms" in c}
        out[(query["source"], query["sink"], query["trigger"])] = points
    return out


def latency_figure(latency: dict) -> str:
    cells = _cells(latency)
    loads = [c["loadavg_1m"] for q in latency["queries"] for c in q["cells"]]
    plan = latency["plan"]
    rates, sinks = plan["rates"], plan["sinks"]
    triggers = [f"{t} ms" for t in plan["triggers_ms"]]
    values = [v for points in cells.values() for v in points.values() if v > 0]
    low = 10 ** math.floor(math.log10(min(values)))
    high = 10 ** math.ceil(math.log10(max(values)))
    decades = max(1, round(math.log10(high / low)))
    panel_w = (WIDTH - LEFT - 20 - GAP * (len(triggers) - 1)) / len(triggers)
    svg = Svg(height=66 + len(sinks) * (PANEL_H + ROW_GAP) + 40)
    y0 = header(
        svg,
        "End-to-end latency, p99: producer → visible to a reader of the sink",
        f"rates {', '.join(num(r / 1e3, 0) + ' K' for r in rates)} records/s; "
        f"local[{plan['partitions']}], {plan['partitions']} partitions, "
        f"{num(plan['measure_s'], 0)} s per cell; load average {num(min(loads), 0)}"
        f"\N{EN DASH}{num(max(loads), 0)} on 2 cores (other jobs ran too)",
    )

    def y_at(top: float, value: float) -> float:
        return top + PANEL_H * (1 - math.log10(max(value, low) / low) / decades)

    for row, sink in enumerate(sinks):
        top = y0 + 14 + row * (PANEL_H + ROW_GAP)
        name = "text file sink" if sink == "file" else "Kafka sink"
        for col, trigger in enumerate(triggers):
            left = LEFT + col * (panel_w + GAP)
            shown = ms_label(float(trigger.split()[0])) if trigger != "0 ms" else "0"
            svg.text(left, top - 6, f"{name}, trigger {shown}", 12, font_weight="600")
            for d in range(decades + 1):
                tick = low * 10**d
                y = y_at(top, tick)
                svg.line(left, y, left + panel_w, y, GRID)
                if col == 0:
                    svg.text(left - 6, y + 4, ms_label(tick), 11, fill=MUTED, text_anchor="end")
            xs = [left + panel_w * (i + 0.5) / len(rates) for i in range(len(rates))]
            for x, rate in zip(xs, rates, strict=True):
                label = f"{num(rate / 1e3, 0)} K/s"
                svg.text(x, top + PANEL_H + 15, label, 11, fill=MUTED, text_anchor="middle")
            for source, _, colour, dashed in LINES:
                key = (source, sink, "real-time" if source == "realtime" else trigger)
                points = [
                    (x, cells[key][r])
                    for x, r in zip(xs, rates, strict=True)
                    if r in cells.get(key, {})
                ]
                for (xa, va), (xb, vb) in itertools.pairwise(points):
                    svg.line(xa, y_at(top, va), xb, y_at(top, vb), colour, dash=dashed)
                for x, value in points:
                    svg.dot(x, y_at(top, value), colour)
    legend_y = y0 + 14 + len(sinks) * (PANEL_H + ROW_GAP) + 4
    x = float(LEFT)
    for _, label, colour, dashed in LINES:
        svg.line(x, legend_y - 4, x + 16, legend_y - 4, colour, dash=dashed)
        svg.text(x + 21, legend_y, label, 11)
        x += 34 + 5.9 * len(label)
    return svg.render()
