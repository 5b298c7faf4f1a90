"""The proposer role and :func:`propose`: one ranked group in, one checked :class:`ProposalSpec` out (or a
refusal by the overfitting guard, which the caller records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evolve.agents import READ_ONLY_TOOLS, Limits, Role, RoleResult, register_role, run_role
from evolve.agents.backends import Backend

from .guard import GuardReport, OverfitGuard
from .models import ProposalSpec, ProposerAnswer


class ProposerInputs(BaseModel):
    """What the proposer sees (rendered by ``proposer.md.j2``)."""

    group: dict[str, Any] = Field(description="the ranked group: name, wish, tasks, behaviours")
    findings: list[str] = Field(default_factory=list, description="its member findings, one line each")
    references: list[dict[str, Any]] = Field(default_factory=list, description="id, framework, path, how")
    history: list[str] = Field(default_factory=list, description="earlier proposals with their grades")
    revisit: str = Field("", description="failure evidence when this group was tried and rejected")
    dev_tasks: list[str] = Field(default_factory=list)
    stable_tasks: list[str] = Field(default_factory=list, description="tasks that passed every run")


PROPOSER = register_role(Role(
    name="proposer",
    description="You design one general mechanism for an agent harness from evidence of failed runs.",
    template=Path(__file__).with_name("proposer.md.j2"),
    output=ProposerAnswer,
    inputs=ProposerInputs,
    tools=READ_ONLY_TOOLS,
    limits=Limits(max_turns=10, max_output_tokens=1500, deadline_s=1200, corrective_turns=2),
))


def propose(inputs: ProposerInputs, workspace: str | Path, backend: Backend, guard: OverfitGuard, *,
            role: Role = PROPOSER, saved: Path | None = None,
            **run_options: Any) -> tuple[ProposalSpec, GuardReport, RoleResult]:
    """Run the proposer on one group; the guard's report says whether the proposal must be refused.

    ``run_options`` go to :func:`run_role` (``transcripts``, ``budget``, ``harness``); a RoleError propagates.
    ``saved``: where the call's result is written when it returns; a resume that finds it makes no second call
    (:func:`evolve.units.run_once`)."""
    from evolve.units import run_once

    def call() -> RoleResult:
        return run_role(role, inputs, workspace, backend, **run_options)

    result = run_once(saved, role, call) if saved is not None else call()
    spec = ProposalSpec.from_answer(result.output, inputs.group, inputs.dev_tasks)  # type: ignore[arg-type]
    return spec, guard.check(spec.text(), "proposal"), result
