"""``rise evolve``: the overnight loop. Per round, from the incumbent vN:

    reference corpus of vN (if missing) → analysis (pairs, findings, groups, review, ranking) → research per
    selected group → one proposal per group (overfitting guard) → implementation on ``cand/rNN-slug`` →
    the controller's round (checks with the implementer as repair hook, screening, evaluation, decision,
    publication) → grading of every decided candidate's predictions → ``round_end``.

Stopping conditions: K rounds done (``--rounds K`` names the last round number), no flipping tasks, no group to
propose for, ``patience`` rounds in a row without adoption (counted from the ledger, across invocations), a
budget (:mod:`evolve.experiment.budget`; checked before each unit, repairs included, the only non-final stop: raise
the budget and ``--resume``), a blocked round (⊥ cells: resume).

Every unit is a keyed ledger event written right after its work is durable, and a resumed loop skips every key
already there; a role call's result is saved in ``rounds/rNN/units/`` before its commit and event
(:mod:`evolve.experiment.units`), so after ``kill -9`` (or Ctrl-C / SIGTERM) no finished role call or trial is repeated:

    rNN:start (RoundStart, written by the loop so round numbers stay consecutive)
    <commit>:analysis:...               (evolve.roles.analysis.pipeline's keys)
    rNN:research:<group id>  rNN:proposal:<group id>  rNN:implementation:<slug>
    the controller's keys (rNN:<slug>:created, C:smoke, C:contracts, C:repair, trials, C:decision ...)
    C:grade  C:freeze  C:transfer (and its grids, evolve.round.transfer)  rNN:end  evolve:stop:<n>
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evolve.experiment.budget import BudgetStop, GridBudgetSpent, LoopBudget
from evolve.experiment.identity import final_rejections
from evolve.experiment.ledger import (
    EvolveStop,
    GradeEvent,
    RoundEnd,
    RoundStart,
)
from evolve.experiment.lock import experiment_lock
from evolve.experiment.store import Experiment
from evolve.options import BackendFactory, EvolveOptions, EvolveReport, default_backends
from evolve.roles.analysis.models import Group
from evolve.roles.analysis.pairs import make_pairs
from evolve.roles.analysis.pipeline import Analysis
from evolve.roles.analysis.ranking import rank, rejected_attempts
from evolve.roles.analysis.roles import ANALYST, with_limits
from evolve.roles.implement import IMPLEMENTER, repair_hook
from evolve.roles.proposals import OverfitGuard, ProposalSpec
from evolve.roles.runtime import Role
from evolve.round.controller import CandidateInput, Checks, Controller, ControllerError
from evolve.round.grading import grade
from evolve.round.grading_runs import grading_baseline, tasks_needing_fresh_runs
from evolve.round.transfer import run_transfer, transfer_pending
from evolve.steps import RoundSteps
from evolve.views.rounds import write_round_summary
from validate.evaluate import grid_of_job, kill_point

log = logging.getLogger(__name__)
class Evolution:
    """One experiment's ``rise evolve``. ``backends``: a factory (role, call key) -> Backend; ``checks``,
    ``env_factory``: as for the controller (tests pass stand-ins); ``research``: a :class:`research.api.Research`
    (default: the cached corpus, synced if its index is missing)."""

    def __init__(self, exp: Experiment, options: EvolveOptions, backends: BackendFactory | None = None, *,
                 checks: Checks | None = None, env_factory: Any = None, research: Any = None,
                 progress: bool = False, say: Callable[[str], None] = print,
                 preflight: Callable[[], None] | None = None):
        self.exp, self.opt = exp, options
        self.preflight = preflight  # before the first round to run (rise evolve: the power check)
        self.backends = backends or default_backends(exp)
        self.checks, self.env_factory, self.progress, self.say = checks, env_factory, progress, say
        b = exp.config.budgets
        self.steps = RoundSteps(self)
        self.budget = LoopBudget(max_usd=options.max_usd if options.max_usd is not None else b.max_usd,
                                 max_tokens=options.max_tokens,
                                 max_trials=options.max_trials if options.max_trials is not None else b.max_trials,
                                 max_seconds=options.max_hours * 3600 if options.max_hours else None)
        self.research = research
        self.specs: dict[str, ProposalSpec] = {}  # worktree folder rNN-slug -> proposal (for repairs)

    # ------------------------------------------------------------------------------------------ helpers
    @property
    def led(self) -> Any:
        """The ledger as it is now: the controller and the analysis append through ledgers of their own."""
        return self.exp.ledger

    def role(self, role: Role) -> Role:
        return with_limits(self.exp.config.agents.role_limits(role), **self.opt.role_limits)

    def _research(self) -> Any:
        from research.api import Research, ResearchSettings

        if self.research is None:
            self.research = Research(ResearchSettings(external_research=self.opt.external_research))
        if self.research.enabled and not self.research.index_path.exists():
            self.say("research corpus missing: building it (rise research sync)")
            self.research.sync(log=self.say)
        return self.research

    def _append(self, event: Any, point: str) -> None:
        self.led.append(event)
        kill_point(point)

    def _stop(self, n: int, reason: str, final: bool = True) -> EvolveReport:
        k = len(self.led.find("evolve_stop")) + 1
        self.led.append(EvolveStop(key=f"evolve:stop:{k}", round=n, reason=reason, final=final))
        return EvolveReport(stopped=reason, final=final)

    def _next_round(self) -> int:
        finished = {e.round for e in self.led.find("round_end")}
        started = {e.round for e in self.led.find("round_start")}
        open_ = sorted(started - finished)
        if open_:
            if not self.opt.resume:
                raise ControllerError(f"round {open_[0]} of {self.exp.root} has started; pass --resume to go on")
            return open_[0]
        return max(finished | started, default=0) + 1

    def rounds_without_adoption(self) -> int:
        """Rounds in a row, up to the last one ended, that adopted nothing: from the ledger, so every invocation
        (``--resume``, a ``--max-hours`` run continued) counts the rounds of the ones before."""
        dry = 0
        for e in sorted(self.led.find("round_end"), key=lambda e: e.round):
            dry = 0 if e.adopted else dry + 1
        return dry

    # ------------------------------------------------------------------------------------------ the loop
    def run(self) -> EvolveReport:
        """Run rounds until a stopping condition; returns what each round did and why the loop stopped."""
        with experiment_lock(self.exp.root):
            report = EvolveReport()
            n = self._next_round()
            if self.preflight is not None and n <= self.opt.rounds:
                self.preflight()
            while True:
                if n > self.opt.rounds:
                    out = self._stop(n - 1, f"{self.opt.rounds} round(s) done")
                    break
                try:
                    adopted, reason, stop = self.round(n)
                except BudgetStop as exc:
                    out = self._stop(n, str(exc), final=False)
                    break
                report.rounds.append({"round": n, "adopted": adopted, "reason": reason})
                self.say(f"round {n}: " + (f"adopted {adopted}" if adopted else f"nothing adopted ({reason})"))
                if stop:
                    out = self._stop(n, reason, final=stop != "resume")
                    break
                dry = self.rounds_without_adoption()
                if dry >= self.opt.patience:
                    out = self._stop(n, f"{dry} round(s) in a row without adoption (patience {self.opt.patience})")
                    break
                n += 1
            report.stopped, report.final = out.stopped, out.final
            return report

    def round(self, n: int) -> tuple[str | None, str, str | None]:
        """One round; returns (adopted version, reason, stop kind: None, "final" or "resume")."""
        rkey, rdir = f"r{n:02d}", self.exp.root / "rounds" / f"r{n:02d}"
        done = self.led.find("round_end", key=f"{rkey}:end")
        if done:
            return done[0].adopted, done[0].reason, None
        started = self.led.find("round_start", key=f"{rkey}:start")
        incumbent = started[0].incumbent if started else self.exp.incumbent()
        ctl = Controller(self.exp, checks=self.checks, env_factory=self.env_factory, progress=self.progress,
                         say=self.say)
        commit = self.exp.commit_of(incumbent)
        if not self.led.done(f"{commit}:reference"):
            self.budget.check(self.exp, f"the reference corpus of {incumbent}")
            self.say(f"round {n}: the reference corpus of {incumbent} (development tasks x r)")
            self._controller(ctl.ensure_reference(incumbent))
            ctl.led = self.exp.ledger
        if not started:
            self.led.append(RoundStart(key=f"{rkey}:start", round=n, incumbent=incumbent))
        incumbent_dir = ctl.version_dir(incumbent)
        # check failures go back to the implementer (at most max_repairs per candidate, each a booked unit of
        # the controller's), each repair reserved in the budget before it starts
        implementer = self.role(IMPLEMENTER)
        ctl.repair = repair_hook(self.exp, lambda wt: self.backends("implementer", f"repair-{wt}"), self.specs,
                                 incumbent_dir, [], role=implementer, transcripts=rdir / "transcripts",
                                 before=lambda wt: self.budget.check(self.exp, f"a repair of {wt.parent.name}",
                                                                     "implementer", implementer.limits.max_usd))
        ctl.max_repairs = self.opt.max_repairs
        corpus = self.exp.root / "versions" / incumbent / "reference"
        pairs = make_pairs(corpus, per_task=self.opt.per_task, total=self.opt.max_pairs)
        if not pairs.flipping:
            return self._end(n, None, f"no flipping tasks in the reference corpus of {incumbent}", "final")
        self.say(f"round {n}: analysis of {len(pairs.pairs)} success/failure pair(s) of {len(pairs.flipping)} "
                 f"flipping task(s): {', '.join(sorted(pairs.flipping))}")
        groups, findings = self._analysis(n, incumbent, rdir, len(pairs.pairs))
        selected = self._select(groups)
        want = self.opt.candidates
        self.say(f"round {n}: {len(findings)} finding(s), {len(groups)} group(s); selected: "
                 + (", ".join(g.name for g, _ in selected[:want]) or "none")
                 + (f"; if a proposal or an implementation fails, next: {', '.join(g.name for g, _ in selected[want:])}"
                    if selected[want:] else ""))
        if not selected:
            return self._end(n, None, "no group of findings to propose for", "final")
        guard = OverfitGuard(ctl.tasks_dir, ctl.dev_tasks())
        cands = []
        # the groups in order until `want` candidates exist: a failed or refused proposal, or an implementation
        # that failed, passes the turn to the next group (_select keeps spare_groups of them); the night of
        # 2026-12-07 ended its round on the one selected group's invalid proposal with five groups untried
        for g, revisit in selected:
            if len(cands) >= want:
                break
            self.say(f"round {n}: research, then a proposal, for group {g.name!r}")
            research = self.steps.research(n, g, rdir)
            lines = [findings[m] for m in g.members if m in findings]
            made = self.steps.proposal(n, g, lines, research, revisit, pairs.at_risk, guard, ctl, incumbent_dir,
                                       rdir)
            if made is None:
                continue
            slug, spec = made
            self.say(f"round {n}: the implementer builds {slug!r} on cand/{rkey}-{slug}")
            self.specs[f"{rkey}-{slug}"] = spec
            branch = self.steps.implementation(n, slug, spec, guard, incumbent, incumbent_dir, rdir)
            if branch:
                cands.append(CandidateInput(slug, branch, spec))
        if not cands:
            return self._end(n, None, "no candidate was implemented (see the proposal and implementation "
                                      "events)")
        self.budget.check(self.exp, f"round {n}: checks, screening and evaluation")
        self.say(f"round {n}: checks, screening, evaluation and decision for {', '.join(c.slug for c in cands)}")
        ctl.led = self.exp.ledger  # the controller's view must include this round's events so far
        report = self._controller(ctl.round(n, cands, resume=True))
        if report.blocked:
            return None, "blocked: some cells are ⊥; rerun with --resume", "resume"
        todo = [(c, self.specs.get(f"{rkey}-{c.slug}") or ProposalSpec()) for c in report.candidates
                if c.status in ("adopted", "rejected") and c.commit and not self.led.done(f"{c.commit}:grade")]
        base: tuple[dict, str] = ({}, "")
        grids = {c.commit: self._evaluation_grid(c.commit) for c, _ in todo}  # read once: None = not evaluated
        if any(g is not None for g in grids.values()):
            # graded against runs that did not choose the tasks (evolve.round.grading_runs), not the corpus
            self.budget.check(self.exp, f"round {n}: the grading baseline")
            ctl.led = self.exp.ledger
            # only tasks some candidate ran r times: a task sequential stopping cut short grades "incomplete"
            # whatever the baseline, so fresh runs of it would be spent for nothing
            named = tasks_needing_fresh_runs((((*spec.predicted_fixes, *spec.tasks_at_risk), grids[c.commit] or {})
                                              for c, spec in todo), self.exp.config.r)
            base = self._controller(grading_baseline(ctl, n, incumbent, named, ctl.baseline_dir or corpus))
        for c, spec in todo:
            self._grade_unit(n, c, spec, grids[c.commit], *base)
        if report.adopted and transfer_pending(self.exp, report.adopted):  # freeze and transfer (evolve.round.transfer)
            self.budget.check(self.exp, f"round {n}: freeze and transfer evaluation of {report.adopted}")
            self._controller(run_transfer(self.exp, ctl, n, report.adopted, say=self.say))
        reason = "" if report.adopted else "; ".join(f"{c.slug}: {c.reason}" for c in report.candidates)
        return self._end(n, report.adopted, reason)

    def _controller(self, coro: Any) -> Any:
        try:
            return asyncio.run(coro)
        except GridBudgetSpent as exc:  # evolve.experiment.budget.check_budget before a grid
            raise BudgetStop(str(exc)) from None

    def _end(self, n: int, adopted: str | None, reason: str,
             stop: str | None = None) -> tuple[str | None, str, str | None]:
        self.led.append(RoundEnd(key=f"r{n:02d}:end", round=n, adopted=adopted, reason=reason))
        write_round_summary(self.exp, n)  # rounds/rNN/evolve.md, for the morning
        kill_point("evolve-round-end")
        return adopted, reason, stop

    # ------------------------------------------------------------------------------------------ units
    def _analysis(self, n: int, incumbent: str, rdir: Path, pairs: int) -> tuple[list[Group], dict[str, str]]:
        """Ranked groups (re-ranked against the ledger's rejections) and one line per valid finding."""
        commit = self.exp.commit_of(incumbent)
        prefix = f"{commit}:analysis" + ("" if self.opt.harness_evidence else "-noevidence")
        if not self.led.done(f"{prefix}:review"):
            analyst = self.role(ANALYST)
            self.budget.check(self.exp, "analysis", "analyst", analyst.limits.max_usd, calls=max(pairs, 1))
        result = Analysis(self.exp, self.backends, version=incumbent, harness_evidence=self.opt.harness_evidence,
                          out_dir=rdir / ("analysis" if self.opt.harness_evidence else "analysis-no-harness-evidence"),
                          per_task=self.opt.per_task, max_pairs=self.opt.max_pairs, agents=self.exp.config.agents,
                          limits=self.opt.role_limits or None).run()
        kill_point("evolve-analysis")
        lines = {f.id: f"{f.id} (task {f.task}, failed run {f.failure}): {f.answer.revised_wish.action} "
                       f"(when {f.answer.revised_wish.condition})" for f in result.findings}
        return rank(result.groups, rejected_attempts(self.led.events)), lines

    def _select(self, groups: list[Group]) -> list[tuple[Group, str]]:
        """The groups in the order they are tried: the ranked ones, then (revisit) groups tried and rejected,
        once each, with their failure evidence. The loop takes the first ``candidates`` of them, and the next
        ``spare_groups`` where a proposal or an implementation fails."""
        limit = self.opt.candidates + self.opt.spare_groups
        out = [(g, "") for g in groups if g.status == "ranked"][:limit]
        if len(out) < limit and self.opt.revisit:
            revisited = {(e.proposal.get("group") or {}).get("signature") for e in self.led.find("proposal")
                         if e.proposal.get("revisit_of")}
            for g in groups:
                if g.status == "excluded" and g.signature not in revisited and len(out) < limit:
                    out.append((g, self._evidence(g)))
        return out

    def _evidence(self, g: Group) -> str:
        """Why earlier candidates for this group's signature were rejected."""
        created = [e.key.removesuffix(":created") for e in self.led.find("candidate_created")
                   if (e.proposal.get("group") or {}).get("signature") == g.signature]
        rejected = final_rejections(self.led.events)
        lines = [f"{cid.split(':')[1]}: {e.reason}" for cid in created for e in rejected.get(cid, [])]
        return "; ".join(lines) or "rejected earlier"

    def _evaluation_grid(self, commit: str) -> dict[str, list[bool | None]] | None:
        """The candidate's evaluation grid as it stands (None when it was not evaluated)."""
        ev = self.led.find("evaluation", key=f"{commit}:evaluation")
        return grid_of_job(self.exp.root / ev[0].job_dir)[0] if ev else None

    def _grade_unit(self, n: int, c: Any, spec: ProposalSpec, evaluation: dict | None, baseline: dict,
                    source: str) -> None:
        if evaluation is None:
            data = {"slug": c.slug, "status": c.status, "grade": "not evaluated", "reason": c.reason,
                    "line": f"{c.slug} ({c.status}) before evaluation: {c.reason[:300]}"}
        else:
            g = grade(c.slug, c.status, spec.predicted_fixes, spec.tasks_at_risk, baseline, evaluation,
                      self.exp.config.r, source)
            data = {**g.model_dump(mode="json"), "line": g.line(), "mechanism": spec.mechanism}
        self._append(GradeEvent(key=f"{c.commit}:grade", round=n, slug=c.slug, commit=c.commit, grade=data),
                     "evolve-grade")
