"""The ``[midharness]`` settings section, validated; unknown keys are rejected so a typo cannot pass silently."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Mechanism = Literal["listwise", "pointwise", "pairwise", "tournament"]
Constraint = Literal["auto", "choice", "grammar", "none"]


class MidHarnessSettings(BaseModel):
    """Every number of the mechanism, with the paper's defaults."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(default=1, ge=1, description="candidates per step; 1 is exactly the base agent")
    temperature: float = Field(default=0.8, ge=0.0, description="sampling temperature of the N candidates")
    verifier: Mechanism = "pairwise"
    decision_only: bool = Field(default=True, description="one-token verdicts; false: reason, then answer")
    pivots: int = Field(default=4, ge=1, description="tournament: pivots chosen by the ring")
    max_concurrency: int = Field(default=8, ge=1, description="verifier calls in flight at once")
    verifier_model: str = Field(default="", description="model id for verifier calls; empty: the endpoint's")
    # Not in the paper; the knobs a small or foreign server needs.
    verifier_temperature: float = Field(default=0.0, ge=0.0)
    constraint: Constraint = Field(
        default="auto",
        description="decision tokens: vLLM structured_outputs choice, a llama.cpp grammar, or free text parsed; "
        "auto = choice when the verifier endpoint supports it, else none",
    )
    top_logprobs: int = Field(default=5, ge=0, le=20)
    reasoning_max_tokens: int = Field(default=1024, ge=16, description="budget of a verdict that reasons")
    history_chars: int = Field(
        default=20000, ge=1000, description="verifier's view of the history, newest kept"
    )
    observation_chars: int = Field(default=4000, ge=200, description="each past observation cut to this")

    @classmethod
    def from_section(cls, section: dict | None) -> MidHarnessSettings:
        return cls.model_validate(dict(section or {}))
