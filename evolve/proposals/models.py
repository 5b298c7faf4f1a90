"""The proposer's answer and the proposal a round carries (the controller's ``Proposal``, extended)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolve.round_model import Proposal

SLUG = r"^[a-z][a-z0-9-]{1,40}$"


class ProposerAnswer(BaseModel):
    """One mechanism, as the proposer answers it."""

    model_config = ConfigDict(extra="forbid")
    mechanism: str = Field(pattern=SLUG, description="short slug naming the mechanism, e.g. verify-completion")
    summary: str = Field(min_length=10, description="one sentence: what the harness will do differently")
    behaviour_change: str = Field(min_length=10, description="the behaviour change, under which condition")
    behaviours: list[str] = Field(default_factory=list, description="Handbook behaviour ids it changes or adds")
    functions: list[str] = Field(default_factory=list, description="implementing functions, module:Qualname")
    setting: str = Field(min_length=3, description="dotted settings.toml key that switches it, e.g. x.enabled")
    dependencies: list[str] = Field(default_factory=list, description="mechanisms or settings it needs")
    interaction_cost: str = Field("", description="extra model calls, tokens or seconds it adds per run")
    expected_outcomes: list[str] = Field(default_factory=list, description="what should change in the results")
    observations: list[str] = Field(default_factory=list, description="what to look for in traces to test it")
    predicted_fixes: list[str] = Field(default_factory=list, description="task ids it should fix")
    tasks_at_risk: list[str] = Field(default_factory=list, description="task ids it might break")
    references: list[str] = Field(default_factory=list, description="reference ids it adapts (none: local)")


class ProposalSpec(Proposal):
    """A proposal of ``rise evolve``: the proposer's answer plus the group it targets. ``tasks`` (what screening
    runs) are its predicted fixes; ``group`` carries the signature and failing runs the ranking of a later
    round uses to recognise a group that was tried and rejected."""

    behaviour_change: str = ""
    behaviours: list[str] = Field(default_factory=list)
    functions: list[str] = Field(default_factory=list)
    setting: str = ""
    dependencies: list[str] = Field(default_factory=list)
    interaction_cost: str = ""
    expected_outcomes: list[str] = Field(default_factory=list)
    observations: list[str] = Field(default_factory=list)
    predicted_fixes: list[str] = Field(default_factory=list)
    tasks_at_risk: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    group: dict[str, Any] = Field(default_factory=dict, description="id, name, signature, failing_runs, tasks")
    revisit_of: str | None = Field(default=None, description="slug of the rejected proposal it re-implements")

    @classmethod
    def from_answer(cls, answer: ProposerAnswer, group: dict[str, Any], dev_tasks: list[str],
                    revisit_of: str | None = None) -> ProposalSpec:
        """The spec of an answer; predictions naming tasks outside the development set are dropped (a held-out
        task may not steer anything)."""
        data = answer.model_dump()
        dev = set(dev_tasks)
        data["predicted_fixes"] = [t for t in answer.predicted_fixes if t in dev]
        data["tasks_at_risk"] = [t for t in answer.tasks_at_risk if t in dev]
        keep = {k: group.get(k) for k in ("id", "name", "wish", "signature", "failing_runs", "tasks") if k in group}
        return cls(**data, tasks=data["predicted_fixes"], group=keep, revisit_of=revisit_of)

    def text(self) -> str:
        """Every free-text field, for the overfitting guard."""
        parts = [self.summary, self.behaviour_change, self.interaction_cost, self.setting,
                 *self.expected_outcomes, *self.observations, *self.dependencies, *self.functions]
        return "\n".join(p for p in parts if p)
