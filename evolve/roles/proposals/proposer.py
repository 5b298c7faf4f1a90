"""The proposer role and :func:`propose`: one ranked group in, one checked :class:`ProposalSpec` out (or a
refusal, which the caller records: by the overfitting guard, or a settings-tier proposal naming a key the
Handbook does not list or a value outside the harness's settings schema, or a prompt-tier one naming no template
of the harness)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolve.roles.proposals.models import TIERS, ProposalSpec, ProposerAnswer, answer_model
from evolve.roles.proposals.prompt_tier import prompt_templates
from evolve.roles.proposals.switches import Switch, check_changes, harness_switches
from evolve.roles.runtime import READ_ONLY_TOOLS, Limits, Role, RoleResult, register_role, run_role
from evolve.roles.runtime.backends import Backend
from evolve.round.guard import GuardReport, OverfitGuard
from handbook.model import load_handbook


class ProposedGroup(BaseModel):
    """The ranked group a proposal is for, as the proposer reads it."""

    model_config = ConfigDict(extra="forbid")
    id: str = ""
    name: str = Field(min_length=1)
    wish: str = Field(min_length=3, description="the common wish of its findings")
    tasks: list[str] = Field(default_factory=list, description="tasks where runs flipped because of it")
    behaviours: list[str] = Field(default_factory=list, description="Handbook behaviour ids involved")


class DesignReference(BaseModel):
    """One reference the researcher found, as the proposer reads it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    framework: str = ""
    path: str = ""
    how: str = Field(min_length=1, description="how that framework handles the problem")


class ProposerInputs(BaseModel):
    """What the proposer sees (rendered by ``proposer.md.j2``)."""

    model_config = ConfigDict(extra="forbid")
    group: ProposedGroup = Field(description="the ranked group: name, wish, tasks, behaviours")
    findings: list[str] = Field(default_factory=list, description="its member findings, one line each")
    references: list[DesignReference] = Field(default_factory=list, description="id, framework, path, how")
    history: list[str] = Field(default_factory=list, description="earlier proposals with their grades")
    revisit: str = Field("", description="failure evidence when this group was tried and rejected")
    dev_tasks: list[str] = Field(default_factory=list)
    stable_tasks: list[str] = Field(default_factory=list, description="tasks that passed every run")
    switches: list[Switch] = Field(default_factory=list, description="the settings tier's switches (current and "
                                                                     "allowed values); filled from the harness")
    templates: list[str] = Field(default_factory=list, description="the prompt tier's templates")
    tiers: list[str] = Field(default_factory=lambda: list(TIERS), description="the tiers this experiment allows")
    strict_switches: bool = Field(False, description="a setting's key in the answer's schema is one of the "
                                  "switches (constrained decoding cannot name another); off by default only "
                                  "because the stored recordings were made without it")
    involved: list[Switch] = Field(default_factory=list, description="the switches of the group's behaviours, "
                                                                     "shown next to the findings")


class Verdict(BaseModel):
    """Whether a proposal is refused, and why: the overfitting guard's report and the tier's problems."""

    guard: GuardReport
    problems: list[str] = Field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.guard.refused or bool(self.problems)

    def reason(self) -> str:
        return "; ".join(p for p in (self.guard.reason(), *self.problems) if p)


PROPOSER = register_role(Role(
    name="proposer",
    description="You design one general mechanism for an agent harness from evidence of failed runs.",
    template=Path(__file__).with_name("proposer.md.j2"),
    output=ProposerAnswer,
    inputs=ProposerInputs,
    tools=READ_ONLY_TOOLS,
    limits=Limits(max_turns=10, max_output_tokens=1500, deadline_s=1200, corrective_turns=2),
))


def tier_problems(spec: ProposalSpec, harness: Path, switches: list[Switch]) -> tuple[ProposalSpec, list[str]]:
    """The spec with its settings coerced to their switches' types, and what refuses its tier (named)."""
    if spec.tier == "settings":
        values, problems = check_changes(harness, spec.settings, switches)
        settings = spec.settings if problems else values  # keys as the switches name them, values typed
        steered = {b for s in switches if s.key in settings for b in s.behaviours}
        spans = sorted({span for _, b in load_handbook(harness).iter_behaviours() if b.id in steered
                        for span in b.spans})  # screening: the behaviours the switches steer must run
        return spec.model_copy(update={"settings": settings,
                                       "boundaries": spec.boundaries or spans}), problems
    if spec.tier == "prompt":
        known = prompt_templates(harness)
        unknown = [t for t in spec.templates if t not in known]
        if unknown:
            known_text = ", ".join(known)
            return spec, [f"prompt template {', '.join(unknown)} is not a template of the harness (templates: "
                          + known_text + ")"]
    return spec, []


def propose(inputs: ProposerInputs, workspace: str | Path, backend: Backend, guard: OverfitGuard, *,
            role: Role = PROPOSER, saved: Path | None = None,
            **run_options: Any) -> tuple[ProposalSpec, Verdict, RoleResult]:
    """Run the proposer on one group (``workspace``: the incumbent's harness); the verdict says whether the
    proposal must be refused (the overfitting guard applies to every tier; a settings or prompt tier must name
    what the harness has).

    ``run_options`` go to :func:`run_role` (``transcripts``, ``budget``, ``harness``); a RoleError propagates.
    ``saved``: where the call's result is written when it returns; a resume that finds it makes no second call
    (:func:`evolve.experiment.units.run_once`)."""
    from evolve.experiment.units import run_once

    harness = Path(workspace)
    if not inputs.switches and "settings" in inputs.tiers:
        inputs = inputs.model_copy(update={"switches": harness_switches(harness)})
    strict = inputs.switches if inputs.strict_switches and "settings" in inputs.tiers else []
    if set(inputs.tiers) != set(TIERS) or strict:  # the answer's schema offers only the allowed tiers (and keys)
        role = role.model_copy(update={"output": answer_model(inputs.tiers, strict)})
    if not inputs.involved:
        behaviours = set(inputs.group.behaviours)
        inputs = inputs.model_copy(update={"involved": [s for s in inputs.switches if behaviours & set(s.behaviours)]})
    if not inputs.templates and "prompt" in inputs.tiers:
        inputs = inputs.model_copy(update={"templates": prompt_templates(harness)})

    def call() -> RoleResult:
        return run_role(role, inputs, workspace, backend, **run_options)

    result = run_once(saved, role, call) if saved is not None else call()
    spec = ProposalSpec.from_answer(result.output, inputs.group.model_dump(),  # type: ignore[arg-type]
                                    inputs.dev_tasks)
    spec, problems = tier_problems(spec, harness, inputs.switches)
    if spec.tier not in inputs.tiers:
        problems.append(f"tier {spec.tier} is not allowed in this experiment (allowed: {', '.join(inputs.tiers)})")
    return spec, Verdict(guard=guard.check(spec.text(), "proposal"), problems=problems), result
