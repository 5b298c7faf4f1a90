"""Inline SVG plots of ``rise report``: pass rate by grid with 95% intervals, a task × grid heat map, task
outcomes (flips) per grid, and tokens and dollars per grid. Drawn here as plain SVG so the page needs nothing from
the network; each function takes the report's :class:`~evolve.views.report.Column` list and returns markup.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from trials.metrics import Interval

if TYPE_CHECKING:
    from evolve.views.report import Column

STATUS_COLOUR = {"seed": "#2b5c8a", "adopted": "#2b5c8a", "rejected": "#b3261e", "blocked": "#777777",
                 "pending": "#9a6700"}
OUTCOME_COLOUR = {"pass": "#1a9850", "flip": "#f4a300", "fail": "#d73027", "incomplete": "#9e9e9e"}


def _svg(width: float, height: float, body: list[str], label: str, cls: str) -> Markup:
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" class="plot {cls}" width="{width:.0f}" '
                  f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
                  f'aria-label="{escape(label)}">' + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, anchor: str = "middle", size: int = 11, extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" {extra}>'
            f'{escape(s)}</text>')


def _rotated_labels(xs: list[float], y: float, labels: list[str], anchor: str = "end") -> list[str]:
    """Labels turned 35° up: ``end`` hangs them below an axis, ``start`` stands them above a header row."""
    return [_text(x, y, lab, anchor, 11, f'transform="rotate(-35 {x:.1f} {y:.1f})"') for x, lab in zip(xs, labels)]


def interval_of(m) -> Interval | None:
    """A grid's 95% interval of Pass@1: the task-level bootstrap when there is one, else Wilson's."""
    if m is None:
        return None
    return m.bootstrap.get("pass_at_1") or m.wilson_pass_at_1


def pass_rate_plot(columns: list[Column]) -> Markup:
    """Pass@1 per grid with its 95% interval (task-level bootstrap, else Wilson); held-out as diamonds."""
    left, top, plot_h, step = 48, 16, 200, 72
    width = max(420, left + step * len(columns) + 24)
    longest = max((len(c.label) for c in columns), default=4)
    height = top + plot_h + 20 + min(120, 4.2 * longest) + 24

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    body = []
    for g in (0, 0.25, 0.5, 0.75, 1):
        body.append(f'<line x1="{left}" x2="{width - 12}" y1="{y(g):.1f}" y2="{y(g):.1f}" stroke="#ddd"/>')
        body.append(_text(left - 6, y(g) + 4, f"{g:.2f}", "end", 10))
    body.append(_text(14, top + plot_h / 2, "Pass@1", "middle", 11,
                      f'transform="rotate(-90 14 {top + plot_h / 2:.0f})"'))
    xs = [left + step * (i + 0.5) for i in range(len(columns))]
    line = [f"{x:.1f},{y(c.metrics.pass_at_1):.1f}" for x, c in zip(xs, columns)
            if c.version and c.metrics is not None and c.metrics.pass_at_1 is not None]
    if len(line) > 1:
        body.append(f'<polyline points="{" ".join(line)}" fill="none" stroke="#2b5c8a" stroke-width="1.5" '
                    'stroke-dasharray="4 3"/>')
    for x, c in zip(xs, columns):
        m = c.metrics
        colour = STATUS_COLOUR.get(c.status, "#333")
        if m is None or m.pass_at_1 is None:
            body.append(_text(x, y(0) - 6, "no grid", "middle", 10, 'fill="#777"'))
            continue
        iv = interval_of(m)
        if iv is not None:
            body.append(f'<line class="ci" x1="{x:.1f}" x2="{x:.1f}" y1="{y(iv.low):.1f}" y2="{y(iv.high):.1f}" '
                        f'stroke="{colour}" stroke-width="2"/>')
            for v in (iv.low, iv.high):
                body.append(f'<line x1="{x - 5:.1f}" x2="{x + 5:.1f}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                            f'stroke="{colour}" stroke-width="2"/>')
        fill = colour if c.version else "white"
        tip = (f"{c.label}: Pass@1 {m.pass_at_1:.3f}" + (f" (95% {iv.low:.2f}–{iv.high:.2f})" if iv else "")
               + ("" if m.complete else f"; incomplete, {len(m.missing)} cells ⊥/missing"))
        body.append(f'<circle class="point" data-column="{escape(c.label)}" data-pass1="{m.pass_at_1:.4f}" '
                    f'cx="{x:.1f}" cy="{y(m.pass_at_1):.1f}" r="5" fill="{fill}" stroke="{colour}" '
                    f'stroke-width="2"><title>{escape(tip)}</title></circle>')
        if not m.complete:
            body.append(_text(x, y(m.pass_at_1) - 9, "⊥", "middle", 12, f'fill="{colour}"'))
        h = c.heldout.metrics if c.heldout else None
        if h is not None and h.pass_at_1 is not None:
            hx, hy = x + 14, y(h.pass_at_1)
            body.append(f'<path class="heldout" d="M{hx:.1f},{hy - 6:.1f} L{hx + 6:.1f},{hy:.1f} '
                        f'L{hx:.1f},{hy + 6:.1f} L{hx - 6:.1f},{hy:.1f} Z" fill="#e08214">'
                        f'<title>{escape(c.label)} held-out Pass@1 {h.pass_at_1:.3f}</title></path>')
    body += _rotated_labels(xs, top + plot_h + 16, [c.label for c in columns])
    lx = left
    for name, colour, filled in (("version (reference runs)", "#2b5c8a", True), ("rejected", "#b3261e", False),
                                 ("blocked (⊥)", "#777777", False), ("held-out", "#e08214", True)):
        body.append(f'<circle cx="{lx + 5}" cy="{height - 10}" r="4" fill="{colour if filled else "white"}" '
                    f'stroke="{colour}" stroke-width="2"/>')
        body.append(_text(lx + 13, height - 6, name, "start", 10))
        lx += 16 + 6.2 * len(name)
    return _svg(width, height, body, "Pass@1 by grid with 95% intervals", "pass-rate")


def _rate_colour(rate: float) -> str:
    """Red (0) through yellow (0.5) to green (1)."""
    stops = [(0.0, (215, 48, 39)), (0.5, (254, 224, 139)), (1.0, (26, 152, 80))]
    for (a, ca), (b, cb) in itertools.pairwise(stops):
        if rate <= b:
            t = (rate - a) / (b - a)
            return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb))
    return "#1a9850"


def heatmap_plot(tasks: list[str], columns: list[Column]) -> Markup:
    """Task × grid: each cell is the task's pass rate over its r runs, ``passes/observed``; ⊥ marked."""
    cw, ch = 72, 24
    left = 16 + 7 * max((len(t) for t in tasks), default=4)
    head = 24 + min(90, 3.6 * max((len(c.label) for c in columns), default=4))  # labels turned 35°
    width = left + cw * len(columns) + 16 + min(110, 5.2 * max((len(c.label) for c in columns), default=4))
    height = head + ch * len(tasks) + 12
    body = _rotated_labels([left + cw * (j + 0.5) - 8 for j in range(len(columns))], head - 6,
                           [c.label for c in columns], "start")
    for i, task in enumerate(tasks):
        yy = head + ch * i
        body.append(_text(left - 8, yy + ch / 2 + 4, task, "end", 11))
        for j, c in enumerate(columns):
            xx = left + cw * j
            row = next((r for r in c.metrics.tasks if r.task == task), None) if c.metrics else None
            if row is None:
                body.append(f'<rect class="cell empty" x="{xx + 1}" y="{yy + 1}" width="{cw - 2}" height="{ch - 2}" '
                            f'fill="#f4f4f4"><title>{escape(task)} not in {escape(c.label)}</title></rect>')
                continue
            observed = row.passes + row.fails
            fill = _rate_colour(row.rate) if row.rate is not None else "#bdbdbd"
            dash = ' stroke="#333" stroke-dasharray="3 2" stroke-width="1.5"' if row.unknown else ""
            tip = (f"{task} in {c.label}: {row.passes}/{observed} passed ({row.outcome})"
                   + (f", {row.unknown} ⊥/missing" if row.unknown else ""))
            rate = "" if row.rate is None else f"{row.rate:.3f}"
            body.append(f'<rect class="cell" data-task="{escape(task)}" data-column="{escape(c.label)}" '
                        f'data-rate="{rate}" data-outcome="{row.outcome}" x="{xx + 1}" y="{yy + 1}" '
                        f'width="{cw - 2}" height="{ch - 2}" fill="{fill}"{dash}><title>{escape(tip)}</title></rect>')
            label = f"{row.passes}/{observed}" + (" ⊥" if row.unknown else "")
            body.append(_text(xx + cw / 2, yy + ch / 2 + 4, label, "middle", 10))
    return _svg(width, height, body, "task by grid heat map of pass rates", "heatmap")


def outcomes_plot(columns: list[Column]) -> Markup:
    """Per grid, its tasks split by outcome over r runs: all pass, flip (some pass, some fail), all fail, ⊥."""
    left, top, plot_h, step, bw = 40, 16, 160, 72, 34
    width = max(420, left + step * len(columns) + 24)
    longest = max((len(c.label) for c in columns), default=4)
    height = top + plot_h + 20 + min(120, 4.2 * longest) + 24
    n_max = max((c.metrics.n_tasks for c in columns if c.metrics), default=1) or 1
    body = [f'<line x1="{left}" x2="{width - 12}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#999"/>',
            _text(left - 6, top + 4, str(n_max), "end", 10), _text(left - 6, top + plot_h, "0", "end", 10)]
    xs = [left + step * (i + 0.5) for i in range(len(columns))]
    for x, c in zip(xs, columns):
        if c.metrics is None:
            continue
        base = top + plot_h
        for outcome in ("pass", "flip", "fail", "incomplete"):
            n = c.metrics.counts.get(outcome, 0)
            if not n:
                continue
            h = plot_h * n / n_max
            base -= h
            body.append(f'<rect class="bar {outcome}" data-column="{escape(c.label)}" data-count="{n}" '
                        f'x="{x - bw / 2:.1f}" y="{base:.1f}" width="{bw}" height="{h:.1f}" '
                        f'fill="{OUTCOME_COLOUR[outcome]}"><title>{escape(c.label)}: {n} task(s) {outcome}'
                        f'</title></rect>')
            if h >= 12:
                body.append(_text(x, base + h / 2 + 4, str(n), "middle", 10))
    body += _rotated_labels(xs, top + plot_h + 16, [c.label for c in columns])
    lx = left
    for name in ("pass", "flip", "fail", "incomplete"):
        body.append(f'<rect x="{lx}" y="{height - 16}" width="10" height="10" fill="{OUTCOME_COLOUR[name]}"/>')
        body.append(_text(lx + 14, height - 7, name, "start", 10))
        lx += 24 + 7 * len(name)
    return _svg(width, height, body, "task outcomes per grid", "outcomes")


def cost_plot(columns: list[Column]) -> Markup:
    """Tokens per grid (generator input, generator output, verifier), dollars at the end of each bar."""
    rows = [c for c in columns if c.ref is not None]
    left = 16 + 6.5 * max((len(c.label) for c in rows), default=4)
    bar_w, bh = 360, 18
    width, height = left + bar_w + 110, 24 + (bh + 8) * max(1, len(rows)) + 20
    peak = max((c.ref.cost.tokens for c in rows), default=0) or 1
    parts = (("generator in", "#6baed6", lambda k: k.generator.input_tokens), ("generator out", "#2171b5",
             lambda k: k.generator.output_tokens), ("verifier", "#fd8d3c", lambda k: k.verifier.tokens))
    body = []
    for i, c in enumerate(rows):
        yy = 12 + (bh + 8) * i
        body.append(_text(left - 8, yy + bh / 2 + 4, c.label, "end", 11))
        x = left
        k = c.ref.cost
        for name, colour, get in parts:
            w = bar_w * get(k) / peak
            if w > 0:
                body.append(f'<rect class="cost" x="{x:.1f}" y="{yy}" width="{w:.1f}" height="{bh}" fill="{colour}">'
                            f'<title>{escape(c.label)} {name}: {get(k):,} tokens</title></rect>')
                x += w
        body.append(_text(x + 6, yy + bh / 2 + 4, f"{k.tokens:,} tok, ${k.usd:.4f}", "start", 10))
    lx = left
    for name, colour, _get in parts:
        body.append(f'<rect x="{lx}" y="{height - 16}" width="10" height="10" fill="{colour}"/>')
        body.append(_text(lx + 14, height - 7, name, "start", 10))
        lx += 28 + 6.5 * len(name)
    return _svg(width, height, body, "tokens and dollars per grid", "cost")
