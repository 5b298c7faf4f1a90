"""The round controller: candidate → checks → screening → evaluation → decision → publication, resumable.

``run_round(exp, round_no, candidates)`` takes each candidate (a patch file against the incumbent, or a branch or
commit of the harness repository) through

1. creation: branch ``cand/rNN-slug`` and its worktree from the incumbent, the patch applied, the switch of
   every mechanism whose contract it adds or changes turned on in ``settings.toml`` (the evaluated commit is
   the one that would be adopted), one commit;
2. checks: smoke (``validate.smoke``), then contracts in three configurations (``validate.contracts``) with the
   repair hook; a repaired worktree is committed and smoke-checked again;
3. screening: the candidate on the tasks its proposal concerns (r=1); the mechanism must show in the spans;
4. full evaluation: the development set × r (``validate.evaluate``), optionally stopped early by curtailment;
5. decision against the baseline: the incumbent's reference runs (``versions/vN/reference``) or a fresh control.

Then publication: of the candidates whose decision is *adopt* the one with the highest Pass@1 wins (one
adoption per round: later candidates were branched from the same incumbent); its held-out split is run
(recorded, never decisive), its evaluation is completed if curtailment cut it, it is tagged ``v(t+1)`` and
``versions/v(t+1)/`` points at its evaluation as the new reference corpus; ledger ``Adoption``. Every other
candidate gets a ``Rejection`` with its reason and the stable-pass regressions listed.

Every step is a keyed ledger event, written after its work is durable, so ``--resume`` after ``kill -9`` skips
what is finished and redoes only the unit in flight. Keys (C = candidate commit, I = incumbent commit):

    rNN:start  rNN:<slug>:created  C:smoke  C:contracts  C:screening:<task>:<rep>  C:screening
    C:<task>:<rep> (evaluation trials)  C:evaluation  C:decision (final Rejection)  C:adoption
    C:heldout:<task>:<rep>  C:heldout  C:reference (the adopted grid as reference corpus)
    I:reference:<task>:<rep>  I:reference (v0's reference runs)  I:control:rNN:<task>:<rep>  I:control:rNN
    <trial key>:infra<n> (a ⊥ attempt)  C:blocked:<n> (a non-final Rejection: ⊥ cells block the decision)

A repaired candidate: ``C:contracts`` holds ``details.repaired_to = C2`` and the work goes on under C2.
A ⊥ cell in an evaluation blocks the decision (the blocked Rejection gives the reason); the round is not
published until a resume reruns those cells. ``Evaluation.purpose`` (also in ``metrics["purpose"]``) says which grid an Evaluation
is (evaluation, reference, heldout, control).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git
from pydantic import BaseModel, ConfigDict, Field

from trials.agents import harness_agent
from trials.errors import RiseError
from trials.metrics import compare
from trials.results import TrialResult
from trials.runner import EnvFactory
from validate.adoption import decide
from validate.evaluate import (
    GridOutcome,
    GridPlan,
    Purpose,
    grid_of_job,
    kill_point,
    run_grid,
    screen,
    stop_when_decided,
)

from .ledger import (
    Adoption,
    CandidateCreated,
    CheckResult,
    Evaluation,
    Ledger,
    Rejection,
    RoundStart,
    Screening,
    TrialDone,
)
from .store import Experiment

log = logging.getLogger(__name__)
COMMIT_MARK = "rise candidate"


class ControllerError(RiseError):
    pass


class Proposal(BaseModel):
    """What a candidate claims (from the proposer, or a file next to a patch): the screening reads it."""

    model_config = ConfigDict(extra="allow")
    mechanism: str = ""
    summary: str = ""
    tasks: list[str] = Field(default_factory=list, description="tasks it concerns (screening); empty: all dev")
    boundaries: list[str] = Field(default_factory=list, description="spans that show it ran; empty: contracts'")


@dataclass
class CandidateInput:
    slug: str
    source: str  # a patch file, or a branch/commit of the harness repo
    proposal: Proposal = field(default_factory=Proposal)


@dataclass
class CandidateReport:
    slug: str
    commit: str = ""
    status: str = "pending"  # adopted | rejected | blocked | pending
    reason: str = ""
    version: str | None = None
    regressions: list[str] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoundReport:
    round: int
    incumbent: str
    candidates: list[CandidateReport]
    adopted: str | None = None

    @property
    def blocked(self) -> bool:
        return any(c.status == "blocked" for c in self.candidates)


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


class LedgerBook:
    """Books a grid's trials as ``TrialDone`` keyed ``<prefix>:<task>:<rep>`` (⊥ attempts: ``…:infra<n>``)."""

    def __init__(self, led: Ledger, root: Path, commit: str, prefix: str, purpose: str):
        self.led, self.root, self.commit, self.prefix = led, root, commit, prefix
        self.purpose = purpose

    def finished(self, task: str, rep: int) -> bool:
        return self.led.done(f"{self.prefix}:{task}:{rep}")

    def record(self, result: TrialResult, trial_dir: Path) -> None:
        key = f"{self.prefix}:{result.task_name}:{result.repetition}"
        if result.is_infra:
            n = 1
            while self.led.done(f"{key}:infra{n}"):
                n += 1
            key = f"{key}:infra{n}"
        rel = os.path.relpath(trial_dir, self.root)
        self.led.append(TrialDone(key=key, commit=self.commit, purpose=self.purpose, task=result.task_name,
                                  rep=result.repetition, status=result.status, trial_dir=rel))


# ------------------------------------------------------------------------------------------ git helpers
def patch_strip(patch: Path) -> int:
    """The ``-p`` level for a patch: 2 when its paths are under ``harness_seed/`` or ``harness/``."""
    paths = re.findall(r"^(?:---|\+\+\+) (?:a|b)/(\S+)", patch.read_text(), flags=re.MULTILINE)
    paths = [p for p in paths if p != "/dev/null"]
    for prefix in ("harness_seed/", "harness/"):
        if paths and all(p.startswith(prefix) for p in paths):
            return 2
    return 1


def set_toml_value(path: Path, dotted: str, value: Any) -> bool:
    """Set one existing ``section.key`` of a TOML file in place, comments kept; True when the file changed."""
    import tomli_w

    section, _, name = dotted.rpartition(".")
    lines = path.read_text().splitlines(keepends=True)
    rendered = tomli_w.dumps({"x": value}).split("=", 1)[1].strip()
    current = None
    for i, line in enumerate(lines):
        head = re.match(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$", line)
        if head:
            current = head.group(1).strip()
            continue
        m = re.match(rf"^(\s*{re.escape(name)}\s*=\s*)([^#\n]*?)(\s*#.*)?(\n?)$", line)
        if current == section and m:
            new = f"{m.group(1)}{rendered}{m.group(3) or ''}{m.group(4)}"
            if new == line:
                return False
            lines[i] = new
            text = "".join(lines)
            node: Any = tomllib.loads(text)
            for part in dotted.split("."):
                node = node[part]
            if node != value:
                raise ControllerError(f"{path}: could not set {dotted} to {value!r}")
            path.write_text(text)
            return True
    return False


def _boundaries_added(candidate: Path, incumbent: Path) -> list[str]:
    def targets(d: Path) -> list[str]:
        p = d / "recording.toml"
        return [b["target"] for b in tomllib.loads(p.read_text()).get("boundary", [])] if p.is_file() else []

    old = set(targets(incumbent))
    return [t for t in targets(candidate) if t not in old]


# ------------------------------------------------------------------------------------------ the controller
class Controller:
    def __init__(self, exp: Experiment, *, checks: Checks | None = None, repair: Any = None, max_repairs: int = 2,
                 env_factory: EnvFactory | None = None, progress: bool = False, infra_retries: int = 1):
        self.exp, self.cfg, self.led = exp, exp.config, exp.ledger
        self.checks = checks or Checks.default()
        self.repair, self.max_repairs = repair, max_repairs if repair else 0
        self.env_factory, self.progress, self.infra_retries = env_factory, progress, infra_retries
        self._dev: list[str] | None = None

    # -- tasks and folders ---------------------------------------------------------------------------------
    @property
    def tasks_dir(self) -> Path:
        p = Path(self.cfg.tasks.dir)
        return p if p.is_absolute() else (Path.cwd() / p)

    def dev_tasks(self) -> list[str]:
        if self._dev is None:
            if self.cfg.tasks.development:
                self._dev = sorted(self.cfg.tasks.development)
            else:
                from trials.tasks import load_task_set

                held = set(self.cfg.tasks.heldout)
                self._dev = sorted(t.name for t in load_task_set(self.tasks_dir) if t.name not in held)
        return list(self._dev)

    def version_dir(self, tag: str) -> Path:
        """A detached worktree of an adopted version (the incumbent's checkout for contracts and reference)."""
        path = self.exp.root / "worktrees" / tag / "harness"
        if not (path / "main.py").is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                self.exp.repo.git.worktree("prune")
            self.exp.repo.git.worktree("add", "--detach", str(path), tag)
        return path

    def plan(self, purpose: Purpose, harness: Path, tasks: list[str], r: int, job_dir: Path) -> GridPlan:
        return GridPlan(purpose=purpose, agent=harness_agent(harness), tasks_dir=self.tasks_dir, task_names=tasks,
                        r=r, job_dir=job_dir, endpoint=self.cfg.endpoint, env_kind=self.cfg.env,
                        concurrency=self.cfg.concurrency)

    def check_budget(self) -> None:
        """Refuse to start another grid once the experiment's trials have spent a budget of experiment.toml.

        Checked before each grid (a grid under way may overshoot by at most its own size); trials a kill cut off
        count too. Raising the budget in experiment.toml and resuming continues where the run stopped."""
        from .report import experiment_spend

        budgets = self.cfg.budgets
        if budgets.max_trials is None and budgets.max_usd is None:
            return
        trials = usd = 0.0
        for part in experiment_spend(self.exp).values():
            trials += part.trials
            usd += part.usd
        if budgets.max_trials is not None and trials >= budgets.max_trials:
            raise ControllerError(f"{self.exp.config_path}: budget spent: {int(trials)} trials run, "
                                  f"budgets.max_trials = {budgets.max_trials}")
        if budgets.max_usd is not None and usd >= budgets.max_usd:
            raise ControllerError(f"{self.exp.config_path}: budget spent: ${usd:.4f}, "
                                  f"budgets.max_usd = {budgets.max_usd}")

    async def grid(self, plan: GridPlan, commit: str, prefix: str, *, stop: Any = None) -> GridOutcome:
        self.check_budget()
        book = LedgerBook(self.led, self.exp.root, commit, prefix, plan.purpose)
        return await run_grid(plan, book, stop=stop, env_factory=self.env_factory, progress=self.progress,
                              infra_retries=self.infra_retries)

    def _evaluation_event(self, key: str, commit: str, out: GridOutcome, purpose: str, **extra: Any) -> None:
        if not self.led.done(key):
            metrics = {**out.metrics.model_dump(mode="json"), "purpose": purpose, **extra}
            self.led.append(Evaluation(key=key, commit=commit, purpose=purpose, complete=out.complete, metrics=metrics,
                                       job_dir=os.path.relpath(out.plan.job_dir, self.exp.root)))

    # -- reference corpus ------------------------------------------------------------------------------------
    async def ensure_reference(self, tag: str) -> Path:
        """Run (or finish) the reference corpus of ``tag`` into ``versions/<tag>/``: dev × r and held-out × r."""
        commit = self.exp.commit_of(tag)
        vdir = self.exp.root / "versions" / tag
        if self.led.done(f"{commit}:reference"):
            return vdir / "reference"
        harness = self.version_dir(tag)
        await self.heldout(tag, commit, harness)
        out = await self.grid(self.plan("reference", harness, self.dev_tasks(), self.cfg.r, vdir / "reference"),
                              commit, f"{commit}:reference")
        if not out.complete:
            raise ControllerError(f"the reference runs of {tag} are incomplete ({len(out.metrics.missing)} cells ⊥ "
                                  f"or missing: {_cells(out)}); rerun with --resume")
        self._write_version(tag, commit, None, vdir / "reference")
        self._evaluation_event(f"{commit}:reference", commit, out, "reference")
        kill_point("reference")
        return vdir / "reference"

    async def heldout(self, tag: str, commit: str, harness: Path) -> None:
        """The sealed held-out split, for the record only: nothing reads it to decide."""
        if not self.cfg.tasks.heldout or self.led.done(f"{commit}:heldout"):
            return
        out = await self.grid(self.plan("heldout", harness, sorted(self.cfg.tasks.heldout), self.cfg.r,
                                        self.exp.root / "versions" / tag / "heldout"), commit, f"{commit}:heldout")
        self._evaluation_event(f"{commit}:heldout", commit, out, "heldout")

    def _write_version(self, tag: str, commit: str, parent: str | None, reference: Path, **extra: Any) -> None:
        vdir = self.exp.root / "versions" / tag
        vdir.mkdir(parents=True, exist_ok=True)
        link = vdir / "reference"
        if reference.resolve() != link.resolve() or not link.exists():
            if link.is_symlink():
                link.unlink()
            link.symlink_to(os.path.relpath(reference, vdir))
        from trials.harness_api import write_json_atomic

        write_json_atomic(vdir / "version.json", {
            "version": tag, "commit": commit, "parent": parent, "reference": "reference",
            "heldout": "heldout" if (vdir / "heldout").is_dir() else None, **extra})

    # -- one round ------------------------------------------------------------------------------------------
    async def round(self, round_no: int, candidates: list[CandidateInput], resume: bool = True) -> RoundReport:
        rkey = f"r{round_no:02d}"
        started = self.led.find("round_start", key=f"{rkey}:start")
        if started and not resume:
            raise ControllerError(f"round {round_no} of {self.exp.root} has started already; pass --resume")
        if not started:
            last = max((e.round for e in self.led.find("round_start")), default=0)
            if round_no != last + 1:
                raise ControllerError(f"the next round of {self.exp.root} is {last + 1}, not {round_no}")
        incumbent = started[0].incumbent if started else self.exp.incumbent()
        if not candidates:
            candidates = [CandidateInput(e.key.split(":")[1], e.proposal.get("source", e.branch),
                                         Proposal.model_validate(e.proposal.get("proposal", {})))
                          for e in self.led.find("candidate_created", round=round_no)]
        if not candidates:
            raise ControllerError(f"round {round_no}: no candidates given and none recorded")
        baseline_dir = await self.ensure_reference(incumbent) if self.cfg.adoption.baseline == "reference" else None
        if not started:
            self.led.append(RoundStart(key=f"{rkey}:start", round=round_no, incumbent=incumbent))
        if baseline_dir is None:
            baseline_dir = await self.control(round_no, incumbent)
        baseline, _ = grid_of_job(baseline_dir)
        reports = []
        for cand in candidates:
            rep = CandidateReport(cand.slug)
            reports.append(rep)
            try:
                await self.candidate(round_no, incumbent, cand, baseline, rep)
            except _Stop as stop:
                rep.status, rep.reason = stop.status, stop.reason
        report = RoundReport(round_no, incumbent, reports)
        if not report.blocked:
            await self.publish(round_no, incumbent, report)
        return report

    async def control(self, round_no: int, incumbent: str) -> Path:
        """A fresh control grid of the incumbent for this round (``adoption.baseline = "control"``)."""
        commit = self.exp.commit_of(incumbent)
        prefix = f"{commit}:control:r{round_no:02d}"
        job = self.exp.root / "rounds" / f"r{round_no:02d}" / "control"
        out = await self.grid(self.plan("control", self.version_dir(incumbent), self.dev_tasks(), self.cfg.r, job),
                              commit, prefix)
        self._evaluation_event(prefix, commit, out, "control")
        return job

    async def candidate(self, round_no: int, incumbent: str, cand: CandidateInput, baseline: dict,
                        rep: CandidateReport) -> None:
        commit, wt = self.create(round_no, incumbent, cand)
        rep.commit = commit
        final = self.led.find("rejection", key=f"{commit}:decision") + self.led.find("adoption",
                                                                                       key=f"{commit}:adoption")
        if final:
            e = final[0]
            rep.status = "adopted" if e.kind == "adoption" else "rejected"
            rep.reason, rep.decision = e.decision.get("reason", getattr(e, "reason", "")), e.decision
            rep.regressions, rep.version = e.decision.get("regressions", []), getattr(e, "version", None)
            return
        commit, wt = await self.run_checks(incumbent, commit, wt)
        rep.commit = commit
        await self.run_screening(round_no, cand, commit, wt, incumbent)
        out = await self.evaluate(round_no, cand.slug, commit, wt, baseline)
        d = decide(out.grid, baseline, self.dev_tasks(), self.cfg.r, self.cfg.adoption.policy,
                   self.cfg.adoption.alpha, curtail=self.cfg.adoption.sequential)
        info = {**asdict(d), "pass_at_1": out.metrics.pass_at_1, "slug": cand.slug,
                "comparison": compare(baseline, out.grid, self.cfg.r).counts}
        rep.decision, rep.regressions = info, d.regressions
        if not d.decided:
            n = 1
            while self.led.done(f"{commit}:blocked:{n}"):
                n += 1
            cells = [f"{m.task}#{m.repetition} ({m.reason})" for m in out.metrics.missing if m.reason != "missing"]
            self.led.append(Rejection(key=f"{commit}:blocked:{n}", commit=commit, reason=d.reason,
                                      decision={**info, "blocked": True, "final": False, "cells": cells}))
            raise _Stop("blocked", d.reason)
        kill_point("decision")
        if d.adopt:
            rep.status, rep.reason = "adopt?", d.reason  # settled at publication
        else:
            self.reject(commit, rep, _with_regressions(d.reason, d.regressions), info)

    def reject(self, commit: str, rep: CandidateReport, reason: str, decision: dict[str, Any]) -> None:
        rep.status, rep.reason = "rejected", reason
        if not self.led.done(f"{commit}:decision"):
            self.led.append(Rejection(key=f"{commit}:decision", commit=commit, reason=reason,
                                      decision={**decision, "reason": reason, "final": True}))
        raise _Stop("rejected", reason)

    # -- stage 1: creation -----------------------------------------------------------------------------------
    def create(self, round_no: int, incumbent: str, cand: CandidateInput) -> tuple[str, Path]:
        key = f"r{round_no:02d}:{cand.slug}:created"
        found = self.led.find("candidate_created", key=key)
        branch = f"cand/r{round_no:02d}-{cand.slug}"
        if found:
            wt = self.exp.root / "worktrees" / f"r{round_no:02d}-{cand.slug}" / "harness"
            if not wt.exists():
                self.exp.create_candidate(round_no, cand.slug)
            return self.current_commit(found[0].commit), wt
        source = Path(cand.source)
        is_patch = source.is_file()
        base = self.exp.commit_of(incumbent) if is_patch else self.exp.commit_of(cand.source)
        branch, wt = self.exp.create_candidate(round_no, cand.slug, base=base)
        repo = git.Repo(wt)
        head = repo.head.commit
        ours = head.hexsha != base and head.message.startswith(COMMIT_MARK)
        if is_patch and not ours:
            if head.hexsha != base or repo.is_dirty(untracked_files=True):  # a half-made candidate of a kill
                repo.git.reset("--hard", base)
                repo.git.clean("-fdx")
            repo.git.apply(f"-p{patch_strip(source)}", "--whitespace=nowarn", str(source.resolve()))
        enabled = self.enable_switches(wt, self.version_dir(incumbent))
        commit = self.exp.commit_worktree(wt, f"{COMMIT_MARK} {cand.slug} (round {round_no}) from {source.name}")
        self.led.append(CandidateCreated(key=key, round=round_no, branch=branch, commit=commit, proposal={
            "source": str(source.resolve()) if is_patch else cand.source, "enabled": enabled,
            "proposal": cand.proposal.model_dump(mode="json")}))
        kill_point("created")
        return commit, wt

    def enable_switches(self, wt: Path, incumbent_dir: Path) -> dict[str, Any]:
        """Turn on the switch of each mechanism whose contract the candidate adds or changes."""
        try:
            from validate.contracts import changed_contracts, load_contracts
        except ImportError:
            return {}
        contracts, _ = load_contracts(wt)
        enabled = {}
        for mech in changed_contracts(wt, incumbent_dir):
            c = contracts.get(mech)
            settings = wt / "settings.toml"
            if c is not None and settings.is_file() and set_toml_value(settings, c.setting.key, c.setting.on):
                enabled[c.setting.key] = c.setting.on
        return enabled

    def current_commit(self, commit: str) -> str:
        """Follow repairs: a contracts check that repaired ``commit`` names the commit it led to."""
        while True:
            ev = self.led.find("check_result", key=f"{commit}:contracts")
            nxt = ev[0].details.get("repaired_to") if ev else None
            if not nxt:
                return commit
            commit = nxt

    # -- stage 2: checks --------------------------------------------------------------------------------------
    async def run_checks(self, incumbent: str, commit: str, wt: Path) -> tuple[str, Path]:
        for attempt in range(1, self.max_repairs + 3):
            smoke = self.led.find("check_result", key=f"{commit}:smoke")
            if not smoke:
                passed, details = await self.checks.smoke(wt, self.exp.root / "checks" / commit[:12] / "smoke")
                smoke = [self.led.append(CheckResult(key=f"{commit}:smoke", commit=commit, stage="smoke",
                                                     passed=passed, details=details, attempt=attempt))]
                kill_point("smoke")
            if not smoke[0].passed:
                self.reject(commit, CandidateReport(""), f"smoke check failed: {_why(smoke[0].details)}",
                            {"stage": "smoke", "details": smoke[0].details})
            ev = self.led.find("check_result", key=f"{commit}:contracts")
            if not ev:
                out = self.exp.root / "checks" / commit[:12] / "contracts"
                passed, details = await self.checks.contracts(wt, self.version_dir(incumbent),
                                                              self.exp.root / "contracts_frozen.json",
                                                              self.repair, self.max_repairs, out)
                new = commit if self.repair is None else \
                    self.exp.commit_worktree(wt, f"{COMMIT_MARK} repair of {commit[:12]} after contracts")
                if new != commit:  # the repair loop changed the code: the last attempt ran on `new`
                    self.led.append(CheckResult(key=f"{commit}:contracts", commit=commit, stage="contracts",
                                                passed=False, details={**details, "repaired_to": new},
                                                attempt=attempt))
                    self.led.append(CheckResult(key=f"{new}:contracts", commit=new, stage="contracts",
                                                passed=passed, details=details, attempt=attempt + 1))
                    commit = new
                    continue  # smoke again on the repaired commit
                ev = [self.led.append(CheckResult(key=f"{commit}:contracts", commit=commit, stage="contracts",
                                                  passed=passed, details=details, attempt=attempt))]
                kill_point("contracts")
            if ev[0].details.get("repaired_to"):
                commit = ev[0].details["repaired_to"]
                continue
            if not ev[0].passed:
                self.reject(commit, CandidateReport(""), f"contracts failed: {_why(ev[0].details)}",
                            {"stage": "contracts", "details": ev[0].details})
            return commit, wt
        raise ControllerError(f"{commit[:12]}: checks did not settle after {self.max_repairs} repairs")

    # -- stage 3: screening ---------------------------------------------------------------------------------
    async def run_screening(self, round_no: int, cand: CandidateInput, commit: str, wt: Path,
                            incumbent: str) -> None:
        key = f"{commit}:screening"
        ev = self.led.find("screening", key=key)
        if not ev:
            dev = self.dev_tasks()
            sealed = set(self.cfg.tasks.heldout)
            tasks = [t for t in cand.proposal.tasks if t not in sealed] or dev
            boundaries = cand.proposal.boundaries or self._contract_spans(wt, incumbent) or \
                _boundaries_added(wt, self.version_dir(incumbent))
            job = self.exp.root / "rounds" / f"r{round_no:02d}" / cand.slug / "screening"
            book = LedgerBook(self.led, self.exp.root, commit, key, "screening")
            res = await screen(self.plan("screening", wt, tasks, 1, job), book, boundaries,
                               env_factory=self.env_factory, progress=self.progress)
            details = res.details()
            if res.inconclusive:
                raise _Stop("blocked", f"screening inconclusive: {details['reason']} and ⊥ trials "
                            f"({details['trials']}); rerun with --resume")
            ev = [self.led.append(Screening(key=key, commit=commit, passed=res.passed,
                                            mechanism_ran=res.mechanism_ran, details=details))]
            kill_point("screening")
        if not ev[0].passed:
            self.reject(commit, CandidateReport(""), f"screening: the mechanism did not run "
                        f"({ev[0].details.get('reason')})", {"stage": "screening", "details": ev[0].details})

    def _contract_spans(self, wt: Path, incumbent: str) -> list[str]:
        try:
            from validate.contracts import changed_contracts, mechanism_spans
        except ImportError:
            return []
        changed = changed_contracts(wt, self.version_dir(incumbent))
        return sorted({s for spans in mechanism_spans(wt, changed).values() for s in spans}) if changed else []

    # -- stage 4: evaluation ---------------------------------------------------------------------------------
    async def evaluate(self, round_no: int, slug: str, commit: str, wt: Path, baseline: dict) -> GridOutcome:
        dev, r, ad = self.dev_tasks(), self.cfg.r, self.cfg.adoption
        stop = stop_when_decided(baseline, dev, r, ad.policy, ad.alpha) if ad.sequential else None
        job = self.exp.root / "rounds" / f"r{round_no:02d}" / slug / "evaluation"
        if self.led.done(f"{commit}:evaluation"):  # finished before: read it back, run nothing
            grid, metrics = grid_of_job(job)
            results = {}
            return GridOutcome(self.plan("evaluation", wt, dev, r, job), grid, metrics, results)
        out = await self.grid(self.plan("evaluation", wt, dev, r, job), commit, commit, stop=stop)
        if any(m.reason != "missing" for m in out.metrics.missing) or (out.metrics.missing and not out.stopped_early):
            return out  # ⊥ cells: no Evaluation event yet; the decision says why and a resume reruns them
        self._evaluation_event(f"{commit}:evaluation", commit, out, "evaluation", curtailed=out.stopped_early)
        kill_point("evaluation")
        return out

    # -- stage 5: publication --------------------------------------------------------------------------------
    async def publish(self, round_no: int, incumbent: str, report: RoundReport) -> None:
        adopted = [c for c in report.candidates if c.status == "adopted"]
        contenders = [c for c in report.candidates if c.status == "adopt?"]
        if not adopted and contenders:
            winner = max(contenders, key=lambda c: (c.decision.get("pass_at_1") or 0.0, -contenders.index(c)))
            await self.adopt(round_no, incumbent, winner)
            adopted = [winner]
        for c in contenders:
            if c.status == "adopt?":
                w = adopted[0]
                why = (f"would adopt ({c.reason}) but {w.slug} was adopted as {w.version} in round {round_no} "
                       f"with Pass@1 {w.decision.get('pass_at_1')}")
                try:
                    self.reject(c.commit, c, why, c.decision)
                except _Stop:
                    pass
        report.adopted = adopted[0].version if adopted else None

    async def adopt(self, round_no: int, incumbent: str, c: CandidateReport) -> None:
        version = f"v{int(incumbent[1:]) + 1}"
        wt = self.exp.root / "worktrees" / f"r{round_no:02d}-{c.slug}" / "harness"
        job = self.exp.root / "rounds" / f"r{round_no:02d}" / c.slug / "evaluation"
        ref_key = f"{c.commit}:reference"
        if not self.led.done(ref_key):
            await self.heldout(version, c.commit, wt)
            out = await self.grid(self.plan("evaluation", wt, self.dev_tasks(), self.cfg.r, job), c.commit,
                                  c.commit)  # completes a grid that curtailment cut short; runs nothing else
            if not out.complete:
                raise _Stop("blocked", f"the evaluation of {c.slug} could not be completed as {version}'s "
                            f"reference corpus ({_cells(out)}); rerun with --resume")
            tag = self.exp.tag_version(c.commit, f"{version}: {c.slug} (round {round_no})")
            if tag != version:
                raise ControllerError(f"tagged {tag}, expected {version}: the harness repo changed under the run")
            kill_point("publication:tag")
            self._write_version(version, c.commit, incumbent, job, round=round_no, slug=c.slug)
            kill_point("publication:versions")
            self._evaluation_event(ref_key, c.commit, out, "reference")
        else:
            self.exp.tag_version(c.commit, f"{version}: {c.slug} (round {round_no})")
        if not self.led.done(f"{c.commit}:adoption"):
            self.led.append(Adoption(key=f"{c.commit}:adoption", commit=c.commit, version=version, parent=incumbent,
                                     decision={**c.decision, "reason": c.reason}))
            kill_point("publication")
        c.status, c.version = "adopted", version


class _Stop(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


def _with_regressions(reason: str, regressions: list[str]) -> str:
    return reason + (f"; regressions of stable passes: {', '.join(regressions)}" if regressions else "")


def _why(details: dict[str, Any]) -> str:
    for k in ("summary", "reason", "error", "message"):
        if details.get(k):
            return str(details[k])[:500]
    return json.dumps(details, default=str)[:500]


def _cells(out: GridOutcome) -> str:
    return ", ".join(f"{m.task}#{m.repetition} ({m.reason})" for m in out.metrics.missing[:8])


def run_round(exp: Experiment, round_no: int, candidates: list[Any], resume: bool = True,
              **options: Any) -> RoundReport:
    """Run (or resume) one round; ``candidates`` are ``CandidateInput`` or ``(slug, patch_or_branch[,
    proposal])`` tuples. Options: ``checks``, ``repair``, ``max_repairs``, ``env_factory``, ``progress``."""
    inputs = [c if isinstance(c, CandidateInput) else
              CandidateInput(c[0], str(c[1]), Proposal.model_validate(c[2] if len(c) > 2 else {})) for c in candidates]
    return asyncio.run(Controller(exp, **options).round(round_no, inputs, resume))


def run_reference(exp: Experiment, version: str | None = None, **options: Any) -> Path:
    """Run (or finish) the reference corpus of a version (default: the incumbent)."""
    return asyncio.run(Controller(exp, **options).ensure_reference(version or exp.incumbent()))
