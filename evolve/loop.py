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

from evolve.experiment.budget import BudgetStop, LoopBudget
from evolve.experiment.identity import final_rejections
from evolve.experiment.ledger import (
    EvolveStop,
    GradeEvent,
    ImplementationEvent,
    ProposalEvent,
    ResearchEvent,
    RoundEnd,
    RoundStart,
)
from evolve.experiment.lock import experiment_lock
from evolve.experiment.store import Experiment
from evolve.experiment.units import unit_file
from evolve.options import BackendFactory, EvolveOptions, EvolveReport, default_backends
from evolve.roles.analysis.models import Group
from evolve.roles.analysis.pairs import make_pairs
from evolve.roles.analysis.pipeline import Analysis, call_info, error_info
from evolve.roles.analysis.ranking import rank, rejected_attempts
from evolve.roles.analysis.roles import ANALYST, with_limits
from evolve.roles.implement import IMPLEMENTER, diff_of, implement, repair_hook
from evolve.roles.implement.tier_units import prompt_refusal, settings_unit
from evolve.roles.proposals import PROPOSER, OverfitGuard, ProposalSpec, ProposerInputs, propose
from evolve.roles.runtime import Role, RoleError
from evolve.round.controller import CandidateInput, Checks, Controller, ControllerError
from evolve.round.grading import grade
from evolve.round.grading_runs import grading_baseline
from evolve.round.transfer import run_transfer, transfer_pending
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
        ctl = Controller(self.exp, checks=self.checks, env_factory=self.env_factory, progress=self.progress)
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
        self.say(f"round {n}: {len(findings)} finding(s), {len(groups)} group(s); selected: "
                 + (", ".join(g.name for g, _ in selected) or "none"))
        if not selected:
            return self._end(n, None, "no group of findings to propose for", "final")
        guard = OverfitGuard(ctl.tasks_dir, ctl.dev_tasks())
        cands = []
        for g, revisit in selected:
            self.say(f"round {n}: research, then a proposal, for group {g.name!r}")
            research = self._research_unit(n, g, rdir)
            lines = [findings[m] for m in g.members if m in findings]
            made = self._proposal_unit(n, g, lines, research, revisit, pairs.at_risk, guard, ctl, incumbent_dir,
                                       rdir)
            if made is None:
                continue
            slug, spec = made
            self.say(f"round {n}: the implementer builds {slug!r} on cand/{rkey}-{slug}")
            self.specs[f"{rkey}-{slug}"] = spec
            branch = self._implementation_unit(n, slug, spec, guard, incumbent, incumbent_dir, rdir)
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
        if any(self.led.find("evaluation", key=f"{c.commit}:evaluation") for c, _ in todo):
            # graded against runs that did not choose the tasks (evolve.round.grading_runs), not the corpus
            self.budget.check(self.exp, f"round {n}: the grading baseline")
            ctl.led = self.exp.ledger
            named = {t for _, spec in todo for t in (*spec.predicted_fixes, *spec.tasks_at_risk)}
            base = self._controller(grading_baseline(ctl, n, incumbent, named, ctl.baseline_dir or corpus))
        for c, spec in todo:
            self._grade_unit(n, c, spec, *base)
        if report.adopted and transfer_pending(self.exp, report.adopted):  # freeze and transfer (evolve.round.transfer)
            self.budget.check(self.exp, f"round {n}: freeze and transfer evaluation of {report.adopted}")
            self._controller(run_transfer(self.exp, ctl, n, report.adopted, say=self.say))
        reason = "" if report.adopted else "; ".join(f"{c.slug}: {c.reason}" for c in report.candidates)
        return self._end(n, report.adopted, reason)

    def _controller(self, coro: Any) -> Any:
        try:
            return asyncio.run(coro)
        except ControllerError as exc:
            if "budget spent" in str(exc):  # evolve.experiment.budget.check_budget before a grid
                raise BudgetStop(str(exc)) from None
            raise

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
        """The top groups, then (revisit) groups tried and rejected, once each, with their failure evidence."""
        out = [(g, "") for g in groups if g.status == "ranked"][: self.opt.candidates]
        if len(out) < self.opt.candidates and self.opt.revisit:
            revisited = {(e.proposal.get("group") or {}).get("signature") for e in self.led.find("proposal")
                         if e.proposal.get("revisit_of")}
            for g in groups:
                if g.status == "excluded" and g.signature not in revisited and len(out) < self.opt.candidates:
                    out.append((g, self._evidence(g)))
        return out

    def _evidence(self, g: Group) -> str:
        """Why earlier candidates for this group's signature were rejected."""
        created = [e.key.removesuffix(":created") for e in self.led.find("candidate_created")
                   if (e.proposal.get("group") or {}).get("signature") == g.signature]
        rejected = final_rejections(self.led.events)
        lines = [f"{cid.split(':')[1]}: {e.reason}" for cid in created for e in rejected.get(cid, [])]
        return "; ".join(lines) or "rejected earlier"

    def _research_unit(self, n: int, g: Group, rdir: Path) -> dict[str, Any]:
        from evolve.roles.researcher import (
            DISABLED,
            RESEARCHER,
            ResearchOutcome,
            inputs_from_group,
            research_group,
        )
        from research.sources import ResearchError

        key = f"r{n:02d}:research:{g.id}"
        if (ev := self.led.find("research", key=key)):
            return ev[0].outcome
        if not self.opt.external_research:
            outcome, info = ResearchOutcome(group=g.name, wish=g.wish, outcome="disabled", statement=DISABLED), {}
        else:
            role = self.role(RESEARCHER)
            self.budget.check(self.exp, f"research for group {g.name}", "researcher", role.limits.max_usd)
            try:
                research = self._research()
            except (ResearchError, OSError) as exc:  # offline without a cached corpus: a local design
                log.warning("research corpus unavailable: %s", exc)
                research = None
                outcome = ResearchOutcome(group=g.name, wish=g.wish, outcome="no_precedent",
                                          statement=f"research corpus unavailable ({exc}): local design")
                info = {}
            try:
                if research is not None:  # the configured role; its result saved before the event
                    outcome = research_group(inputs_from_group(g), rdir, self.backends("researcher", key),
                                             research, role=role, saved=unit_file(rdir, key),
                                             transcripts=rdir / "transcripts")
                    info = {"role": "researcher", "call_id": outcome.call_id, "transcript": outcome.transcript,
                            "cost": outcome.cost}
            except RoleError as exc:
                outcome = ResearchOutcome(group=g.name, wish=g.wish, outcome="no_precedent",
                                          statement=f"research failed: {exc}")
                info = error_info(exc)
        self._append(ResearchEvent(key=key, round=n, group=g.id, outcome=outcome.model_dump(mode="json"),
                                   role_call=info), "evolve-research")
        return outcome.model_dump(mode="json")

    def history(self) -> list[str]:
        """Earlier proposals and what became of them, for the next proposer."""
        lines = [f"round {e.round}: {e.grade.get('line', '')}" for e in self.led.find("grade")]
        lines += [f"round {e.round}: {e.slug} refused: {e.reason[:300]}" for e in self.led.find("proposal")
                  if e.status == "refused"]
        return lines

    def _proposal_unit(self, n: int, g: Group, findings: list[str], research: dict[str, Any], revisit: str,
                       stable: list[str],
                       guard: OverfitGuard, ctl: Controller, workspace: Path,
                       rdir: Path) -> tuple[str, ProposalSpec] | None:
        key = f"r{n:02d}:proposal:{g.id}"
        if (ev := self.led.find("proposal", key=key)):
            e = ev[0]
            return (e.slug, ProposalSpec.model_validate(e.proposal)) if e.status == "valid" else None
        role = self.role(PROPOSER)
        self.budget.check(self.exp, f"proposal for group {g.name}", "proposer", role.limits.max_usd)
        refs = [{"id": r["reference"]["id"], "framework": r["reference"].get("framework", ""),
                 "path": r["reference"].get("path", ""), "how": r["note"]["how"]}
                for r in research.get("references", [])]
        inputs = ProposerInputs(group={"id": g.id, "name": g.name, "wish": g.wish, "tasks": g.tasks,
                                       "behaviours": g.behaviours},
                                findings=findings, references=refs, history=self.history(),
                                revisit=revisit, dev_tasks=ctl.dev_tasks(), stable_tasks=stable,
                                tiers=list(self.opt.tiers))
        try:
            spec, verdict, res = propose(inputs, workspace, self.backends("proposer", key), guard, role=role,
                                         saved=unit_file(rdir, key), transcripts=rdir / "transcripts",
                                         harness=workspace)
        except RoleError as exc:
            self._append(ProposalEvent(key=key, round=n, slug="", status="failed", reason=str(exc),
                                       role_call=error_info(exc)), "evolve-proposal")
            return None
        group = g.model_dump(mode="json", include={"id", "name", "wish", "signature", "failing_runs", "tasks"})
        revisit_of = self._evidence_slug(g) if revisit else None
        spec = spec.model_copy(update={"group": group, "revisit_of": revisit_of})
        used = {e.slug for e in self.led.find("proposal") if e.round == n}
        slug, i = spec.mechanism, 2
        while slug in used:
            slug, i = f"{spec.mechanism}-{i}", i + 1
        status = "refused" if verdict.refused else "valid"
        self._append(ProposalEvent(key=key, round=n, slug=slug, status=status, proposal=spec.model_dump(mode="json"),
                                   reason=verdict.reason(), role_call=call_info(res)), "evolve-proposal")
        return (slug, spec) if status == "valid" else None

    def _evidence_slug(self, g: Group) -> str | None:
        for e in self.led.find("candidate_created"):
            if (e.proposal.get("group") or {}).get("signature") == g.signature:
                return e.key.split(":")[1]
        return None

    def _implementation_unit(self, n: int, slug: str, spec: ProposalSpec, guard: OverfitGuard, incumbent: str,
                             incumbent_dir: Path, rdir: Path) -> str | None:
        key = f"r{n:02d}:implementation:{slug}"
        if (ev := self.led.find("implementation", key=key)):
            return ev[0].branch if ev[0].status == "done" else None
        if spec.tier == "settings":  # made from the proposal alone: no coding agent, no model call
            event = settings_unit(self.exp, n, slug, spec, guard, incumbent, incumbent_dir, key)
            self._append(event, "evolve-implementation")
            return event.branch if event.status == "done" else None
        role = self.role(IMPLEMENTER)
        self.budget.check(self.exp, f"implementation of {slug}", "implementer", role.limits.max_usd)
        try:
            branch, commit, res = implement(self.exp, n, spec, self.backends("implementer", key), slug=slug,
                                            incumbent_dir=incumbent_dir, role=role, saved=unit_file(rdir, key),
                                            transcripts=rdir / "transcripts")
        except RoleError as exc:
            self._append(ImplementationEvent(key=key, round=n, slug=slug, status="failed", reason=str(exc),
                                             role_call=error_info(exc)), "evolve-implementation")
            return None
        diff = diff_of(self.exp, self.exp.commit_of(incumbent), commit)
        verdict = guard.check_patch(diff)
        status, reason = "done", ""
        if not diff.strip():
            status, reason = "failed", "the implementer changed nothing"
        elif verdict.refused:
            status, reason = "refused", verdict.reason()
        elif spec.tier == "prompt" and (refusal := prompt_refusal(
                self.exp, incumbent, commit, self.exp.root / "worktrees" / f"r{n:02d}-{slug}" / "harness",
                incumbent_dir)):
            status, reason = "refused", refusal
        self._append(ImplementationEvent(key=key, round=n, slug=slug, status=status, branch=branch, commit=commit,
                                         reason=reason, report=res.output.model_dump(mode="json"),
                                         role_call=call_info(res)), "evolve-implementation")
        return branch if status == "done" else None

    def _grade_unit(self, n: int, c: Any, spec: ProposalSpec, baseline: dict, source: str) -> None:
        ev = self.led.find("evaluation", key=f"{c.commit}:evaluation")
        if not ev:
            data = {"slug": c.slug, "status": c.status, "grade": "not evaluated", "reason": c.reason,
                    "line": f"{c.slug} ({c.status}) before evaluation: {c.reason[:300]}"}
        else:
            g = grade(c.slug, c.status, spec.predicted_fixes, spec.tasks_at_risk, baseline,
                      grid_of_job(self.exp.root / ev[0].job_dir)[0], self.exp.config.r, source)
            data = {**g.model_dump(mode="json"), "line": g.line(), "mechanism": spec.mechanism}
        self._append(GradeEvent(key=f"{c.commit}:grade", round=n, slug=c.slug, commit=c.commit, grade=data),
                     "evolve-grade")
