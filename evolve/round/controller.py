"""The round controller: candidate → checks → screening → evaluation → decision → publication, resumable.

``run_round(exp, round_no, candidates)`` takes each candidate (a patch file against the incumbent, or a branch or
commit of the harness repository) through

1. creation: branch ``cand/rNN-slug`` and its worktree from the incumbent, the patch applied, the switch of
   every mechanism whose contract it adds or changes turned on in ``settings.toml`` (the evaluated commit is
   the one that would be adopted), one commit;
2. checks: smoke (``validate.smoke``), then contracts in three configurations (``validate.contracts``); a failed
   check goes to the repair hook (at most ``max_repairs`` per candidate, each a booked unit), and the repaired
   commit is checked again from the smoke check;
3. screening: the candidate on the tasks its proposal concerns (r=1); the mechanism must show in the spans;
4. full evaluation: the development set × r (``validate.evaluate``), optionally stopped early by curtailment;
5. decision against the baseline: the incumbent run in lockstep beside the evaluation (``interleaved``, the default:
   ``evolve.round.interleave``), its reference runs (``versions/vN/reference``) or a fresh control (a ⊥ there
   blocks the round, never rejects), at the round's family-wise level (``validate.multiplicity``); both arms'
   load is recorded and a clearly different one refuses or flags the adoption (``validate.load_check``).

Then publication: of the candidates whose decision is *adopt* the one with the highest Pass@1 wins (one
adoption per round: later candidates were branched from the same incumbent); its held-out split is run
(recorded, never decisive), its evaluation is completed if curtailment cut it, it is tagged ``v(t+1)`` and
``versions/v(t+1)/`` points at its evaluation as the new reference corpus; ledger ``Adoption``. Every other
candidate gets a ``Rejection`` with its reason and the stable-pass regressions listed.

The stages live in their own files: creation and switches in ``evolve.round.candidates``, checks and screening in
``evolve.round.checks``, publication in ``evolve.round.publication``, spending limits in ``evolve.experiment.budget``, the round's data
types in ``evolve.round.model``; this file holds the round itself, reference and control grids and evaluation.

Every step is a keyed ledger event, written after its work is durable, so ``--resume`` after ``kill -9`` skips
what is finished and redoes only the unit in flight. Keys (C = candidate commit, I = incumbent commit):

    rNN:start  rNN:power (the measured power, before the first evaluation: evolve.round.power)
    rNN:<slug>:created  C:smoke  C:contracts  C:repair  C:screening:<task>:<rep>  C:screening
    C:<task>:<rep> (evaluation trials)  C:evaluation  C:decision (final Rejection)  C:adoption
    C:heldout:<task>:<rep>  C:heldout  C:reference (the adopted grid as reference corpus)
    I:reference:<task>:<rep>  I:reference (v0's reference runs)  I:control:rNN:<task>:<rep>  I:control:rNN
    I:control:rNN:<slug>:<task>:<rep>  I:control:rNN:<slug> (the incumbent arm beside a candidate: interleaved)
    <trial key>:infra<n> (a ⊥ attempt)  C:blocked:<n> (a non-final Rejection: ⊥ cells block the decision)

A repaired candidate: ``C:repair`` (a ``repair`` event: the call's transcript and cost, ``repaired_to = C2``) and
the work goes on under C2; the candidate keeps its identity ``rNN:<slug>`` (:mod:`evolve.experiment.identity`) whatever
repairs changed, and only a final Rejection (``C:decision``) settles it.
A ⊥ cell in an evaluation blocks the decision (the blocked Rejection gives the reason); the round is not
published until a resume reruns those cells. A cell still ⊥ after ``infra_limit`` attempts where the incumbent is
healthy is charged to the candidate, which is then rejected as unpublishable (at the decision, or at publication
when completing a curtailed grid: the same rule), so a round ends within a bounded number of resumes.
``Evaluation.purpose`` (also in ``metrics["purpose"]``) says which grid an Evaluation is (evaluation, reference,
heldout, control).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evolve.experiment.budget import check_budget
from evolve.experiment.ledger import Evaluation, Rejection, RoundEnd, RoundStart
from evolve.experiment.lock import experiment_lock
from evolve.experiment.store import Experiment
from evolve.round.candidates import COMMIT_MARK, CandidateCreation, patch_strip, set_toml_value
from evolve.round.checks import Checks, CheckStages
from evolve.round.control_arm import ControlArmStage
from evolve.round.interleave import InterleavedStage
from evolve.round.model import (
    CandidateInput,
    CandidateReport,
    ControllerError,
    LedgerBook,
    Proposal,
    RoundReport,
    Stop,
    charge,
    charged_cells,
    charged_of,
    missing_cells,
    unpublishable,
    with_regressions,
)
from evolve.round.power import announce_round, development_tasks
from evolve.round.publication import PublicationStage
from monitor.agents import harness_agent
from trials.job import load_job
from trials.metrics import compare
from trials.runner import EnvFactory
from validate.adoption import Family, decide
from validate.evaluate import (
    GridOutcome,
    GridPlan,
    Purpose,
    grid_of_job,
    kill_point,
    outcome_of,
    run_grid,
    stop_when_decided,
)

log = logging.getLogger(__name__)
__all__ = ["COMMIT_MARK", "CandidateInput", "CandidateReport", "Checks", "Controller", "ControllerError",
           "LedgerBook", "Proposal", "RoundReport", "patch_strip", "run_reference", "run_round", "set_toml_value"]


class Controller:
    """One experiment's round machinery: the grids, folders and decisions below, and the stages it calls in order,
    each a collaborator of its own (``creation``, ``checking``, ``arm``, ``publication``) that reaches back to the
    controller for the experiment, the ledger and its grids."""

    def __init__(self, exp: Experiment, *, checks: Checks | None = None, repair: Any = None, max_repairs: int = 2,
                 env_factory: EnvFactory | None = None, progress: bool = False, infra_retries: int = 1,
                 infra_limit: int = 3, say: Callable[[str], None] | None = None):
        self.exp, self.cfg, self.led = exp, exp.config, exp.ledger
        self.say = say or log.info  # what the round tells its operator (the power before its evaluations)
        self.checks = checks or Checks.default()
        self.repair, self.max_repairs = repair, max_repairs if repair else 0
        self.env_factory, self.progress, self.infra_retries = env_factory, progress, infra_retries
        self.infra_limit = infra_limit  # ⊥ attempts of one candidate cell before it counts as the candidate's failure
        self._dev: list[str] | None = None
        self.baseline_dir: Path | None = None  # the incumbent's grid this round is decided against
        self.baseline: dict[str, list[bool | None]] = {}  # that grid, decision-shaped
        self.family_size = 1  # candidates that entered the round: each is tested at the family's level
        self.creation = CandidateCreation(self)  # stage 1: the candidate's commit and worktree
        self.checking = CheckStages(self)  # stages 2 and 3: checks (guard, smoke, contracts, repairs), screening
        self.arm = ControlArmStage(self)  # the compute-matched control arm of a decision
        self.paired = InterleavedStage(self)  # the incumbent arm beside each evaluation, and the load check
        self.publication = PublicationStage(self)  # stage 5: choose among contenders, complete, adopt

    # -- tasks and folders ---------------------------------------------------------------------------------
    @property
    def tasks_dir(self) -> Path:
        p = Path(self.cfg.tasks.dir)  # ExperimentConfig.load resolved it against experiment.toml's folder
        return p if p.is_absolute() else (self.exp.config_path.parent / p)

    def dev_tasks(self) -> list[str]:
        if self._dev is None:
            self._dev = development_tasks(self.exp)
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
                        concurrency=self.cfg.concurrency, executor=self.cfg.executor)

    async def grid(self, plan: GridPlan, commit: str, prefix: str, *, stop: Any = None) -> GridOutcome:
        check_budget(self.exp)
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
                                  f"or missing: {missing_cells(out)}); rerun with --resume")
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

    def family(self, round_no: int) -> Family:
        """The round's family (validate.multiplicity): the level each of its candidates is tested at."""
        ad = self.cfg.adoption
        return Family(ad.alpha, ad.night_rounds, round_no, self.family_size)

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
        for cand in candidates:  # refuse a patch or branch that does not fit the incumbent before any work
            if not self.led.done(f"{rkey}:{cand.slug}:created"):
                if Path(cand.source).is_file():
                    self.creation.check_patch(incumbent, cand)
                else:
                    self.creation.branch_base(incumbent, cand)
        corpus = self.cfg.adoption.baseline != "control"  # interleaved: the corpus is read, the arm decides
        baseline_dir = await self.ensure_reference(incumbent) if corpus else None
        if not started:
            self.led.append(RoundStart(key=f"{rkey}:start", round=round_no, incumbent=incumbent))
        # fixed before any evaluation, the same on resume: every candidate that entered the round counts
        self.family_size = max(len(candidates), len(self.led.find("candidate_created", round=round_no)))
        if baseline_dir is None:
            try:
                baseline_dir = await self.control(round_no, incumbent)
            except Stop as stop:  # ⊥ in the control grid: no decision until a resume completes it
                return RoundReport(round_no, incumbent, [CandidateReport(c.slug, status=stop.status,
                                                                         reason=stop.reason) for c in candidates])
        baseline, _ = grid_of_job(baseline_dir)
        self.baseline_dir = baseline_dir  # screening tells the mechanism's own spans from the incumbent's
        self.baseline = baseline  # publication charges a contender's ⊥ cells against it, as the decision does
        announce_round(self, round_no, incumbent, {
            "reference": f"reference corpus of {incumbent}", "control": f"control grid of round {round_no}",
            "interleaved": f"incumbent {incumbent} run beside each candidate"}[self.cfg.adoption.baseline])
        reports = []
        for cand in candidates:
            rep = CandidateReport(cand.slug)
            reports.append(rep)
            try:
                await self.candidate(round_no, incumbent, cand, baseline, rep)
            except Stop as stop:
                rep.status, rep.reason = stop.status, stop.reason
        report = RoundReport(round_no, incumbent, reports)
        if not report.blocked:
            await self.publication.publish(round_no, incumbent, report)
        return report

    async def control(self, round_no: int, incumbent: str) -> Path:
        """A fresh control grid of the incumbent for this round (``adoption.baseline = "control"``)."""
        commit = self.exp.commit_of(incumbent)
        prefix = f"{commit}:control:r{round_no:02d}"
        job = self.exp.root / "rounds" / f"r{round_no:02d}" / "control"
        out = await self.grid(self.plan("control", self.version_dir(incumbent), self.dev_tasks(), self.cfg.r, job),
                              commit, prefix)
        if not out.complete:  # an infrastructure fault is no evidence against any candidate: complete it first
            raise Stop("blocked", f"the control grid of round {round_no} is incomplete ({missing_cells(out)}): no "
                       "candidate is decided against it; rerun with --resume")
        self._evaluation_event(prefix, commit, out, "control")
        return job

    async def candidate(self, round_no: int, incumbent: str, cand: CandidateInput, baseline: dict,
                        rep: CandidateReport) -> None:
        commit, wt = self.creation.create(round_no, incumbent, cand)
        rep.commit = commit
        final = self.led.find("rejection", key=f"{commit}:decision") + self.led.find("adoption",
                                                                                       key=f"{commit}:adoption")
        if final:
            e = final[0]
            rep.status = "adopted" if e.kind == "adoption" else "rejected"
            rep.reason, rep.decision = e.decision.get("reason", getattr(e, "reason", "")), e.decision
            rep.regressions, rep.version = e.decision.get("regressions", []), getattr(e, "version", None)
            return
        commit, wt = await self.checking.run_checks(incumbent, commit, wt)
        rep.commit = commit
        await self.checking.run_screening(round_no, cand, commit, wt, incumbent, baseline)
        out = await self.evaluate(round_no, cand.slug, commit, wt, baseline, incumbent)
        baseline = self.paired.baseline(cand.slug, baseline)
        d = decide(out.grid, baseline, self.dev_tasks(), self.cfg.r, self.cfg.adoption.policy,
                   curtail=self.cfg.adoption.sequential, family=self.family(round_no), power_gain=self.cfg.adoption.gain)
        if cells := charged_of(out.results):  # ⊥ through the attempts: never publishable, so never adopted
            why, names = unpublishable(self.led, commit, cells, "through the evaluation's attempts")
            info = {**asdict(d), "pass_at_1": out.metrics.pass_at_1, "slug": cand.slug, "unpublishable": names}
            rep.decision, rep.regressions = info, d.regressions
            self.reject(commit, rep, f"{why}; with them as failures: {d.reason}", info)
        d, load = self.paired.check(cand.slug, out, d)
        arm = None
        if d.decided and self.cfg.adoption.control == "midharness":  # the compute-matched control arm
            d, arm = await self.arm.control_arm(round_no, incumbent, out, d)
        info = {**asdict(d), "pass_at_1": out.metrics.pass_at_1, "slug": cand.slug,
                "tier": getattr(cand.proposal, "tier", None) or "code",
                "comparison": compare(baseline, out.grid, self.cfg.r).counts, "load": load.model_dump(),
                "baseline": self.cfg.adoption.baseline, **({"control_arm": arm} if arm else {}),
                **({"agreement": agree} if (agree := self.paired.agreement(cand.slug, out)) else {})}
        rep.decision, rep.regressions = info, d.regressions
        if not d.decided:
            n = 1
            while self.led.done(f"{commit}:blocked:{n}"):
                n += 1
            cells = [f"{m.task}#{m.repetition} ({m.reason})" for m in out.metrics.missing if m.reason != "missing"]
            self.led.append(Rejection(key=f"{commit}:blocked:{n}", commit=commit, reason=d.reason,
                                      decision={**info, "blocked": True, "final": False, "cells": cells}))
            raise Stop("blocked", d.reason)
        kill_point("decision")
        if d.adopt:
            rep.status, rep.reason = "adopt?", d.reason  # settled at publication
        else:
            self.reject(commit, rep, with_regressions(d.reason, d.regressions), info)

    def reject(self, commit: str, rep: CandidateReport, reason: str, decision: dict[str, Any]) -> None:
        rep.status, rep.reason = "rejected", reason
        if not self.led.done(f"{commit}:decision"):
            self.led.append(Rejection(key=f"{commit}:decision", commit=commit, reason=reason,
                                      decision={**decision, "reason": reason, "final": True}))
        raise Stop("rejected", reason)

    # -- stage 4: evaluation ---------------------------------------------------------------------------------
    async def evaluate(self, round_no: int, slug: str, commit: str, wt: Path, baseline: dict,
                       incumbent: str) -> GridOutcome:
        dev, r, ad = self.dev_tasks(), self.cfg.r, self.cfg.adoption
        level = self.family(round_no).alpha_candidate  # curtailment decides at the level the decision uses
        # interleaved: no curtailment (it needs the whole baseline, and the arm runs beside the candidate)
        stop = stop_when_decided(baseline, dev, r, ad.policy, level) if ad.sequential and not self.paired.on else None
        job = self.exp.root / "rounds" / f"r{round_no:02d}" / slug / "evaluation"
        plan = self.plan("evaluation", wt, dev, r, job)
        if self.led.done(f"{commit}:evaluation"):  # finished before: read it back, run nothing
            _, results, _ = load_job(job)
            out = outcome_of(plan, {(x.task_name, x.repetition): x for x in results})
            if self.paired.on:
                await self.paired.run(round_no, incumbent, slug, None, commit)
        elif self.paired.on:
            out = await self.paired.run(round_no, incumbent, slug, plan, commit)
        else:
            out = await self.grid(plan, commit, commit, stop=stop)
        baseline = self.paired.baseline(slug, baseline)
        charged = charged_cells(self.led, commit, "evaluation", out.results, baseline, self.infra_limit)
        if charged:  # the same cells are charged on every resume: the count comes from the ledger
            out = outcome_of(plan, charge(out.results, charged), out.stopped_early, out.trials_run)
        if self.led.done(f"{commit}:evaluation"):
            # a ⊥ left by publication's completion of a curtailed grid is a cell the decision was taken without:
            # publication reruns it (and charges it at the limit); here it reads as not run, so resumes decide alike
            return outcome_of(plan, {k: v for k, v in out.results.items() if not v.is_infra}, out.stopped_early)
        if any(m.reason != "missing" for m in out.metrics.missing) or (out.metrics.missing and not out.stopped_early):
            return out  # ⊥ cells: no Evaluation event yet; the decision says why and a resume reruns them
        self._evaluation_event(f"{commit}:evaluation", commit, out, "evaluation", curtailed=out.stopped_early,
                               charged_to_candidate=[f"{t}#{k}" for t, k in sorted(charged)])
        kill_point("evaluation")
        return out


def run_round(exp: Experiment, round_no: int, candidates: list[Any], resume: bool = True,
              **options: Any) -> RoundReport:
    """Run (or resume) one round; ``candidates`` are ``CandidateInput`` or ``(slug, patch_or_branch[,
    proposal])`` tuples. Options: ``checks``, ``repair``, ``max_repairs``, ``env_factory``, ``progress``, ``say``."""
    inputs = [c if isinstance(c, CandidateInput) else
              CandidateInput(c[0], str(c[1]), Proposal.model_validate(c[2] if len(c) > 2 else {})) for c in candidates]
    with experiment_lock(exp.root):
        report = asyncio.run(Controller(exp, **options).round(round_no, inputs, resume))
        key = f"r{round_no:02d}:end"
        if not report.blocked and not exp.ledger.find("round_end", key=key):
            # decided: a later `rise evolve` (or analysis) on this experiment must not take the round for open
            what = f"adopted {report.adopted}" if report.adopted else "nothing adopted"
            exp.ledger.append(RoundEnd(key=key, round=round_no, adopted=report.adopted, reason=f"rise round: {what}"))
        return report


def run_reference(exp: Experiment, version: str | None = None, **options: Any) -> Path:
    """Run (or finish) the reference corpus of a version (default: the incumbent)."""
    with experiment_lock(exp.root):
        return asyncio.run(Controller(exp, **options).ensure_reference(version or exp.incumbent()))
