"""The paid steps of one ``rise evolve`` round between the analysis and the controller: research for a selected
group, one proposal per group (through the overfitting guard), and the candidate's implementation. Each step is a
keyed ledger unit (a resumed loop returns what the ledger holds) and checks the loop's budget before its role call.
A collaborator of :class:`evolve.loop.Evolution`: it reaches back to the loop for the experiment, ledger, options,
budget and role backends."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from evolve.experiment.ledger import ImplementationEvent, ProposalEvent, ResearchEvent
from evolve.experiment.units import unit_file
from evolve.roles.analysis.models import Group
from evolve.roles.analysis.pipeline import call_info, error_info
from evolve.roles.implement import IMPLEMENTER, diff_of, implement
from evolve.roles.implement.tier_units import prompt_refusal, settings_unit
from evolve.roles.proposals import PROPOSER, OverfitGuard, ProposalSpec, ProposerInputs, propose
from evolve.roles.runtime import RoleError
from evolve.round.controller import Controller

log = logging.getLogger(__name__)


class RoundSteps:
    """Research, proposal and implementation units of a round (see the module docstring)."""

    def __init__(self, evo: Any):
        self.evo = evo  # the loop: exp, led, opt, budget, role(), backends(), _research(), _append()

    def research(self, n: int, g: Group, rdir: Path) -> dict[str, Any]:
        from evolve.roles.researcher import (
            DISABLED,
            RESEARCHER,
            ResearchOutcome,
            inputs_from_group,
            research_group,
        )
        from research.sources import ResearchError

        key = f"r{n:02d}:research:{g.id}"
        if (ev := self.evo.led.find("research", key=key)):
            return ev[0].outcome
        inputs = inputs_from_group(g).model_dump(mode="json")
        if self.evo.opt.external_research and (earlier := self.earlier_research(inputs)) is not None:
            # the same question, asked in an earlier round (a round that ended without a candidate keeps its
            # incumbent, so its analysis and groups come back unchanged): its answer, not a second call; the
            # night of 2026-12-07 paid the researcher four times for one group's identical inputs
            source = earlier.role_call.get("reused_from") or earlier.key
            self.evo.say(f"round {n}: research for group {g.name!r}: the answer of {source} (the same inputs; "
                         "no second call)")
            self.evo._append(ResearchEvent(key=key, round=n, group=g.id, outcome=earlier.outcome,
                                           role_call={"role": "researcher", "reused_from": source}, inputs=inputs),
                             "evolve-research")
            return earlier.outcome
        if not self.evo.opt.external_research:
            outcome, info = ResearchOutcome(group=g.name, wish=g.wish, outcome="disabled", statement=DISABLED), {}
        else:
            role = self.evo.role(RESEARCHER)
            self.evo.budget.check(self.evo.exp, f"research for group {g.name}", "researcher", role.limits.max_usd)
            try:
                research = self.evo._research()
            except (ResearchError, OSError) as exc:  # offline without a cached corpus: a local design
                log.warning("research corpus unavailable: %s", exc)
                research = None
                outcome = ResearchOutcome(group=g.name, wish=g.wish, outcome="no_precedent",
                                          statement=f"research corpus unavailable ({exc}): local design")
                info = {}
            try:
                if research is not None:  # the configured role; its result saved before the event
                    outcome = research_group(inputs_from_group(g), rdir, self.evo.backends("researcher", key),
                                             research, role=role, saved=unit_file(rdir, key),
                                             transcripts=rdir / "transcripts")
                    info = {"role": "researcher", "call_id": outcome.call_id, "transcript": outcome.transcript,
                            "cost": outcome.cost}
            except RoleError as exc:
                outcome = ResearchOutcome(group=g.name, wish=g.wish, outcome="no_precedent",
                                          statement=f"research failed: {exc}")
                info = error_info(exc)
        self.evo._append(ResearchEvent(key=key, round=n, group=g.id, outcome=outcome.model_dump(mode="json"),
                                   role_call=info, inputs=inputs), "evolve-research")
        return outcome.model_dump(mode="json")

    def earlier_research(self, inputs: dict[str, Any]) -> ResearchEvent | None:
        """The newest research event of this experiment for the same researcher inputs whose call finished (a
        failed or interrupted call, or a corpus that was unavailable, is asked again), or None."""
        for e in reversed(self.evo.led.find("research")):
            if e.inputs == inputs and not e.role_call.get("error") and (
                    e.role_call.get("call_id") or e.role_call.get("reused_from")):
                return e
        return None

    def history(self) -> list[str]:
        """Earlier proposals and what became of them, for the next proposer."""
        lines = [f"round {e.round}: {e.grade.get('line', '')}" for e in self.evo.led.find("grade")]
        lines += [f"round {e.round}: {e.slug} refused: {e.reason[:300]}" for e in self.evo.led.find("proposal")
                  if e.status == "refused"]
        return lines

    def proposal(self, n: int, g: Group, findings: list[str], research: dict[str, Any], revisit: str,
                       stable: list[str],
                       guard: OverfitGuard, ctl: Controller, workspace: Path,
                       rdir: Path) -> tuple[str, ProposalSpec] | None:
        key = f"r{n:02d}:proposal:{g.id}"
        if (ev := self.evo.led.find("proposal", key=key)):
            e = ev[0]
            return (e.slug, ProposalSpec.model_validate(e.proposal)) if e.status == "valid" else None
        role = self.evo.role(PROPOSER)
        self.evo.budget.check(self.evo.exp, f"proposal for group {g.name}", "proposer", role.limits.max_usd)
        refs = [{"id": r["reference"]["id"], "framework": r["reference"].get("framework", ""),
                 "path": r["reference"].get("path", ""), "how": r["note"]["how"]}
                for r in research.get("references", [])]
        inputs = ProposerInputs(group={"id": g.id, "name": g.name, "wish": g.wish, "tasks": g.tasks,
                                       "behaviours": g.behaviours},
                                findings=findings, references=refs, history=self.history(),
                                revisit=revisit, dev_tasks=ctl.dev_tasks(), stable_tasks=stable,
                                tiers=list(self.evo.opt.tiers), strict_switches=self.evo.opt.strict_switches)
        try:
            spec, verdict, res = propose(inputs, workspace, self.evo.backends("proposer", key), guard, role=role,
                                         saved=unit_file(rdir, key), transcripts=rdir / "transcripts",
                                         harness=workspace)
        except RoleError as exc:
            self.evo._append(ProposalEvent(key=key, round=n, slug="", status="failed", reason=str(exc),
                                       role_call=error_info(exc)), "evolve-proposal")
            return None
        group = g.model_dump(mode="json", include={"id", "name", "wish", "signature", "failing_runs", "tasks"})
        revisit_of = self.evidence_slug(g) if revisit else None
        spec = spec.model_copy(update={"group": group, "revisit_of": revisit_of})
        used = {e.slug for e in self.evo.led.find("proposal") if e.round == n}
        slug, i = spec.mechanism, 2
        while slug in used:
            slug, i = f"{spec.mechanism}-{i}", i + 1
        status = "refused" if verdict.refused else "valid"
        self.evo._append(ProposalEvent(key=key, round=n, slug=slug, status=status, proposal=spec.model_dump(mode="json"),
                                   reason=verdict.reason(), role_call=call_info(res)), "evolve-proposal")
        return (slug, spec) if status == "valid" else None

    def evidence_slug(self, g: Group) -> str | None:
        for e in self.evo.led.find("candidate_created"):
            if (e.proposal.get("group") or {}).get("signature") == g.signature:
                return e.key.split(":")[1]
        return None

    def implementation(self, n: int, slug: str, spec: ProposalSpec, guard: OverfitGuard, incumbent: str,
                             incumbent_dir: Path, rdir: Path) -> str | None:
        key = f"r{n:02d}:implementation:{slug}"
        if (ev := self.evo.led.find("implementation", key=key)):
            return ev[0].branch if ev[0].status == "done" else None
        if spec.tier == "settings":  # made from the proposal alone: no coding agent, no model call
            event = settings_unit(self.evo.exp, n, slug, spec, guard, incumbent, incumbent_dir, key)
            self.evo._append(event, "evolve-implementation")
            return event.branch if event.status == "done" else None
        role = self.evo.role(IMPLEMENTER)
        self.evo.budget.check(self.evo.exp, f"implementation of {slug}", "implementer", role.limits.max_usd)
        try:
            branch, commit, res = implement(self.evo.exp, n, spec, self.evo.backends("implementer", key), slug=slug,
                                            incumbent_dir=incumbent_dir, role=role, saved=unit_file(rdir, key),
                                            transcripts=rdir / "transcripts")
        except RoleError as exc:
            self.evo._append(ImplementationEvent(key=key, round=n, slug=slug, status="failed", reason=str(exc),
                                             role_call=error_info(exc)), "evolve-implementation")
            return None
        diff = diff_of(self.evo.exp, self.evo.exp.commit_of(incumbent), commit)
        verdict = guard.check_patch(diff)
        status, reason = "done", ""
        if not diff.strip():
            status, reason = "failed", "the implementer changed nothing"
        elif verdict.refused:
            status, reason = "refused", verdict.reason()
        elif spec.tier == "prompt" and (refusal := prompt_refusal(
                self.evo.exp, incumbent, commit, self.evo.exp.root / "worktrees" / f"r{n:02d}-{slug}" / "harness",
                incumbent_dir)):
            status, reason = "refused", refusal
        self.evo._append(ImplementationEvent(key=key, round=n, slug=slug, status=status, branch=branch, commit=commit,
                                         reason=reason, report=res.output.model_dump(mode="json"),
                                         role_call=call_info(res)), "evolve-implementation")
        return branch if status == "done" else None
