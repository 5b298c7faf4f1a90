"""The proposer's answer and the proposal a round carries (the controller's ``Proposal``, extended).

A proposal states its tier, the cheapest kind of change that carries its mechanism:

- ``settings``: new values for switches the incumbent's Handbook lists (:mod:`evolve.roles.proposals.switches`); the
  candidate is made from the proposal alone (:mod:`evolve.roles.implement.settings_tier`), no coding agent;
- ``prompt``: the text of prompt templates; the implementer edits only them, and each must still render with the
  variables the harness passes (:mod:`evolve.roles.implement.prompt_tier`);
- ``code``: a new mechanism behind a new setting, built by the coding agent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from evolve.roles.proposals.switches import Switch, unchanged
from evolve.round.model import Proposal

SLUG = r"^[a-z][a-z0-9-]{1,40}$"
Tier = Literal["settings", "prompt", "code"]
TIERS: tuple[str, ...] = ("settings", "prompt", "code")


class SettingChange(BaseModel):
    """One switch and the value a settings-tier proposal gives it."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=3, description="a switch listed in the prompt, e.g. terminus.confirmations")
    value: bool | int | float | str = Field(description="its new value, within what the switch allows")


def _tier_required(schema: dict[str, Any]) -> None:
    # a model must state the tier (the schema it answers to requires it); answers written before tiers existed
    # (scripts, recordings) read as code, the only kind there was
    schema["required"] = ["tier", *(k for k in schema.get("required", []) if k != "tier")]


class ProposerAnswer(BaseModel):
    """One mechanism, as the proposer answers it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_tier_required)
    tier: Tier = Field("code", description="settings: new values for listed switches (no new code) | prompt: edit the "
                                   "text of prompt templates | code: a new mechanism in code")
    settings: list[SettingChange] = Field(default_factory=list, description="tier settings: each switch and its "
                                                                            "new value")
    templates: list[str] = Field(default_factory=list, description="tier prompt: the prompt template files to "
                                                                   "edit, e.g. prompts/completion_confirm.j2")
    mechanism: str = Field(pattern=SLUG, description="short slug naming the mechanism, e.g. verify-completion")
    summary: str = Field(min_length=10, description="one sentence: what the harness will do differently")
    behaviour_change: str = Field(min_length=10, description="the behaviour change, under which condition")
    behaviours: list[str] = Field(default_factory=list, description="Handbook behaviour ids it changes or adds")
    functions: list[str] = Field(default_factory=list, description="implementing functions, module:Qualname")
    setting: str = Field("", description="tier code: the new dotted settings.toml key that switches it, e.g. "
                                         "x.enabled")
    dependencies: list[str] = Field(default_factory=list, description="mechanisms or settings it needs")
    interaction_cost: str = Field("", description="extra model calls, tokens or seconds it adds per run")
    expected_outcomes: list[str] = Field(default_factory=list, description="what should change in the results")
    observations: list[str] = Field(default_factory=list, description="what to look for in traces to test it")
    predicted_fixes: list[str] = Field(default_factory=list, description="task ids it should fix")
    tasks_at_risk: list[str] = Field(default_factory=list, description="task ids it might break")
    references: list[str] = Field(default_factory=list, description="reference ids it adapts (none: local)")

    @model_validator(mode="after")
    def _tier_fields(self) -> ProposerAnswer:
        if self.tier == "settings" and not self.settings:
            raise ValueError("tier settings: give `settings`, each switch you change with its new value")
        if self.tier == "prompt" and not self.templates:
            raise ValueError("tier prompt: give `templates`, the prompt template files to edit")
        if self.tier == "code" and len(self.setting) < 3:
            raise ValueError("tier code: give `setting`, the new settings.toml key that switches the mechanism")
        return self


TIER_FIELD = {"settings": "settings", "prompt": "templates", "code": "setting"}  # what each tier must give


def _one_variant_per_tier(allowed: tuple[str, ...]) -> Any:
    """A ``json_schema_extra`` that makes the answer's schema one object variant per tier (``anyOf``), each
    requiring what its tier must give (a non-empty ``settings`` or ``templates``, a ``setting`` name), so that
    constrained decoding cannot name a tier and leave out its values. The validator says the same to a server
    that does not constrain. The night of 2026-12-07: the 1.5B proposer answered tier settings with no
    ``settings``, three times, and the round ended on it."""

    def extra(schema: dict[str, Any]) -> None:
        _tier_required(schema)
        keep = {k: schema.pop(k) for k in ("title", "description", "$defs") if k in schema}
        variants = []
        for tier in allowed:
            v = json.loads(json.dumps(schema))
            v["properties"]["tier"] = {"const": tier, "type": "string",
                                       "description": v["properties"]["tier"].get("description", "")}
            need = TIER_FIELD[tier]
            v["properties"][need] = {**v["properties"][need], **({"minLength": 3} if tier == "code" else
                                                                 {"minItems": 1})}
            v["required"] = [*v.get("required", []), *([need] if need not in v.get("required", []) else [])]
            variants.append(v)
        schema.clear()
        schema.update({**keep, "type": "object", "anyOf": variants})

    return extra


def answer_model(tiers: list[str], switches: Sequence[Switch] = ()) -> type[ProposerAnswer]:
    """The answer model offering only ``tiers`` (constrained decoding then cannot choose another one) and, where
    ``switches`` are given, only their keys for a setting, each at a value other than its current one (the night of
    2026-12-07: the 1.5B put behaviour ids as keys and whole switch lines as values, then a real switch at its
    current value; both were refused after the call)."""
    switch_keys = [s.key for s in switches]
    if set(tiers) == set(TIERS) and not switch_keys:
        return ProposerAnswer
    allowed = tuple(t for t in TIERS if t in tiers)
    if not allowed:
        raise ValueError(f"no known tier among {tiers} (tiers: {', '.join(TIERS)})")
    fields: dict[str, Any] = {"tier": (Literal[allowed], Field(allowed[0], description=ProposerAnswer.model_fields[
        "tier"].description))}
    change: type[SettingChange] = SettingChange
    if switch_keys and "settings" in allowed:
        change = create_model("SettingChange", __base__=SettingChange, key=(
            Literal[tuple(dict.fromkeys(switch_keys))], Field(description=SettingChange.model_fields["key"].description)))
        fields["settings"] = (list[change], Field(default_factory=list, description=ProposerAnswer.model_fields[
            "settings"].description))
    base: type[ProposerAnswer] = ProposerAnswer
    if switches:  # a change to a switch's current value changes nothing: sent back, so the model can fix it
        by_key = {s.key: s for s in switches}

        class _Changes(ProposerAnswer):
            @model_validator(mode="after")
            def _changes_something(self) -> ProposerAnswer:
                same = [f"{c.key} is {by_key[c.key].current!r} already" for c in self.settings
                        if c.key in by_key and unchanged(by_key[c.key], c.value)]
                if same:
                    raise ValueError(f"settings: {'; '.join(same)}: give each switch a NEW value (the current "
                                     "values are listed in the prompt)")
                return self

        base = _Changes
    if allowed == ("settings",):  # the schema itself then asks for the values (a small model left them out)
        fields["settings"] = (list[change], Field(min_length=1, description=ProposerAnswer.model_fields[
            "settings"].description))
    elif len(allowed) > 1:
        class _PerTier(base):  # type: ignore[valid-type,misc]
            model_config = ConfigDict(extra="forbid", json_schema_extra=_one_variant_per_tier(allowed))

        base = _PerTier
    model = create_model("ProposerAnswer", __base__=base, **fields)
    model.__doc__ = ProposerAnswer.__doc__
    return model


class ProposalSpec(Proposal):
    """A proposal of ``rise evolve``: the proposer's answer plus the group it targets. ``tasks`` (what screening
    runs) are its predicted fixes; ``group`` carries the signature and failing runs the ranking of a later
    round uses to recognise a group that was tried and rejected."""

    tier: Tier = "code"
    settings: dict[str, bool | int | float | str] = Field(default_factory=dict, description="tier settings: key -> "
                                                                                            "new value")
    templates: list[str] = Field(default_factory=list, description="tier prompt: the templates to edit")
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
        data["settings"] = {c.key: c.value for c in answer.settings}
        if answer.tier == "settings" and not data["setting"]:
            data["setting"] = ", ".join(data["settings"])
        dev = set(dev_tasks)
        data["predicted_fixes"] = [t for t in answer.predicted_fixes if t in dev]
        data["tasks_at_risk"] = [t for t in answer.tasks_at_risk if t in dev]
        keep = {k: group.get(k) for k in ("id", "name", "wish", "signature", "failing_runs", "tasks") if k in group}
        return cls(**data, tasks=data["predicted_fixes"], group=keep, revisit_of=revisit_of)

    def text(self) -> str:
        """Every free-text field, for the overfitting guard."""
        parts = [self.summary, self.behaviour_change, self.interaction_cost, self.setting,
                 *self.expected_outcomes, *self.observations, *self.dependencies, *self.functions,
                 *(f"{k} = {v}" for k, v in self.settings.items()), *self.templates]
        return "\n".join(p for p in parts if p)
