"""``rise report``: one static HTML page about an experiment, for the morning after an overnight run.

It gathers from the store and the ledger: every evaluated grid (each version's reference corpus, each
candidate's full evaluation), the decisions with their reasons (a ⊥-blocked evaluation says which cells and
why), held-out results (sealed: recorded, never decisive), per-version changes (``evolve.views.show``) and cost
(tokens and dollars per grid, and everything the experiment's trials spent). Plots are inline SVG
(``evolve.views.plots``), so the page needs nothing from the network; spend and running jobs are read by
``evolve.experiment.trial_scan`` (re-exported here, as ``rise status`` and the budget use them).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from evolve.experiment.store import Experiment
from evolve.experiment.trial_scan import experiment_spend, running_jobs
from evolve.round.control_arm import arm_lines
from evolve.round.grading import pass_rate, pooled_pass_rate
from evolve.views.plots import cost_plot, heatmap_plot, interval_of, outcomes_plot, pass_rate_plot
from evolve.views.show import (
    GridRef,
    VersionView,
    decision_policy,
    load_grid,
    locate_baseline,
    locate_evaluation,
    locate_heldout,
    locate_reference,
    version_view,
)
from evolve.views.timing import LABELS as TIME_LABELS
from evolve.views.timing import time_rows
from trials.cost import CostSummary
from trials.metrics import Comparison, compare
from validate.coupled import agreement_lines
from validate.load_check import load_lines

TEMPLATES = Path(__file__).resolve().parent / "templates"
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
    tier: str = "code"  # the proposal's tier: settings | prompt | code
    checks: dict[str, str] = field(default_factory=dict)  # smoke / contracts / screening -> passed|failed|—
    pass_at_1: float | None = None
    baseline_pass_at_1: float | None = None
    p_value: float | None = None
    policy_note: str = ""  # the decision's policy and its measured false-adoption rate (final decisions only)
    decision: dict[str, Any] = field(default_factory=dict)
    comparison: Comparison | None = None
    blocked_cells: list[str] = field(default_factory=list)  # "task#k: infra:<cause>"
    history: list[tuple[str, str]] = field(default_factory=list)  # (timestamp, what happened)
    column: Column | None = None
    control_arm: list[str] = field(default_factory=list)  # the compute-matched control arm (evolve.round.control_arm)
    load: list[str] = field(default_factory=list)  # both arms' load side by side (validate.load_check)
    needed: str = ""  # a rejected candidate: the more passes that would have adopted it (validate.needed)


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
    evolution: list[Any] = field(default_factory=list)  # evolve.views.rounds.RoundRecord per rise evolve round
    morning: list[Any] = field(default_factory=list)  # evolve.views.morning.MorningRound per started round
    time: list[Any] = field(default_factory=list)  # evolve.views.timing.TimeRow per grid: time split and load
    night: list[str] = field(default_factory=list)  # where the night stands (evolve.views.resume), as rise status

    @property
    def total_spend(self) -> CostSummary:
        return CostSummary.total(self.spend.values())


# ------------------------------------------------------------------------------------------ gathering
def _check_state(exp: Experiment, commits: list[str], stage: str) -> str:
    for c in reversed(commits):
        ev = exp.ledger.find("check_result", key=f"{c}:{stage}")
        if ev and not ev[0].details.get("repaired_to"):
            return "passed" if ev[0].passed else "failed"
    return "—"


def _candidates(exp: Experiment) -> list[CandidateRow]:
    from evolve.views.show import _candidate_commits, tier_of

    led = exp.ledger
    rows = []
    for created in led.find("candidate_created"):
        chain = _candidate_commits(exp, created.commit)
        start = led.find("round_start", key=f"r{created.round:02d}:start")
        row = CandidateRow(created.round, created.branch.split("-", 1)[1], created.branch, chain[-1],
                           start[0].incumbent if start else "v0")
        row.tier = tier_of(created)
        row.history.append((created.ts, f"created {created.commit[:10]} from {row.parent} ({row.tier} tier)"))
        for ev in led.events:
            if getattr(ev, "commit", None) not in chain or ev.kind in ("candidate_created", "trial_done"):
                continue
            if ev.kind == "check_result":
                extra = " (repaired)" if ev.details.get("repaired_to") else ""
                row.history.append((ev.ts, f"{ev.stage} {'passed' if ev.passed else 'failed'}{extra}"))
            elif ev.kind == "repair":
                to = f"repaired to {ev.repaired_to[:10]}" if ev.repaired_to else "changed nothing"
                row.history.append((ev.ts, f"repair {ev.number} after the {ev.stage} check: {to}"))
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
                row.decision = {} if blocked else d
                row.control_arm = arm_lines(d.get("control_arm"))
                row.load = load_lines(d.get("load")) + agreement_lines(d.get("agreement"))
                what = f"adopted as {row.version}" if row.version else row.status
                row.history.append((ev.ts, f"{what}: {row.reason}"))
        for stage in ("smoke", "contracts"):
            row.checks[stage] = _check_state(exp, chain, stage)
        scr = [e for c in chain for e in led.find("screening", key=f"{c}:screening")]
        row.checks["screening"] = ("passed" if scr[-1].passed else "failed") if scr else "—"
        rows.append(row)
    return rows


def _needed(exp: Experiment, row: CandidateRow, evaluation: GridRef, base: GridRef) -> str:
    """What a rejected candidate would have needed to be adopted, at its grid and its decision's policy."""
    from validate.needed import passes_needed

    policy = str(row.decision.get("policy") or exp.config.adoption.policy)
    alpha = float(row.decision.get("alpha") or exp.config.adoption.alpha)
    tasks = sorted(evaluation.grid)
    if base.metrics.missing:
        return ""
    gains = _gains(evaluation.grid, base.grid, tasks, row.decision.get("detectable_gain"))
    if not_run := [m for m in evaluation.metrics.missing if m.reason == "missing"]:
        return (f"decided early with {len(not_run)} of {len(tasks) * evaluation.r} runs not run: no completion "
                f"of them could have been adopted{gains}")
    if evaluation.metrics.missing:
        return ""  # ⊥ cells: the decision's reason says what they did
    needed = passes_needed(evaluation.grid, base.grid, tasks, policy, alpha)
    return (needed.line(policy) if needed is not None else f"not computed for the {policy} policy") + gains


def _gains(candidate: dict[str, list[bool | None]], baseline: dict[str, list[bool | None]], tasks: list[str],
           detectable: float | None) -> str:
    """'; measured gain +0.057 (task +0.07, …) against the +0.13 this grid detects with 80 % power': the gain the
    candidate showed, per task (its pass rate less the baseline's, ⊥ cells left out), beside what the grid could see."""
    per = [(t, rc - rb) for t in tasks if (rc := pass_rate(candidate.get(t))) is not None
           and (rb := pass_rate(baseline.get(t))) is not None]
    c1 = pooled_pass_rate({t: candidate.get(t, []) for t in tasks})
    b1 = pooled_pass_rate({t: baseline.get(t, []) for t in tasks})
    if c1 is None or b1 is None:
        return ""
    out = f"; measured gain {c1 - b1:+.3f} in Pass@1 ({', '.join(f'{t} {d:+.2f}' for t, d in per)})"
    if isinstance(detectable, int | float):
        out += f" against the {detectable:+.2f} this grid detects with 80 % power"
    return out


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
        base_dir, blabel = locate_baseline(exp, row.parent, row.round, row.slug)
        base = load_grid(base_dir, blabel)
        if row.decision:
            row.policy_note = decision_policy(exp, row.decision, col.ref)
        if col.ref is not None:
            if base is not None:
                row.comparison = compare(base.grid, col.ref.grid, base.r, col.ref.r)
                if row.baseline_pass_at_1 is None:
                    # a candidate grid still running pairs no task, so the comparison has no baseline rate; the
                    # baseline's own (a complete grid) is the figure the decision will compare with
                    row.baseline_pass_at_1 = (row.comparison.pass_at_1_a if row.comparison.pass_at_1_a is not None
                                              else base.metrics.pass_at_1)
            if row.pass_at_1 is None:
                row.pass_at_1 = col.ref.metrics.pass_at_1
            missing = col.ref.metrics.missing
            row.blocked_cells = [f"{m.task}#{m.repetition}: {m.reason}" for m in missing]
            if row.status == "rejected" and row.decision and base is not None:
                row.needed = _needed(exp, row, col.ref, base)
            if row.status == "pending" and row.blocked_cells:
                infra = sum(m.reason.startswith("infra") for m in missing)
                total = len(col.ref.grid) * col.ref.r
                row.reason = (f"not decided yet: {len(missing) - infra} of {total} trials of the evaluation not run"
                              + (f", {infra} ⊥ to rerun" if infra else "")
                              + "; a resume (`rise evolve --resume`, scripts/run.sh) goes on with them")
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
    from evolve.views.rounds import (  # rise evolve's rounds (none after rise round alone)
        evolve_rounds,
        round_record,
    )

    report.evolution = [round_record(exp, n) for n in evolve_rounds(exp)]
    from evolve.views.morning import morning_rounds

    report.morning = morning_rounds(exp, report)
    from evolve.views.resume import render_summary, resume_summary

    report.night = render_summary(resume_summary(exp))
    report.time = time_rows(columns)
    report.plots = {"pass_rate": pass_rate_plot(columns), "heatmap": heatmap_plot(tasks, columns),
                    "outcomes": outcomes_plot(columns), "cost": cost_plot(columns)}
    return report


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
    env.filters["interval"] = lambda m: interval_of(m)
    env.globals["time_labels"] = TIME_LABELS
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
