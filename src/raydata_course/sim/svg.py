"""Draw a simulated timeline as SVG: no matplotlib, so it draws in the browser playground too.

:func:`timeline_svg` stacks the object store's three parts (counted, pinned without a ref,
freed not deleted), draws Ray Data's believed usage and the budget as lines, and the batches
delivered on a second axis. The result is a standalone ``<svg>`` string: display it with
``IPython.display.SVG`` (or ``HTML``) in a notebook, or write it to a ``.svg`` file.

Examples:
    >>> from raydata_course.sim import IngestConfig, Operator, simulate
    >>> t = simulate(IngestConfig([Operator("decode", 0.2, 1 << 20)], budget_bytes=4 << 20, batches_per_consumer=5))
    >>> svg = timeline_svg(t, title="demo")
    >>> svg.startswith("<svg") and "budget" in svg and svg.count("<path") >= 3
    True
"""

from __future__ import annotations

import html
import math

from raydata_course.sim.timeline import Timeline

__all__ = ["COLORS", "timeline_svg"]

#: the colours of the store's parts and of the lines, shared with the lab's figures' meaning.
COLORS = {"counted": "#4c78a8", "hidden": "#e45756", "freed": "#bab0ac", "believed": "#222222",
          "budget": "#54a24b", "delivered": "#f58518"}
_MIB = 1 << 20


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / max(1, ticks)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def timeline_svg(timeline: Timeline, *, title: str = "", width_px: int = 760, height_px: int = 320) -> str:
    """An SVG chart of ``timeline``: store bytes (MiB) stacked by part, Ray Data's belief, the
    budget, and batches delivered (right axis), against seconds.

    Args:
        timeline: a result of :func:`raydata_course.sim.simulate`.
        title: a heading drawn above the plot (escaped).
        width_px / height_px: the drawing's size in pixels.

    Raises:
        ValueError: the timeline holds no samples.
    """
    if not timeline.t_s:
        raise ValueError("the timeline holds no samples: simulate() a configuration first.")
    left, right, top, bottom = 64, 56, 30 if title else 12, 64
    w, h = width_px - left - right, height_px - top - bottom
    t_end = max(timeline.t_s[-1], 1e-9)
    used = timeline.used_bytes
    y_max = max(max(used), max(timeline.believed_bytes), timeline.budget_bytes) * 1.08
    total = max(1, timeline.delivered_batches[-1])

    def x(t: float) -> float:
        return left + w * t / t_end

    def y(b: float) -> float:
        return top + h * (1 - b / y_max)

    def steps(values: list[float], scale=y) -> list[tuple[float, float]]:
        points = []
        for i, (t, v) in enumerate(zip(timeline.t_s, values)):
            if i:
                points.append((x(t), points[-1][1]))
            points.append((x(t), scale(v)))
        points.append((x(t_end), points[-1][1]))
        return points

    def area(lower: list[float], upper: list[float], color: str, name: str) -> str:
        up, down = steps(upper), steps(lower)
        d = "M" + " L".join(f"{a:.1f},{b:.1f}" for a, b in up + down[::-1]) + " Z"
        return f'<path d="{d}" fill="{color}" fill-opacity="0.85" stroke="none"><title>{name}</title></path>'

    counted = timeline.counted_bytes
    hidden_top = [c + hb for c, hb in zip(counted, timeline.hidden_bytes)]
    parts = [
        area([0] * len(counted), counted, COLORS["counted"], "counted by Ray Data (live ObjectRef)"),
        area(counted, hidden_top, COLORS["hidden"], "pinned without a ref (hidden batches)"),
        area(hidden_top, used, COLORS["freed"], "freed, not yet deleted (lazy free)"),
    ]
    believed = steps(timeline.believed_bytes)
    parts.append('<path d="M' + " L".join(f"{a:.1f},{b:.1f}" for a, b in believed)
                 + f'" fill="none" stroke="{COLORS["believed"]}" stroke-width="1.5"><title>Ray Data believes</title></path>')
    delivered = steps(timeline.delivered_batches, scale=lambda v: top + h * (1 - v / total))
    parts.append('<path d="M' + " L".join(f"{a:.1f},{b:.1f}" for a, b in delivered)
                 + f'" fill="none" stroke="{COLORS["delivered"]}" stroke-width="1.5" stroke-dasharray="4 2">'
                 "<title>batches delivered</title></path>")
    yb = y(timeline.budget_bytes)
    parts.append(f'<line x1="{left}" x2="{left + w}" y1="{yb:.1f}" y2="{yb:.1f}" stroke="{COLORS["budget"]}" '
                 f'stroke-width="2" stroke-dasharray="6 3"><title>budget</title></line>')
    parts.append(f'<text x="{left + w - 4}" y="{yb - 4:.1f}" text-anchor="end" fill="{COLORS["budget"]}">'
                 f'budget {timeline.budget_bytes / _MIB:,.0f} MiB</text>')
    axes = [f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="#444"/>',
            f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="#444"/>']
    step = _nice_step(y_max / _MIB)
    v = 0.0
    while v * _MIB <= y_max:
        axes.append(f'<text x="{left - 6}" y="{y(v * _MIB) + 4:.1f}" text-anchor="end">{v:g}</text>')
        v += step
    step = _nice_step(t_end)
    v = 0.0
    while v <= t_end + 1e-9:
        axes.append(f'<text x="{x(v):.1f}" y="{top + h + 16}" text-anchor="middle">{v:g}</text>')
        v += step
    axes.append(f'<text x="{left + w + 6}" y="{top + 10}">{total}</text>')
    axes.append(f'<text x="{left + w + 6}" y="{top + h}">0</text>')
    axes.append(f'<text x="{left + w / 2}" y="{top + h + 32}" text-anchor="middle">seconds</text>')
    axes.append(f'<text x="14" y="{top + h / 2}" transform="rotate(-90 14 {top + h / 2})" '
                'text-anchor="middle">object store, MiB</text>')
    legend, lx = [], left
    for key, label in (("counted", "counted (ref alive)"), ("hidden", "pinned, no ref"),
                       ("freed", "freed, not deleted"), ("believed", "Ray Data believes"),
                       ("delivered", "batches delivered")):
        legend.append(f'<rect x="{lx}" y="{height_px - 18}" width="12" height="10" fill="{COLORS[key]}"/>'
                      f'<text x="{lx + 16}" y="{height_px - 9}">{label}</text>')
        lx += 28 + 7 * len(label)
    heading = (f'<text x="{left}" y="18" font-weight="bold">{html.escape(title)}</text>' if title else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height_px}" '
            f'viewBox="0 0 {width_px} {height_px}" font-family="sans-serif" font-size="11" class="rdc-timeline">'
            f'<rect width="100%" height="100%" fill="white"/>{heading}{"".join(parts)}{"".join(axes)}'
            f'{"".join(legend)}</svg>')
