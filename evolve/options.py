"""What ``rise evolve`` is asked to do (:class:`EvolveOptions`), what it reports, and the role backends it uses
by default (experiment.toml's ``[agents]``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from evolve.experiment.store import Experiment
from evolve.roles.runtime import Backend

BackendFactory = Callable[[str, str], Backend]  # (role name, call key) -> the backend of that call


class EvolveOptions(BaseModel):
    """What ``rise evolve`` was asked to do."""

    rounds: int = Field(ge=1, description="the last round number to reach")
    candidates: int = Field(1, ge=1, description="groups (so candidates) per round")
    spare_groups: int = Field(2, ge=0, description="groups tried after those when a proposal or an implementation "
                              "fails (the next ranked ones); the candidates evaluated stay at most `candidates`")
    resume: bool = False
    external_research: bool = True
    harness_evidence: bool = True
    patience: int = Field(2, ge=1, description="rounds in a row without adoption before stopping")
    revisit: bool = Field(True, description="re-propose a rejected group once, with its failure evidence")
    max_usd: float | None = Field(None, description="default: budgets.max_usd of experiment.toml")
    max_tokens: int | None = None
    max_trials: int | None = Field(None, description="default: budgets.max_trials of experiment.toml")
    max_hours: float | None = None
    per_task: int = 2
    max_pairs: int | None = None
    max_repairs: int = 2
    role_limits: dict[str, Any] = Field(default_factory=dict, description="Limits fields for every role")
    strict_switches: bool = Field(False, description="the proposer's schema allows only the Handbook's switches "
                                  "as setting keys (for small models on a constraining server)")
    tiers: list[Literal["settings", "prompt", "code"]] = Field(
        default_factory=lambda: ["settings", "prompt", "code"], min_length=1,
        description="the mechanism tiers a proposal may take (a model that cannot write code: settings, prompt)")


class EvolveReport(BaseModel):
    rounds: list[dict[str, Any]] = Field(default_factory=list, description="round, adopted, reason")
    stopped: str = ""
    final: bool = True


def default_backends(exp: Experiment) -> BackendFactory:
    """Backends from experiment.toml's ``[agents]`` (one per role; the experiment's endpoint by default)."""
    cache: dict[str, Backend] = {}

    def factory(role: str, key: str) -> Backend:
        if role not in cache:
            cache[role] = exp.config.agents.backend_for(role, exp.config.endpoint)
        return cache[role]

    return factory
