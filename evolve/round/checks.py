"""Stages 2 and 3 of a round: the checks (the overfitting guard on every commit, smoke, then contracts; a failed
check goes to the repair hook, one booked unit per repair, and the repaired commit is guarded and checked again
from the smoke check) and the screening (the candidate on the tasks its proposal concerns, r=1: the mechanism must
show in the spans)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.experiment.identity import candidate_of_commits, repairs_of
from evolve.experiment.ledger import CheckResult, RepairEvent, Screening
from evolve.experiment.units import write_unit
from evolve.round.candidates import COMMIT_MARK, boundaries_added, reset_worktree
from evolve.round.guard import OverfitGuard
from evolve.round.model import (
    CandidateInput,
    CandidateReport,
    LedgerBook,
    Stop,
    charged_cells,
    why,
)
from validate.contracts import changed_contracts, mechanism_spans
from validate.evaluate import kill_point, screen


@dataclass
class Checks:
    """The check stage's two functions (real ones by default; tests may pass stand-ins).

    ``smoke(dir, out_dir) -> (passed, details)``; ``contracts(candidate, incumbent, frozen_path, repair, max_repairs,
    out_dir) -> (passed, details)`` (async). The controller passes no repair hook (None, 0) to the contracts: it
    makes each repair itself, as a booked unit (:meth:`CheckStages.repair_unit`)."""

    smoke: Any = None
    contracts: Any = None

    @classmethod
    def default(cls) -> Checks:
        return cls(_real_smoke, _real_contracts)


async def _real_smoke(harness_dir: Path, out_dir: Path) -> tuple[bool, dict[str, Any]]:
    from validate.smoke import asmoke_check

    res = await asmoke_check(harness_dir, out_dir)
    return res.passed, {"summary": res.summary(), "failures": res.failures(), "trial_dir": res.trial_dir,
                        "out_dir": str(out_dir)}


async def _real_contracts(candidate: Path, incumbent: Path, frozen: Path, repair: Any, max_repairs: int,
                          out_dir: Path) -> tuple[bool, dict[str, Any]]:
    from validate.contracts import arun_contracts

    rep = await arun_contracts(candidate, incumbent, frozen, repair=repair, max_repairs=max_repairs, out_dir=out_dir)
    return rep.passed, {"summary": rep.summary(), "mechanisms": rep.mechanisms, "repairs": rep.repairs,
                        "failures": [str(f) for f in rep.failures][:50], "out_dir": str(out_dir)}


class CheckStages:
    """The check and screening stages of :class:`evolve.round.controller.Controller` (a collaborator: it uses the
    controller's ``exp``, ``led``, ``checks``, ``repair``, ``max_repairs``, ``version_dir``, ``plan`` and ``reject``).

    ``repair(worktree, failures)`` returns True when it changed the worktree, or a dict ``{"changed": bool,
    "role_call": {...}}`` (the implementer's hook: the call's transcript and cost go into the repair event)."""

    def __init__(self, ctl: Any):
        self.ctl = ctl  # the round's controller: the experiment, the ledger, grids and the other stages

    async def run_checks(self, incumbent: str, commit: str, wt: Path) -> tuple[str, Path]:
        """Smoke, then contracts; a failed check goes to the repair hook (:meth:`repair_unit`) and the repaired
        commit is checked from the start. The candidate's commit after its checks, or a final Rejection."""
        while True:
            self.guard_commit(incumbent, commit)  # the implementation, then each repair: what is evaluated
            ev = self.ctl.led.find("check_result", key=f"{commit}:smoke")
            if not ev:
                passed, details = await self.ctl.checks.smoke(wt, self.ctl.exp.root / "checks" / commit[:12] / "smoke")
                ev = [self.ctl.led.append(CheckResult(key=f"{commit}:smoke", commit=commit, stage="smoke",
                                                  passed=passed, details=details))]
                kill_point("smoke")
            if ev[0].passed:
                ev = self.ctl.led.find("check_result", key=f"{commit}:contracts")
                if not ev:  # no repair hook inside: each repair is a unit of its own, booked here
                    out = self.ctl.exp.root / "checks" / commit[:12] / "contracts"
                    changed = self.ctl.exp.repo.git.diff("--name-only", self.ctl.exp.commit_of(incumbent), commit).split()
                    if not any(f.endswith(".py") or f.startswith("contracts/") for f in changed):
                        # settings or prompt text only (the cheaper tiers): no new code, so no contract to run
                        passed, details = True, {"summary": f"no code or contract changed ({', '.join(changed)}): "
                                                            "no contract to run", "skipped": True}
                    else:
                        passed, details = await self.ctl.checks.contracts(wt, self.ctl.version_dir(incumbent),
                                                                      self.ctl.exp.root / "contracts_frozen.json", None,
                                                                      0, out)
                    ev = [self.ctl.led.append(CheckResult(key=f"{commit}:contracts", commit=commit, stage="contracts",
                                                      passed=passed, details=details))]
                    kill_point("contracts")
                if ev[0].passed:
                    return commit, wt
            new = await self.repair_unit(commit, wt, ev[0])
            if new is None:
                what = "smoke check failed" if ev[0].stage == "smoke" else "contracts failed"
                self.ctl.reject(commit, CandidateReport(""), f"{what}: {why(ev[0].details)}",
                            {"stage": ev[0].stage, "details": ev[0].details})
            commit = new

    def guard_commit(self, incumbent: str, commit: str) -> None:
        """The overfitting guard on everything ``commit`` adds to the incumbent: a commit quoting a development
        task (instruction, config, tests, solution) is rejected, booked like any rejection, before it runs."""
        guard = getattr(self, "_overfit_guard", None)
        if guard is None:
            guard = self.ctl._overfit_guard = OverfitGuard(self.ctl.tasks_dir, self.ctl.dev_tasks())
        verdict = guard.check_patch(self.ctl.exp.repo.git.diff(self.ctl.exp.commit_of(incumbent), commit))
        if verdict.refused:
            self.ctl.reject(commit, CandidateReport(""), verdict.reason(),
                        {"stage": "guard", "quotes": [q.model_dump() for q in verdict.quotes]})

    async def repair_unit(self, commit: str, wt: Path, check: Any) -> str | None:
        """One repair call on a failed check, a unit like any paid call: at most ``max_repairs`` per candidate
        (counted from the ledger, whatever commit each was booked under), reserved by the hook (``rise evolve``
        checks its budget first), its result saved beside the checks before the commit and the ``C:repair``
        event, so a kill after the call books that result instead of paying again, and a kill inside the call
        redoes it from the commit it repairs. The repaired commit, or None (no hook, bound reached, no change)."""
        if (done := self.ctl.led.find("repair", key=f"{commit}:repair")):
            return done[0].repaired_to
        candidate = candidate_of_commits(self.ctl.led.events).get(commit, commit)
        number = len(repairs_of(self.ctl.led.events, candidate)) + 1
        if self.ctl.repair is None or number > self.ctl.max_repairs:
            return None
        failures = [str(f) for f in check.details.get("failures") or []] or [why(check.details)]
        if check.stage == "smoke":
            failures = [f"smoke check (one scripted trial of the harness) failed: {f}" for f in failures]
        saved = self.ctl.exp.root / "checks" / commit[:12] / "repair.json"
        if saved.is_file():  # the call finished before a kill: its edits are in the worktree, book them
            result = json.loads(saved.read_text())
        else:
            reset_worktree(self.ctl.exp, wt, commit)  # a call a kill cut off left edits nobody booked
            out = await asyncio.to_thread(self.ctl.repair, wt, failures)
            result = out if isinstance(out, dict) else {"changed": bool(out)}
            write_unit(saved, result)
            kill_point("repair-result")
        new = self.ctl.exp.commit_worktree(wt, f"{COMMIT_MARK} repair {number} of {commit[:12]} after the {check.stage} "
                                           f"check") if result.get("changed") else commit
        if new == commit:
            reset_worktree(self.ctl.exp, wt, commit)  # a failed call may leave half an edit
        self.ctl.led.append(RepairEvent(key=f"{commit}:repair", commit=commit, candidate=candidate, stage=check.stage,
                                    number=number, repaired_to=new if new != commit else None, failures=failures,
                                    role_call=result.get("role_call") or {}))
        kill_point("repair")
        return new if new != commit else None

    # -- stage 3: screening ---------------------------------------------------------------------------------
    async def run_screening(self, round_no: int, cand: CandidateInput, commit: str, wt: Path,
                            incumbent: str, baseline: dict | None = None) -> None:
        key = f"{commit}:screening"
        ev = self.ctl.led.find("screening", key=key)
        if not ev:
            dev = self.ctl.dev_tasks()
            sealed = set(self.ctl.cfg.tasks.heldout)
            tasks = [t for t in cand.proposal.tasks if t not in sealed] or dev
            boundaries = cand.proposal.boundaries or self._contract_spans(wt, incumbent) or \
                boundaries_added(wt, self.ctl.version_dir(incumbent))
            job = self.ctl.exp.root / "rounds" / f"r{round_no:02d}" / cand.slug / "screening"
            book = LedgerBook(self.ctl.led, self.ctl.exp.root, commit, key, "screening")
            res = await screen(self.ctl.plan("screening", wt, tasks, 1, job), book, boundaries,
                               env_factory=self.ctl.env_factory, progress=self.ctl.progress,
                               incumbent_job=self.ctl.baseline_dir)
            if getattr(cand.proposal, "tier", "code") == "settings":  # no code of its own: its values must show
                from validate.settings_screen import SettingsScreening

                res = SettingsScreening.of(res, dict(getattr(cand.proposal, "settings", {}) or {}))
            details = res.details()
            charged = charged_cells(self.ctl.led, commit, "screening", res.outcome.results, baseline or {},
                                    self.ctl.infra_limit) if res.inconclusive else {}
            if charged and all(not r.is_infra or key in charged for key, r in res.outcome.results.items()):
                # the candidate keeps breaking its own sandbox where the incumbent runs: its failure, not ⊥
                details["inconclusive"] = False
                details["reason"] = ("the candidate's trials stayed ⊥ where the incumbent's are healthy ("
                                     + ", ".join(f"{t}#{k}: {n} attempts" for (t, k), n in sorted(charged.items()))
                                     + ")")
                details["charged_to_candidate"] = sorted(f"{t}#{k}" for t, k in charged)
            elif res.inconclusive:
                raise Stop("blocked", f"screening inconclusive: {details['reason']} and ⊥ trials "
                            f"({details['trials']}); rerun with --resume")
            ev = [self.ctl.led.append(Screening(key=key, commit=commit, passed=res.passed,
                                            mechanism_ran=res.mechanism_ran, details=details))]
            kill_point("screening")
        if not ev[0].passed:
            self.ctl.reject(commit, CandidateReport(""), f"screening: the mechanism did not run "
                        f"({ev[0].details.get('reason')})", {"stage": "screening", "details": ev[0].details})

    def _contract_spans(self, wt: Path, incumbent: str) -> list[str]:
        changed = changed_contracts(wt, self.ctl.version_dir(incumbent))
        return sorted({s for spans in mechanism_spans(wt, changed).values() for s in spans}) if changed else []

