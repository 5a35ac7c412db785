"""The SVG primitives bench/plot.py and bench/plot_latency.py draw with: a palette, the page's
columns, an element-by-element drawing with stable coordinates, and a figure's header, legend
and axis."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from xml.sax.saxutils import escape

INK, MUTED, GRID, TARGET = "#24292f", "#57606a", "#d0d7de", "#cf222e"
BLUE, GREEN, ORANGE = "#0969da", "#1a7f37", "#bc4c00"
FONT = "font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif"
LABEL_W, PLOT_W, RIGHT_W = 300, 380, 120  # the label column, the plot, the value labels
WIDTH = LABEL_W + PLOT_W + RIGHT_W


def num(value: float, places: int) -> str:
    """`value` rounded half up as a person would (1.145 → 1.15; float's own rounding: 1.14)."""
    return str(Decimal(repr(value)).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP))


@dataclass
class Svg:
    """An SVG drawing built element by element; coordinates rounded so output is stable."""

    height: float
    parts: list[str] = field(default_factory=list)

    def text(self, x: float, y: float, s: str, size: int = 12, **attrs: str) -> None:
        fill = attrs.pop("fill", INK)
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"{extra}>'
            f"{escape(s)}</text>"
        )

    def rect(self, x: float, y: float, w: float, h: float, fill: str) -> None:
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"/>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, dash: bool = False):
        style = ' stroke-dasharray="4 3"' if dash else ""
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="1.5"{style}/>'
        )

    def dot(self, x: float, y: float, fill: str) -> None:
        self.parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{fill}"/>')

    def render(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{self.height:.0f}" '
            f'viewBox="0 0 {WIDTH} {self.height:.0f}" style="{FONT}">'
        )
        background = f'<rect width="{WIDTH}" height="{self.height:.0f}" fill="#ffffff"/>'
        return "\n".join([head, background, *self.parts, "</svg>"]) + "\n"


def axis_end(values: Sequence[float], step: float) -> float:
    """The first grid line at or past every value (at least one step)."""
    return step * max(1, math.ceil(max(values) / step - 1e-9))


def header(svg: Svg, title: str, subtitle: str) -> float:
    svg.text(12, 24, title, 16, font_weight="600")
    svg.text(12, 44, subtitle, 12, fill=MUTED)
    return 66.0


def legend(svg: Svg, y: float, entries: Sequence[tuple[str, str]], dashed: str = "") -> None:
    x = float(LABEL_W)
    for name, colour in entries:
        svg.rect(x, y - 9, 12, 10, colour)
        svg.text(x + 17, y, name, 12)
        x += 36 + 6.2 * len(name)  # about the width of 12 px text
    if dashed:
        svg.line(x, y - 4, x + 14, y - 4, TARGET, dash=True)
        svg.text(x + 19, y, dashed, 12)


def axis(
    svg: Svg, top: float, bottom: float, x_max: float, step: float, fmt: Callable[[float], str]
) -> None:
    tick = 0.0
    while tick <= x_max + 1e-9:
        x = LABEL_W + PLOT_W * tick / x_max
        svg.line(x, top, x, bottom, GRID)
        svg.text(x, bottom + 15, fmt(tick), 11, fill=MUTED, text_anchor="middle")
        tick += step
