"""Stages 2 and 3 of a round: the checks (smoke, then contracts with the repair hook; a repaired worktree is
committed and smoke-checked again) and the screening (the candidate on the tasks its proposal concerns, r=1:
the mechanism must show in the spans)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validate.contracts import changed_contracts, mechanism_spans
from validate.evaluate import kill_point, screen

from .candidates import COMMIT_MARK, boundaries_added
from .ledger import CheckResult, Screening
from .round_model import (
    CandidateInput,
    CandidateReport,
    ControllerError,
    LedgerBook,
    Stop,
    charged_cells,
    why,
)


@dataclass
class Checks:
    """The check stage's two functions (real ones by default; tests may pass stand-ins).

    ``smoke(dir, out_dir) -> (passed, details)``; ``contracts(candidate, incumbent, frozen_path, repair, max_repairs,
    out_dir) -> (passed, details)`` (async)."""

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
    """The check and screening stages of :class:`evolve.controller.Controller` (a mixin: it uses the
    controller's ``exp``, ``led``, ``checks``, ``repair``, ``version_dir``, ``plan`` and ``reject``)."""

    async def run_checks(self, incumbent: str, commit: str, wt: Path) -> tuple[str, Path]:
        for attempt in range(1, 2 * self.max_repairs + 3):  # smoke and contract repairs, then the last checks
            smoke = self.led.find("check_result", key=f"{commit}:smoke")
            if not smoke:
                passed, details = await self.checks.smoke(wt, self.exp.root / "checks" / commit[:12] / "smoke")
                smoke = [self.led.append(CheckResult(key=f"{commit}:smoke", commit=commit, stage="smoke",
                                                     passed=passed, details=details, attempt=attempt))]
                kill_point("smoke")
            if not smoke[0].passed:
                repaired = await self._repair_smoke(commit, wt, smoke[0], attempt)
                if repaired is not None:
                    commit = repaired
                    continue  # smoke again on the repaired commit
                self.reject(commit, CandidateReport(""), f"smoke check failed: {why(smoke[0].details)}",
                            {"stage": "smoke", "details": smoke[0].details})
            ev = self.led.find("check_result", key=f"{commit}:contracts")
            if not ev:
                out = self.exp.root / "checks" / commit[:12] / "contracts"
                changed = self.exp.repo.git.diff("--name-only", self.exp.commit_of(incumbent), commit).split()
                if not any(f.endswith(".py") or f.startswith("contracts/") for f in changed):
                    # settings or prompt text only (the cheaper tiers): no new code, so no contract to run
                    passed, details = True, {"summary": f"no code or contract changed ({', '.join(changed)}): "
                                                        "no contract to run", "skipped": True}
                else:
                    passed, details = await self.checks.contracts(wt, self.version_dir(incumbent),
                                                                  self.exp.root / "contracts_frozen.json",
                                                                  self.repair, self.max_repairs, out)
                new = commit if self.repair is None else \
                    self.exp.commit_worktree(wt, f"{COMMIT_MARK} repair of {commit[:12]} after contracts")
                if new != commit:  # the repair loop changed the code: the last attempt ran on `new`
                    ev = [self.led.append(CheckResult(
                        key=f"{commit}:contracts", commit=commit, stage="contracts", passed=False,
                        details={**details, "repaired_to": new, "repaired_passed": passed}, attempt=attempt))]
                    kill_point("contracts_repair")  # between the two events: a resume books `new`'s from this one
                else:
                    ev = [self.led.append(CheckResult(key=f"{commit}:contracts", commit=commit, stage="contracts",
                                                      passed=passed, details=details, attempt=attempt))]
                    kill_point("contracts")
            if ev[0].details.get("repaired_to"):
                commit = self.current_commit(commit)
                continue  # smoke again on the repaired commit
            if not ev[0].passed:
                self.reject(commit, CandidateReport(""), f"contracts failed: {why(ev[0].details)}",
                            {"stage": "contracts", "details": ev[0].details})
            return commit, wt
        raise ControllerError(f"{commit[:12]}: checks did not settle after {self.max_repairs} repairs")

    async def _repair_smoke(self, commit: str, wt: Path, smoke: Any, attempt: int) -> str | None:
        """A failed smoke check goes to the repair hook (the implementer) like failed contracts do, within the
        same bound of ``max_repairs`` attempts; the repaired commit, or None (no hook, bound reached, nothing
        changed). Keyed ``C:smoke-repair`` so a resume after the repair goes straight on to the repaired commit."""
        done = self.led.find("check_result", key=f"{commit}:smoke-repair")
        if done:
            return done[0].details.get("repaired_to")
        if self.repair is None or attempt > self.max_repairs:
            return None
        failures = [str(f) for f in smoke.details.get("failures") or []] or [why(smoke.details)]
        failures = [f"smoke check (one scripted trial of the harness) failed: {f}" for f in failures]
        changed = await asyncio.to_thread(self.repair, wt, failures)
        new = self.exp.commit_worktree(wt, f"{COMMIT_MARK} repair of {commit[:12]} after the smoke check") \
            if changed else commit
        self.led.append(CheckResult(key=f"{commit}:smoke-repair", commit=commit, stage="smoke", passed=False,
                                    details={**smoke.details, "repaired_to": new if new != commit else None},
                                    attempt=attempt))
        kill_point("smoke_repair")
        return new if new != commit else None

    # -- stage 3: screening ---------------------------------------------------------------------------------
    async def run_screening(self, round_no: int, cand: CandidateInput, commit: str, wt: Path,
                            incumbent: str, baseline: dict | None = None) -> None:
        key = f"{commit}:screening"
        ev = self.led.find("screening", key=key)
        if not ev:
            dev = self.dev_tasks()
            sealed = set(self.cfg.tasks.heldout)
            tasks = [t for t in cand.proposal.tasks if t not in sealed] or dev
            boundaries = cand.proposal.boundaries or self._contract_spans(wt, incumbent) or \
                boundaries_added(wt, self.version_dir(incumbent))
            job = self.exp.root / "rounds" / f"r{round_no:02d}" / cand.slug / "screening"
            book = LedgerBook(self.led, self.exp.root, commit, key, "screening")
            res = await screen(self.plan("screening", wt, tasks, 1, job), book, boundaries,
                               env_factory=self.env_factory, progress=self.progress,
                               incumbent_job=self.baseline_dir)
            if getattr(cand.proposal, "tier", "code") == "settings":  # no code of its own: its values must show
                from validate.settings_screen import SettingsScreening

                res = SettingsScreening.of(res, dict(getattr(cand.proposal, "settings", {}) or {}))
            details = res.details()
            charged = charged_cells(self.led, commit, "screening", res.outcome.results, baseline or {},
                                    self.infra_limit) if res.inconclusive else {}
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
            ev = [self.led.append(Screening(key=key, commit=commit, passed=res.passed,
                                            mechanism_ran=res.mechanism_ran, details=details))]
            kill_point("screening")
        if not ev[0].passed:
            self.reject(commit, CandidateReport(""), f"screening: the mechanism did not run "
                        f"({ev[0].details.get('reason')})", {"stage": "screening", "details": ev[0].details})

    def _contract_spans(self, wt: Path, incumbent: str) -> list[str]:
        changed = changed_contracts(wt, self.version_dir(incumbent))
        return sorted({s for spans in mechanism_spans(wt, changed).values() for s in spans}) if changed else []

