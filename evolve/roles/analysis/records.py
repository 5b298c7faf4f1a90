"""What an analysis leaves in the round's folder: ``analysis.json`` (everything, for the next steps) and
``summary.md`` (for a person in the morning), plus the text ``rise analyze`` prints.

Cost per role is summed from the ledger events of this analysis (every call, sent-back and failed ones
included), so a resumed analysis reports what the whole analysis cost, not only its last part.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel, Field

from evolve.roles.analysis.models import Finding, Group, PairSet
from trials.harness_api import Cost

TEMPLATE = Path(__file__).with_name("summary.md.j2")


class AnalysisResult(BaseModel):
    version: str
    commit: str
    harness_evidence: bool = True
    pairs: PairSet
    findings: list[Finding] = Field(default_factory=list)
    groups: list[Group] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list, description="this analysis's ledger events")

    def outcomes(self) -> list[dict[str, Any]]:
        """One row per finding event that did not give a valid finding: sent back, dropped, failed."""
        return [{"pair": e["pair"], "status": e["status"], "reason": e["reason"]}
                for e in self.events if e.get("kind") == "finding" and e.get("status") != "valid"]

    def costs(self) -> dict[str, Cost]:
        """What each role's calls of this analysis spent (the platform's one cost record)."""
        out: dict[str, Cost] = {}
        for e in self.events:
            call = e.get("role_call") or {}
            if not call.get("role") or call.get("skipped"):
                continue
            usage = call.get("usage") or {}
            out.setdefault(call["role"], Cost()).add(
                int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0),
                failed=1 if call.get("error") else 0, usd=float(call.get("cost") or 0.0),
                seconds=float(call.get("seconds") or 0.0))
        return out


def write_records(result: AnalysisResult, out: Path) -> tuple[Path, Path]:
    """``analysis.json`` and ``summary.md`` under ``out`` (rewritten whole, atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    data = {**result.model_dump(mode="json"), "outcomes": result.outcomes(),
            "costs": {k: v.model_dump() for k, v in result.costs().items()}}
    js, md = out / "analysis.json", out / "summary.md"
    for path, text in ((js, json.dumps(data, indent=1, ensure_ascii=False)), (md, render_summary(result))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return js, md


def render_summary(result: AnalysisResult) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    by_id = {f.id: f for f in result.findings}
    return env.get_template(TEMPLATE.name).render(r=result, by_id=by_id, outcomes=result.outcomes(),
                                                  costs=result.costs())


def render_groups(result: AnalysisResult) -> str:
    """The ranked groups with their member findings, as ``rise analyze`` prints them."""
    by_id = {f.id: f for f in result.findings}
    p = result.pairs
    lines = [f"{result.version} ({result.commit[:12]}): {len(p.flipping)} flipping task(s), {len(p.pairs)} pair(s), "
             f"{len(result.findings)} valid finding(s), {len(result.groups)} group(s)"
             + ("" if result.harness_evidence else "  [ablation: no harness evidence]")]
    for g in result.groups:
        head = f"#{g.rank}" if g.rank else g.status.upper()
        lines.append(f"{head} {g.name}: {g.wish}")
        lines.append(f"    tasks {', '.join(g.tasks)}; failing runs {len(g.failing_runs)}; findings {len(g.members)}"
                     + (f"; {g.reason}" if g.status != "ranked" and g.reason else ""))
        for m in g.members:
            f = by_id.get(m)
            if f is not None:
                w = f.answer.revised_wish
                lines.append(f"    - {f.id} {f.failure} vs {f.success}: {w.action} (when {w.condition})")
    for o in result.outcomes():
        lines.append(f"  {o['status']}: pair {o['pair']}: {o['reason'].splitlines()[0] if o['reason'] else ''}")
    for e in result.events:  # valid findings whose references were corrected (evidence.attribute_spans)
        if e.get("kind") == "finding" and e.get("status") == "valid" and e.get("reason"):
            lines += [f"  corrected: pair {e['pair']}: {note}" for note in e["reason"].splitlines()]
    for role, c in sorted(result.costs().items()):
        lines.append(f"  cost {role}: {c.calls} call(s), ${c.usd:.4f}, {c.input_tokens}+{c.output_tokens} tokens, "
                     f"{c.seconds:.1f} s")
    return "\n".join(lines)
