"""Did anything get paid for twice? ``rise audit NAME`` reads an experiment after crashes and resumes and counts,
from the ledger and the role transcripts (reads only, locks nothing):

- ledger events, and any key booked twice;
- trials: finished (non-⊥) trials booked twice for one cell (commit, purpose, task, rep), ⊥ attempts, booked
  trials whose folder has no ``result.json``, and finished trial folders the ledger never booked (work a resume
  would redo);
- role calls (one JSONL transcript each): finished, failed, and interrupted (no ``end`` line: a call cut off by a
  kill, which the resume makes again), and any call that *finished* twice with the same role and inputs;
- repairs: the ``repair`` events (by stage, and those that changed nothing) and the implementer's repair calls
  (finished, interrupted); an implementer call (implementation or repair) that finished but that no
  ``implementation`` or ``repair`` event books was paid outside the books.

A kill -9 may cost the unit in flight (an interrupted call, a moved-aside trial attempt); it must never cost a
finished one again. ``problems`` lists every way this experiment broke that rule; empty means clean.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from evolve.experiment.store import Experiment
from evolve.experiment.trial_scan import trial_folders
from evolve.roles.runtime.transcript import read_transcript


@dataclass
class Audit:
    events: int = 0
    trials: int = 0
    infra_attempts: int = 0
    moved_aside: int = 0  # attempts cut off by a kill (or ⊥), renamed <trial>.attempt-N before their rerun
    moved: list[Path] = field(default_factory=list)  # those attempts' folders
    interrupted: list[Path] = field(default_factory=list)  # transcripts of role calls a kill cut off (no end line)
    calls: Counter = field(default_factory=Counter)  # (role, status) -> count; status ok, a failure kind, interrupted
    repairs: Counter = field(default_factory=Counter)  # booked repairs: stage -> count, "unchanged" -> count
    repair_calls: Counter = field(default_factory=Counter)  # the implementer's repair calls: status -> count
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        trials = f"{self.trials} finished, {self.infra_attempts} ⊥ attempts, {self.moved_aside} attempts moved aside"
        out = [f"ledger: {self.events} events", f"trials: {trials}"]
        by_role: dict[str, list[str]] = defaultdict(list)
        for (role, status), n in sorted(self.calls.items()):
            by_role[role].append(f"{n} {status}")
        out += [f"role calls: {role}: {', '.join(parts)}" for role, parts in sorted(by_role.items())]
        booked = sum(n for k, n in self.repairs.items() if k != "unchanged")
        stages = ", ".join(f"{k} {n}" for k, n in sorted(self.repairs.items()) if k != "unchanged")
        calls = ", ".join(f"{n} {status}" for status, n in sorted(self.repair_calls.items())) or "none"
        out.append(f"repairs: {booked} booked" + (f" ({stages}; {self.repairs['unchanged']} changed nothing)"
                                                  if booked else "") + f"; repair calls: {calls}")
        out += [f"PROBLEM: {p}" for p in self.problems] or ["nothing finished was done twice"]
        return out


def _call_digest(rows: list[dict]) -> str | None:
    start = next((r for r in rows if r.get("kind") == "start"), None)
    if start is None:
        return None
    system = next((r.get("text", "") for r in rows if r.get("kind") == "system"), "")
    blob = json.dumps([start.get("role"), start.get("inputs"), system], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _audit_trials(exp: Experiment, a: Audit) -> None:
    cells: Counter = Counter()
    booked: set[Path] = set()
    for e in exp.ledger.find("trial_done"):
        tdir = (exp.root / e.trial_dir).resolve()
        booked.add(tdir)
        if e.status == "infra":
            a.infra_attempts += 1
            continue
        a.trials += 1
        grid = e.key[: e.key.rfind(f":{e.task}:{e.rep}")]  # the booking prefix: one grid (control: per round)
        cells[(e.commit[:12], e.purpose, e.task, e.rep, grid)] += 1
        if not (tdir / "result.json").is_file():
            a.problems.append(f"trial {e.key}: booked, but {tdir} has no result.json")
    for cell, n in cells.items():
        if n > 1:
            a.problems.append(f"trial {'/'.join(map(str, cell[:4]))} finished {n} times (grid {cell[4]})")
    jobs = set()
    for tdir in trial_folders(exp):
        rel = tdir.relative_to(exp.root)
        if rel.parts[0] == "checks":  # the checks' scratch trials are no grid's cells
            continue
        jobs.add(tdir.parent)
        finished = (tdir / "result.json").is_file() and ".attempt-" not in tdir.name
        if finished and tdir.resolve() not in booked:
            a.problems.append(f"trial folder {rel} finished but never booked")
    # a cut-off attempt may hold no result at all, so attempts are counted by name beside their trials
    a.moved = sorted(d for job in jobs for d in job.glob("*.attempt-*") if d.is_dir())
    a.moved_aside = len(a.moved)


def _booked_transcripts(exp: Experiment) -> set[str]:
    """File names of the implementer transcripts that an implementation or repair event books."""
    out = set()
    for e in exp.ledger.events:
        if e.kind in ("implementation", "repair") and (path := (e.role_call or {}).get("transcript")):
            out.add(Path(path).name)
    return out


def _audit_calls(exp: Experiment, a: Audit) -> None:
    finished: dict[str, list[str]] = defaultdict(list)
    booked = _booked_transcripts(exp)
    for path in sorted((exp.root / "rounds").rglob("transcripts/*.jsonl")):  # where every role call writes
        try:
            rows = read_transcript(path)
        except ValueError as exc:
            a.problems.append(str(exc))
            continue
        end = next((r for r in reversed(rows) if r.get("kind") == "end"), None)
        role = next((r.get("role") for r in rows if r.get("kind") == "start"), None) or path.name.split("-")[0]
        status = "interrupted" if end is None else str(end.get("status"))
        if end is None:
            a.interrupted.append(path)
        a.calls[(role, status)] += 1
        if role == "implementer":
            start = next((r for r in rows if r.get("kind") == "start"), {})
            if (start.get("inputs") or {}).get("failures"):  # a repair: the implementer given check failures
                a.repair_calls[status] += 1
            if end is not None and path.name not in booked:
                a.problems.append(f"implementer call {path.relative_to(exp.root)} finished ({status}) but no "
                                  f"implementation or repair event books it: a paid call outside the books")
        digest = _call_digest(rows)
        if status == "ok" and digest:
            finished[digest].append(str(path.relative_to(exp.root)))
    for paths in finished.values():
        if len(paths) > 1:
            a.problems.append(f"one role call (same role and inputs) finished {len(paths)} times: {', '.join(paths)}")


def audit(exp: Experiment) -> Audit:
    a = Audit()
    events = exp.ledger.events
    a.events = len(events)
    for key, n in Counter(e.key for e in events).items():
        if n > 1:
            a.problems.append(f"ledger key {key!r} booked {n} times")
    for e in exp.ledger.find("repair"):
        a.repairs[e.stage] += 1
        a.repairs["unchanged"] += e.repaired_to is None
    _audit_trials(exp, a)
    _audit_calls(exp, a)
    return a
