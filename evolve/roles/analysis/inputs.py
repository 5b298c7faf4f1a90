"""What the analyst is given for one pair: both digests, the region where the runs diverge, the Handbook entries
of the behaviours involved (none of the Handbook, and trajectory-only digests, in the ablation).

The divergence is the first episode whose commands differ between the two runs (compared after collapsing
whitespace); the region is that episode and the next of each run: commands, claim, and the tail of the terminal
they produced. Behaviours involved are those of both digests' hits plus, with harness evidence, those the spans
of the diverging episode evidence (span → behaviour through :mod:`handbook.lookup`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evolve.roles.analysis.digest import digest, render_digest
from evolve.roles.analysis.models import Digest, Pair
from evolve.roles.analysis.trial_view import Episode, TrialView
from handbook.lookup import SpanIndex, read_spans
from handbook.model import Handbook

REGION_EPISODES = 2
TAIL_LINES = 12
MAX_BEHAVIOURS = 6


def _key(ep: Episode) -> str:
    return "\n".join(" ".join(k.split()) for k, _ in ep.commands) + ("|claim" if ep.claimed else "")


def divergence(ok: TrialView, bad: TrialView) -> int:
    """The first episode where the runs' actions differ (the shorter run's length when one is a prefix)."""
    for i, (a, b) in enumerate(zip(ok.episodes, bad.episodes)):
        if _key(a) != _key(b):
            return i
    return min(len(ok.episodes), len(bad.episodes))


def _episode_text(view: TrialView, ep: Episode) -> str:
    lines = [f"episode {ep.index} (step {ep.step_id}):"]
    for keys, duration in ep.commands:
        lines.append(f"  keys {keys!r} (wait {duration:g} s)")
    if not ep.commands:
        lines.append("  (no commands)")
    if ep.claimed:
        lines.append("  claims the task is complete")
    if ep.extra.get("parse_error"):
        lines.append(f"  parse error: {ep.extra['parse_error']}")
    shown = ep.terminal
    if shown is None and ep.observation:
        shown = ep.observation
    if shown:
        tail = [ln for ln in shown.splitlines() if ln.strip()][-TAIL_LINES:]
        lines.append("  then the model saw:")
        lines += [f"    | {ln[:160]}" for ln in tail]
    return "\n".join(lines)


def region_text(ok: TrialView, bad: TrialView, at: int) -> str:
    """Both runs from the diverging episode on (a few episodes each)."""
    out = []
    for label, view in (("SUCCESS", ok), ("FAILURE", bad)):
        eps = [e for e in view.episodes if at <= e.index < at + REGION_EPISODES]
        body = "\n".join(_episode_text(view, e) for e in eps) or "  (the run had already ended)"
        out.append(f"{label} run {view.name} from episode {at}:\n{body}")
    return "\n\n".join(out)


def behaviours_involved(digests: list[Digest], views: list[TrialView], at: int,
                        handbook: Handbook | None) -> list[str]:
    """Behaviours of the hits first (most hit first), then those the diverging episode's spans evidence;
    at most :data:`MAX_BEHAVIOURS` (the tools reach the rest)."""
    hits = [h.behaviour for d in digests for h in d.hits]
    found = sorted(dict.fromkeys(hits), key=lambda b: -hits.count(b))
    if handbook is not None:
        index = SpanIndex(handbook)
        for view in views:
            for span in read_spans(view.folder).spans:
                if span.episode == at and span.name.split(":")[0] in ("loop", "tmux", "completion", "parsing"):
                    found += [b.id for b in index.behaviours(span)]
        known = {b.id for _, b in handbook.iter_behaviours()}
        found = [b for b in found if b in known]
    return list(dict.fromkeys(found))[:MAX_BEHAVIOURS]


def handbook_entries(handbook: Handbook, ids: list[str]) -> str:
    """The Handbook entries of ``ids`` as the analyst reads them."""
    out = []
    for bid in ids:
        b = handbook.behaviour(bid)
        out.append(f"- {b.id} ({b.name}): {' '.join(b.responsibility.split())}\n"
                   f"  functions: {', '.join(b.functions[:3])}\n"
                   f"  settings: {', '.join(b.settings) or 'none'}; exits: {'; '.join(b.exit_conditions[:3])}")
    return "\n".join(out)


def pair_inputs(pair: Pair, corpus: Path, workspace: Path, handbook: Handbook | None,
                harness_evidence: bool) -> dict[str, Any]:
    """The analyst's inputs for one pair (template variables; all JSON-able)."""
    mode = "full" if harness_evidence else "trajectory"
    ok_dir, bad_dir = corpus / pair.success.trial, corpus / pair.failure.trial
    ok, bad = TrialView(ok_dir, mode), TrialView(bad_dir, mode)
    d_ok, d_bad = digest(ok_dir, mode), digest(bad_dir, mode)
    at = divergence(ok, bad)
    ids = behaviours_involved([d_ok, d_bad], [ok, bad], at, handbook if harness_evidence else None)
    return {
        "task": pair.task,
        "instruction": ok.instruction or bad.instruction,
        "success": pair.success.trial,
        "failure": pair.failure.trial,
        "success_path": _rel(ok_dir, workspace),
        "failure_path": _rel(bad_dir, workspace),
        "success_digest": render_digest(d_ok, behaviours=harness_evidence),
        "failure_digest": render_digest(d_bad, behaviours=harness_evidence),
        "divergence_episode": at,
        "region": region_text(ok, bad, at),
        "harness_evidence": harness_evidence,
        "handbook": handbook_entries(handbook, ids) if (harness_evidence and handbook is not None) else "",
        "behaviour_ids": ids if harness_evidence else [],
        "problems": [],
        "previous": "",
    }


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)
