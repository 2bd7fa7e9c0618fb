"""Small charts drawn on the server as SVG geometry (like :mod:`.timeline`): the page needs
no script to show them, and they print and scale with the page.

- :func:`lines`: series over time (the last hour of deliveries, failures and dead letters;
  a subscription's lag), each a polyline on a shared scale;
- :func:`bars`: one horizontal bar per row (the subscriptions with the largest lag).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 640, 160, 44, 20, 8
COLORS = {
    "delivered": "#2e8b57",
    "failed": "#c0392b",
    "dead_lettered": "#d35400",
    "lag": "#2f6fb0",
}


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    points: str  # "x,y x,y ..." for an SVG polyline
    total: int


@dataclass(frozen=True)
class Lines:
    width: int
    height: int
    left: int
    plot_bottom: int
    peak: int  # the top of the scale
    series: tuple[Series, ...]
    ticks: tuple[tuple[int, str, str], ...]  # (x, label, text-anchor) along the time axis
    empty: bool


def _clock(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%H:%M")


def lines(rows: Sequence[Mapping[str, Any]], names: Sequence[str], *, ticks: int = 4) -> Lines:
    """``names`` of ``rows`` (oldest first, each with ``t`` in epoch seconds) as polylines;
    a missing or None value is drawn as 0."""
    values = {n: [int(r.get(n) or 0) for r in rows] for n in names}
    peak = max([1, *(v for vs in values.values() for v in vs)])
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    step = plot_w / max(1, len(rows) - 1)

    def point(i: int, v: int) -> str:
        return f"{LEFT + i * step:.1f},{TOP + plot_h - v * plot_h / peak:.1f}"

    series = tuple(
        Series(n, COLORS.get(n, "#555"), " ".join(point(i, v) for i, v in enumerate(vs)), sum(vs))
        for n, vs in values.items()
    )
    marks: list[tuple[int, str, str]] = []
    if rows:
        for k in range(ticks + 1):
            i = round(k * (len(rows) - 1) / ticks)
            anchor = "start" if k == 0 else ("end" if k == ticks else "middle")
            marks.append((round(LEFT + i * step), _clock(int(rows[i]["t"])), anchor))
    return Lines(
        WIDTH,
        HEIGHT,
        LEFT,
        TOP + plot_h,
        peak,
        series,
        tuple(marks),
        all(s.total == 0 for s in series),
    )


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    y: int
    width: int
    href: str


@dataclass(frozen=True)
class Bars:
    width: int
    height: int
    label_w: int
    bars: tuple[Bar, ...]


def bars(rows: Sequence[tuple[str, int, str]], *, row_h: int = 22, label_w: int = 220) -> Bars:
    """One bar per ``(label, value, link)``, the longest the largest value."""
    peak = max([1, *(v for _, v, _ in rows)])
    span = WIDTH - label_w - 70
    drawn = tuple(
        Bar(label, value, 4 + i * row_h, max(2, round(value * span / peak)), href)
        for i, (label, value, href) in enumerate(rows)
    )
    return Bars(WIDTH, 8 + len(rows) * row_h, label_w, drawn)
