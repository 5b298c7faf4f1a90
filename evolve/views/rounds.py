"""What ``rise evolve`` did in each round, for people: findings, groups, research references, proposals,
implementations, graded predictions, cost per role and the role transcripts. ``rise show`` prints the round of a
version, ``rise report`` lists every round, and the loop writes ``rounds/rNN/evolve.md`` after each round."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel, Field

from evolve.experiment.budget import role_spend
from evolve.experiment.store import Experiment
from evolve.round.transfer import transfer_of_round

TEMPLATE = Path(__file__).with_name("rounds.md.j2")


class RoundRecord(BaseModel):
    round: int
    incumbent: str = ""
    finished: bool = False
    adopted: str | None = None
    reason: str = ""
    analysis: dict[str, Any] = Field(default_factory=dict)
    research: list[dict[str, Any]] = Field(default_factory=list)
    proposals: list[dict[str, Any]] = Field(default_factory=list)
    implementations: list[dict[str, Any]] = Field(default_factory=list)
    grades: list[str] = Field(default_factory=list)
    cost: dict[str, float] = Field(default_factory=dict)
    transcripts: list[str] = Field(default_factory=list)
    transfer: dict[str, Any] | None = None  # evolve.round.transfer's paired table, after an adoption


def _analysis(folder: Path) -> dict[str, Any]:
    path = folder / "analysis" / "analysis.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    findings = [f"{f['id']} ({f['task']}, {f['failure']}): {f['answer']['revised_wish']['action']}"
                for f in data.get("findings", [])]
    groups = [{k: g.get(k) for k in ("rank", "name", "wish", "status", "tasks", "reason")}
              for g in data.get("groups", [])]
    pairs = data.get("pairs", {})
    return {"flipping": pairs.get("flipping", []), "pairs": len(pairs.get("pairs", [])), "findings": findings,
            "groups": groups}


def round_record(exp: Experiment, n: int) -> RoundRecord:
    """Everything the ledger and the round's folder hold about evolve round ``n``."""
    led = exp.ledger
    folder = exp.root / "rounds" / f"r{n:02d}"
    start = led.find("round_start", key=f"r{n:02d}:start")
    end = led.find("round_end", key=f"r{n:02d}:end")
    rec = RoundRecord(round=n, incumbent=start[0].incumbent if start else "", finished=bool(end),
                      adopted=end[0].adopted if end else None, reason=end[0].reason if end else "",
                      analysis=_analysis(folder))
    for e in led.find("research", round=n):
        refs = [f"{c['reference'].get('framework', '')} {c['reference'].get('path', '')}: {c['note']['how']}"
                for c in e.outcome.get("references", [])]
        statement = e.outcome.get("statement", "")
        if (source := e.role_call.get("reused_from")):
            statement += f" (the answer of {source}: the same inputs, no second call)"
        rec.research.append({"group": e.group, "statement": statement, "references": refs})
    for e in led.find("proposal", round=n):
        p = e.proposal
        rec.proposals.append({"slug": e.slug, "status": e.status, "summary": p.get("summary", ""),
                              "tier": p.get("tier", "code"), "settings": p.get("settings", {}),
                              "templates": p.get("templates", []),
                              "predicted_fixes": p.get("predicted_fixes", []),
                              "tasks_at_risk": p.get("tasks_at_risk", []), "revisit_of": p.get("revisit_of"),
                              "reason": e.reason})
    tiers = {e.slug: e.proposal.get("tier", "code") for e in led.find("proposal", round=n)}
    rec.implementations = [{"slug": e.slug, "status": e.status, "branch": e.branch, "commit": e.commit,
                            "reason": e.reason, "tier": e.report.get("tier") or tiers.get(e.slug, "code"),
                            "changes": e.report.get("changes", {})} for e in led.find("implementation", round=n)]
    rec.grades = [e.grade.get("line", "") for e in led.find("grade", round=n)]
    rec.transfer = transfer_of_round(exp, n)
    if folder.is_dir():
        rec.cost = role_spend(folder).by_role
        rec.transcripts = sorted(str(p.relative_to(exp.root)) for p in folder.rglob("transcripts/*.jsonl"))
    return rec


def evolve_rounds(exp: Experiment) -> list[int]:
    """Round numbers in which ``rise evolve`` recorded anything."""
    kinds = ("research", "proposal", "implementation", "grade", "round_end")
    return sorted({e.round for e in exp.ledger.events if e.kind in kinds})


def render_round(rec: RoundRecord) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    return env.get_template(TEMPLATE.name).render(r=rec)


def write_round_summary(exp: Experiment, n: int) -> Path:
    """``rounds/rNN/evolve.md`` (rewritten whole)."""
    path = exp.root / "rounds" / f"r{n:02d}" / "evolve.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_round(round_record(exp, n)), encoding="utf-8")
    tmp.replace(path)
    return path
