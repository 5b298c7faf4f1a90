"""The tables of a night's compact record (:mod:`evolve.views.night`): one row per trial, the time per stage and
each decision with its numbers, read from the ledger and the experiment's folders (reads only; the stops and
resumes are :mod:`evolve.views.stretches`).

- **Trials**: every cell of every grid folder (:func:`evolve.views.resume.grids`), read by
  :func:`trials.job.load_job`; its arm, version and commit from the ledger's ``trial_done`` event that booked it
  (a trial not booked yet, or a check's scratch trial, names its folder instead).
- **Stages**: the ledger's events by round and stage (:data:`evolve.views.resume.STAGE_OF`; a trial or an
  evaluation: its purpose). An event is booked when its unit ends; the unit's start is the trial's
  ``started_at`` (``result.json``) or the event's time less its role call's seconds; other units are instants.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evolve.experiment.identity import candidate_of_commits, is_final
from evolve.experiment.store import Experiment
from evolve.views.power import trials_saved
from evolve.views.resume import STAGE_OF, grids
from evolve.views.show import decision_policy, load_grid, locate_evaluation
from trials.results import TrialResult

TRIAL_FIELDS = ["grid", "arm", "version", "commit", "task", "repetition", "status", "failure_class", "infra_cause",
                "reward", "episodes", "agent_s", "total_s", "started_at", "finished_at", "load_per_cpu", "busy",
                "steal", "model_calls", "prefill_tok_s", "decode_tok_s", "cache_hit_ratio", "tokens_in",
                "tokens_out", "usd", "booked"]


def _labels(exp: Experiment) -> dict[str, str]:
    """commit -> vN (an adopted version) or the candidate's branch, for every commit a candidate has had."""
    out = {}
    branches = {e.key.removesuffix(":created"): e.branch for e in exp.ledger.find("candidate_created")}
    for commit, cid in candidate_of_commits(exp.ledger.events).items():
        out[commit] = branches.get(cid, cid)
    for v in exp.versions():
        out[exp.commit_of(v)] = v
    return out


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def trial_row(res: TrialResult, grid: str, booking: Any | None, labels: dict[str, str]) -> dict[str, Any]:
    """One trial's line (:data:`TRIAL_FIELDS`)."""
    inf, load, gen = res.inference, res.machine_load, res.cost.generator
    commit = booking.commit if booking is not None else ""
    return {
        "grid": grid, "arm": booking.purpose if booking is not None else Path(grid).name,
        "version": labels.get(commit, commit[:10]), "commit": commit[:10], "task": res.task_name,
        "repetition": res.repetition, "status": res.status, "failure_class": res.failure_class,
        "infra_cause": res.infra_cause, "reward": res.reward, "episodes": res.episodes,
        "agent_s": _round(res.durations.agent, 1), "total_s": _round(res.durations.total, 1),
        "started_at": res.started_at, "finished_at": res.finished_at,
        "load_per_cpu": _round(load.load_per_cpu) if load else None, "busy": _round(load.busy) if load else None,
        "steal": _round(load.steal) if load else None, "model_calls": inf.calls if inf else None,
        "prefill_tok_s": _round(inf.prefill_tok_s, 1) if inf else None,
        "decode_tok_s": _round(inf.decode_tok_s, 1) if inf else None,
        "cache_hit_ratio": _round(inf.cache_hit_ratio) if inf else None,
        "tokens_in": gen.input_tokens, "tokens_out": gen.output_tokens, "usd": _round(res.cost.cost_usd, 6),
        "booked": booking is not None,
    }


def trial_rows(exp: Experiment) -> list[dict[str, Any]]:
    """One line per trial of every grid folder, grid by grid (folder order), task by task."""
    from trials.job import load_job

    booked = {(exp.root / e.trial_dir).resolve(): e for e in exp.ledger.find("trial_done")}  # the latest booking
    labels = _labels(exp)
    rows = []
    for g in sorted(grids(exp)[0], key=lambda g: g.job_dir):
        job = exp.root / g.job_dir
        try:
            _, results, _ = load_job(job)
        except (OSError, ValueError):
            continue
        for res in sorted(results, key=lambda r: (r.task_name, r.repetition)):
            rows.append(trial_row(res, g.job_dir, booked.get((job / res.trial_name).resolve()), labels))
    return rows


# ------------------------------------------------------------------------------------------------ stages
@dataclass
class StageRow:
    round: str  # r01, or "before r01": events before that round's start (a reference corpus comes first)
    stage: str
    start: str
    end: str
    units: int = 0
    unit_s: float = 0.0  # the units' own time, summed (trials run at once each count theirs)

    @property
    def span_s(self) -> float:
        return max(0.0, ts_of(self.end) - ts_of(self.start))


def ts_of(text: str | None) -> float:
    try:
        return datetime.fromisoformat(text).timestamp() if text else 0.0
    except ValueError:
        return 0.0


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _span(exp: Experiment, e: Any) -> tuple[float, float]:
    """When the unit an event books started and ended (see the module docstring)."""
    end = ts_of(e.ts)
    if e.kind == "trial_done":
        try:
            res = TrialResult.load(exp.root / e.trial_dir / "result.json")
            if res.started_at and res.finished_at:
                return ts_of(res.started_at), ts_of(res.finished_at)
        except (OSError, ValueError):
            pass
    seconds = (getattr(e, "role_call", None) or {}).get("seconds")
    return (end - float(seconds), end) if isinstance(seconds, (int, float)) else (end, end)


def stage_rows(exp: Experiment) -> list[StageRow]:
    """Per round and stage, in the order each first appears: its first start and last end, units, unit time."""
    rows: dict[tuple[str, str], StageRow] = {}
    last_round, open_round = 0, False
    for e in exp.ledger.events:
        if e.kind == "round_start":
            last_round, open_round = e.round, True
        rnd = getattr(e, "round", None) or (last_round if open_round else None)
        label = f"r{rnd:02d}" if rnd else f"before r{last_round + 1:02d}"
        stage = getattr(e, "purpose", None) or STAGE_OF.get(e.kind, e.kind)
        start, end = _span(exp, e)
        row = rows.get((label, stage))
        if row is None:
            row = rows[(label, stage)] = StageRow(label, stage, iso(start), iso(end))
        row.start, row.end = iso(min(start, ts_of(row.start))), iso(max(end, ts_of(row.end)))
        row.units += 1
        row.unit_s += end - start
        if e.kind == "round_end":
            open_round = False
    return list(rows.values())


# --------------------------------------------------------------------------------------------- decisions
def decision_records(exp: Experiment) -> list[dict[str, Any]]:
    """Each adoption and rejection in ledger order: the candidate, its outcome, reason and numbers (the decision
    as booked), the policy's line (:func:`evolve.views.show.decision_policy`) and early stopping's saving."""
    ids = candidate_of_commits(exp.ledger.events)
    out = []
    for e in exp.ledger.events:
        if e.kind not in ("adoption", "rejection"):
            continue
        cid = ids.get(e.commit, "")
        blocked = e.kind == "rejection" and bool(e.decision.get("blocked"))
        outcome = f"adopted as {e.version}" if e.kind == "adoption" else "blocked" if blocked else "rejected"
        rnd, _, slug = cid.partition(":")
        policy = ""
        if not blocked:
            grid = load_grid(locate_evaluation(exp, e.commit, int(rnd[1:]) if rnd else None, slug or None), cid)
            policy = decision_policy(exp, e.decision, grid)
        saved = trials_saved(exp, e.commit)
        out.append({"ts": e.ts, "key": e.key, "candidate": cid, "commit": e.commit, "outcome": outcome,
                    "final": e.kind == "adoption" or is_final(e),
                    "reason": getattr(e, "reason", "") or str(e.decision.get("reason", "")), "policy": policy,
                    "trials_saved": saved.line() if saved else "", "decision": e.decision})
    return out


def decision_lines(records: list[dict[str, Any]]) -> list[str]:
    """The decisions as Markdown: a heading each, its reason, policy, saving and every number it booked."""
    from evolve.round.control_arm import arm_lines
    from validate.coupled import agreement_lines
    from validate.load_check import load_lines

    out = ["# Decisions", ""]
    if not records:
        out.append("No decision booked yet.")
    for d in records:
        out += [f"## {d['candidate'] or d['commit'][:10]}: {d['outcome']} ({d['ts'][:19]} UTC)", "",
                f"- reason: {d['reason'] or '—'}", f"- commit: {d['commit'][:10]}, final: {d['final']}"]
        out += [f"- {line}" for line in (d["policy"], d["trials_saved"]) if line]
        numbers = d["decision"]
        for key in sorted(numbers):
            if key in ("reason", "control_arm", "load") or isinstance(numbers[key], dict):
                continue
            value = numbers[key]
            out.append(f"- {key} = {', '.join(map(str, value)) or '—' if isinstance(value, list) else value}")
        out += [f"- {line}" for line in arm_lines(numbers.get("control_arm")) + load_lines(numbers.get("load"))
                + agreement_lines(numbers.get("agreement"))]
        out.append("")
    return out
