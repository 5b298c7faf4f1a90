"""``rise report``: one static HTML page about an experiment, for the morning after an overnight run.

It gathers from the store and the ledger: every evaluated grid (each version's reference corpus, each
candidate's full evaluation), the decisions with their reasons (a ⊥-blocked evaluation says which cells and
why), held-out results (sealed: recorded, never decisive), per-version changes (``evolve.show``) and cost
(tokens and dollars per grid, and everything the experiment's trials spent). Plots are inline SVG drawn
here — pass rate by grid with 95% intervals, a task × grid heat map, task outcomes (flips) per grid, cost —
so the page needs nothing from the network. :func:`running_jobs` and :func:`experiment_spend` also serve
``rise status``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from trials.harness_api import AgentOutcome
from trials.metrics import Comparison, Interval, compare
from trials.results import TrialResult

from .show import (
    CostSummary,
    GridRef,
    VersionView,
    load_grid,
    locate_baseline,
    locate_evaluation,
    locate_heldout,
    locate_reference,
    version_view,
)
from .store import Experiment

TEMPLATES = Path(__file__).resolve().parent / "templates"
_SKIP_DIRS = {"harness", "worktrees", ".git", "__pycache__"}
MAX_DIFF_CHARS = 200_000


# ------------------------------------------------------------------------------------------- the model
@dataclass
class Column:
    """One evaluated grid: a version's reference corpus or a candidate's evaluation."""

    label: str
    kind: str  # version | candidate
    status: str  # seed | adopted | rejected | blocked | pending
    ref: GridRef | None
    job_dir: Path | None
    version: str | None = None
    heldout: GridRef | None = None
    where: str = ""  # the job folder relative to the experiment

    @property
    def metrics(self):
        return self.ref.metrics if self.ref else None


@dataclass
class CandidateRow:
    round: int
    slug: str
    branch: str
    commit: str
    parent: str
    status: str = "pending"
    reason: str = ""
    version: str | None = None
    regressions: list[str] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)  # smoke / contracts / screening -> passed|failed|—
    pass_at_1: float | None = None
    baseline_pass_at_1: float | None = None
    p_value: float | None = None
    comparison: Comparison | None = None
    blocked_cells: list[str] = field(default_factory=list)  # "task#k: infra:<cause>"
    history: list[tuple[str, str]] = field(default_factory=list)  # (timestamp, what happened)
    column: Column | None = None


@dataclass
class Report:
    name: str
    generated: str
    config: dict[str, Any]
    columns: list[Column]
    tasks: list[str]
    candidates: list[CandidateRow]
    rounds: list[dict[str, Any]]
    views: list[VersionView]
    spend: dict[str, CostSummary]
    running: list[dict[str, Any]]
    plots: dict[str, Markup] = field(default_factory=dict)

    @property
    def total_spend(self) -> CostSummary:
        total = CostSummary()
        for c in self.spend.values():
            total.merge(c)
        return total


# ----------------------------------------------------------------------------------- spend and running
def _trial_cost(tdir: Path) -> Any | None:
    try:
        return TrialResult.load(tdir / "result.json").cost
    except (OSError, ValueError):
        pass
    try:  # a trial a kill cut off: its harness may still have reported what it spent
        return AgentOutcome.model_validate_json((tdir / "agent" / "agent_result.json").read_text()).cost
    except (OSError, ValueError):
        return None


def experiment_spend(exp: Experiment) -> dict[str, CostSummary]:
    """Everything the experiment's trials spent (attempts moved aside included), by top-level folder."""
    out: dict[str, CostSummary] = {}
    for dirpath, dirnames, filenames in os.walk(exp.root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        here = Path(dirpath)
        is_trial = "result.json" in filenames or (here / "agent" / "agent_result.json").is_file()
        if not is_trial or here == exp.root:
            continue
        cost = _trial_cost(here)
        if cost is not None:
            area = here.relative_to(exp.root).parts[0]
            out.setdefault(area, CostSummary()).add(cost)
        dirnames[:] = []  # nothing below a trial folder is another trial
    return out


def _held_flocks() -> dict[int, int]:
    """inode -> pid of every flock held on this machine (``/proc/locks``); reading it disturbs no lock."""
    held = {}
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[4].isdigit():
                held[int(parts[5].rsplit(":", 1)[1])] = int(parts[4])
    except (OSError, ValueError, IndexError):
        pass
    return held


def running_jobs(exp: Experiment) -> list[dict[str, Any]]:
    """Grids of this experiment being run right now: the job folder, its runner's pid, cells done and the
    trials in flight. A job is running while its ``job.lock`` flock is held."""
    held = _held_flocks()
    out = []
    for dirpath, dirnames, filenames in os.walk(exp.root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and "__r" not in d]
        if "job.lock" not in filenames:
            continue
        job = Path(dirpath)
        pid = held.get(os.stat(job / "job.lock").st_ino)
        if pid is None:
            continue
        trials = [d for d in job.iterdir() if d.is_dir() and re.fullmatch(r".+__r\d+", d.name)]
        done = sum((d / "result.json").is_file() for d in trials)
        total = None
        try:
            from trials.results import JobConfig

            cfg = JobConfig.load(job / "config.json")
            total = len(cfg.task_names) * cfg.r
        except (OSError, ValueError):
            pass
        out.append({"job_dir": str(job.relative_to(exp.root)), "pid": pid, "done": done, "total": total,
                    "in_flight": sorted(d.name for d in trials if not (d / "result.json").is_file())})
    return sorted(out, key=lambda j: j["job_dir"])


# ------------------------------------------------------------------------------------------ gathering
def _check_state(exp: Experiment, commits: list[str], stage: str) -> str:
    for c in reversed(commits):
        ev = exp.ledger.find("check_result", key=f"{c}:{stage}")
        if ev and not ev[0].details.get("repaired_to"):
            return "passed" if ev[0].passed else "failed"
    return "—"


def _candidates(exp: Experiment) -> list[CandidateRow]:
    from .show import _candidate_commits

    led = exp.ledger
    rows = []
    for created in led.find("candidate_created"):
        chain = _candidate_commits(exp, created.commit)
        start = led.find("round_start", key=f"r{created.round:02d}:start")
        row = CandidateRow(created.round, created.branch.split("-", 1)[1], created.branch, chain[-1],
                           start[0].incumbent if start else "v0")
        row.history.append((created.ts, f"created {created.commit[:10]} from {row.parent}"))
        for ev in led.events:
            if getattr(ev, "commit", None) not in chain or ev.kind in ("candidate_created", "trial_done"):
                continue
            if ev.kind == "check_result":
                extra = " (repaired)" if ev.details.get("repaired_to") else ""
                row.history.append((ev.ts, f"{ev.stage} {'passed' if ev.passed else 'failed'}{extra}"))
            elif ev.kind == "screening":
                verdict = "passed" if ev.passed else "failed"
                row.history.append((ev.ts, f"screening {verdict}: {ev.details.get('reason', '')}"))
            elif ev.kind == "evaluation":
                p1 = ev.metrics.get("pass_at_1")
                row.history.append((ev.ts, f"{ev.metrics.get('purpose', 'evaluation')} "
                                           f"{'complete' if ev.complete else 'incomplete'}"
                                           + (f", Pass@1 {p1:.3f}" if isinstance(p1, float) else "")))
            elif ev.kind in ("adoption", "rejection"):
                d = ev.decision
                blocked = ev.kind == "rejection" and bool(d.get("blocked"))
                row.status = "adopted" if ev.kind == "adoption" else "blocked" if blocked else "rejected"
                row.reason = getattr(ev, "reason", "") or str(d.get("reason", ""))
                row.version = getattr(ev, "version", None)
                row.regressions = list(d.get("regressions") or [])
                row.pass_at_1 = d.get("pass_at_1", d.get("candidate_pass1"))
                row.baseline_pass_at_1 = d.get("baseline_pass1")
                row.p_value = d.get("p_value")
                what = f"adopted as {row.version}" if row.version else row.status
                row.history.append((ev.ts, f"{what}: {row.reason}"))
        for stage in ("smoke", "contracts"):
            row.checks[stage] = _check_state(exp, chain, stage)
        scr = [e for c in chain for e in led.find("screening", key=f"{c}:screening")]
        row.checks["screening"] = ("passed" if scr[-1].passed else "failed") if scr else "—"
        rows.append(row)
    return rows


def _version_status(exp: Experiment, tag: str) -> str:
    return "seed" if tag == "v0" else "adopted"


def build_report(exp: Experiment) -> Report:
    """Read the experiment into a :class:`Report` (no rendering)."""
    cfg = exp.config
    versions = exp.versions()
    by_commit = {exp.commit_of(v): v for v in versions}
    candidates = _candidates(exp)
    columns: list[Column] = []
    cand_commits = set()
    for tag in versions:
        if tag != "v0" and any(c.commit == exp.commit_of(tag) for c in candidates):
            continue
        ref_dir = locate_reference(exp, tag)
        columns.append(Column(tag, "version", _version_status(exp, tag), load_grid(ref_dir, tag), ref_dir, tag,
                              load_grid(locate_heldout(exp, tag), f"{tag} held-out")))
    for row in candidates:
        cand_commits.add(row.commit)
        tag = by_commit.get(row.commit) if row.status == "adopted" else None
        job = locate_reference(exp, tag) if tag else locate_evaluation(exp, row.commit, row.round, row.slug)
        label = f"r{row.round:02d} {row.slug}" + (f" → {tag}" if tag else "")
        col = Column(label, "candidate", row.status, load_grid(job, label), job, tag,
                     load_grid(locate_heldout(exp, tag), f"{tag} held-out") if tag else None)
        row.column = col
        columns.append(col)
        base_dir, blabel = locate_baseline(exp, row.parent, row.round)
        base = load_grid(base_dir, blabel)
        if col.ref is not None:
            if base is not None:
                row.comparison = compare(base.grid, col.ref.grid, base.r, col.ref.r)
                if row.baseline_pass_at_1 is None:
                    row.baseline_pass_at_1 = row.comparison.pass_at_1_a
            if row.pass_at_1 is None:
                row.pass_at_1 = col.ref.metrics.pass_at_1
            row.blocked_cells = [f"{m.task}#{m.repetition}: {m.reason}" for m in col.ref.metrics.missing]
            if row.status == "pending" and row.blocked_cells:
                row.reason = (f"cannot adopt yet: {len(row.blocked_cells)} cell(s) of the evaluation are ⊥ or "
                              "missing; rerun with --resume")
    for c in columns:
        if c.job_dir is not None:
            c.where = os.path.relpath(c.job_dir, exp.root) if c.job_dir.is_relative_to(exp.root) else str(c.job_dir)
    tasks = sorted({t for c in columns if c.ref for t in c.ref.grid})
    views = [version_view(exp, v) for v in versions if v != "v0"]
    for v in views:
        if len(v.code_diff) > MAX_DIFF_CHARS:
            v.code_diff = v.code_diff[:MAX_DIFF_CHARS] + f"\n… (cut at {MAX_DIFF_CHARS} characters)"
    rounds = []
    for ev in exp.ledger.find("round_start"):
        mine = [c for c in candidates if c.round == ev.round]
        rounds.append({"round": ev.round, "incumbent": ev.incumbent, "started": ev.ts, "candidates": len(mine),
                       "adopted": next((c.version for c in mine if c.status == "adopted"), None),
                       "blocked": sum(c.status == "blocked" for c in mine)})
    config = {"model": cfg.endpoint.model, "base_url": cfg.endpoint.base_url, "tasks_dir": cfg.tasks.dir,
              "development": cfg.tasks.development or "all tasks not held out", "heldout": cfg.tasks.heldout,
              "r": cfg.r, "env": cfg.env, "policy": cfg.adoption.policy, "alpha": cfg.adoption.alpha,
              "baseline": cfg.adoption.baseline, "sequential": cfg.adoption.sequential,
              "budgets": cfg.budgets.model_dump()}
    report = Report(cfg.name, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), config, columns, tasks,
                    candidates, rounds, views, experiment_spend(exp), running_jobs(exp))
    report.plots = {"pass_rate": pass_rate_plot(columns), "heatmap": heatmap_plot(tasks, columns),
                    "outcomes": outcomes_plot(columns), "cost": cost_plot(columns)}
    return report


# --------------------------------------------------------------------------------------------- plots
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


def _interval(m) -> Interval | None:
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
        iv = _interval(m)
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
    parts = (("generator in", "#6baed6", lambda k: k.generator_in), ("generator out", "#2171b5",
             lambda k: k.generator_out), ("verifier", "#fd8d3c", lambda k: k.verifier_in + k.verifier_out))
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


# ------------------------------------------------------------------------------------------- rendering
def _handbook_html(diff: Any) -> Markup:
    """The body of ``handbook.diff``'s HTML page, to embed (its own title dropped)."""
    from handbook.diff import render_diff_html

    page = render_diff_html(diff)
    m = re.search(r"<body>(.*)</body>", page, flags=re.DOTALL)
    inner = m.group(1) if m else page
    inner = re.sub(r"<h1>.*?</h1>", "", inner, count=1, flags=re.DOTALL)
    # its headings sit under the report's own h4 "Handbook": h2 -> h5, h3 -> h6
    return Markup(re.sub(r"<(/?)h([23])\b", lambda m: f"<{m.group(1)}h{int(m.group(2)) + 3}", inner))


def _fmt(x: Any, digits: int = 3) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def render_report(report: Report) -> str:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    env.filters["handbook_html"] = _handbook_html
    env.filters["interval"] = lambda m: _interval(m)
    return env.get_template("report.html.j2").render(r=report)


def write_report(exp: Experiment, out: Path | None = None) -> Path:
    """Render the experiment's report to ``out`` (default ``runs/<name>/report.html``), atomically."""
    out = out or exp.root / "report.html"
    html = render_report(build_report(exp))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html)
    os.replace(tmp, out)
    return out
