"""The frozen experiment configuration (``runs/<name>/experiment.toml``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evolve.agents.config import AgentsConfig
from trials.endpoints.spec import EndpointSpec
from trials.executors.config import ExecutorConfig
from trials.validation import describe

EXPERIMENT_VERSION = 1


class TaskSplit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dir: str = Field(description="Harbor task folder; a relative path is relative to the experiment.toml")
    development: list[str] = Field(default_factory=list, description="tasks used to evolve; empty = all others")
    heldout: list[str] = Field(default_factory=list, description="sealed tasks: evaluated, never used to decide")

    @model_validator(mode="after")
    def _disjoint(self) -> TaskSplit:
        # a held-out task that also steers adoption is no longer held out: its figures would be optimistic
        both = sorted(set(self.development) & set(self.heldout))
        if both:
            raise ValueError(f"development and heldout share {', '.join(both)}; a held-out task may not be used "
                             "to decide")
        return self


class AdoptionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: Literal["paper", "paired", "stratified"] = Field(
        default="stratified", description="stratified (exact test, the default), paired (sign test) or paper")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="family-wise false-adoption level of one night: "
                         "split over its rounds, then over each round's candidates (docs/statistics.md)")
    night_rounds: int = Field(default=3, ge=1, description="rounds one night's alpha is split over (rounds 1..N "
                              "are night 1, N+1..2N night 2, ...): each round is tested at alpha / night_rounds")
    baseline: Literal["reference", "control"] = "reference"
    sequential: bool = Field(default=False, description="stop an evaluation once its outcome is decided")


class Budgets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_rounds: int = 3
    max_candidates_per_round: int = 3
    max_trials: int | None = None
    max_usd: float | None = None


class ExperimentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = EXPERIMENT_VERSION
    name: str
    endpoint: EndpointSpec
    tasks: TaskSplit
    r: int = Field(default=4, ge=1)
    env: Literal["local", "docker"] = "local"
    concurrency: int = Field(default=1, ge=1)
    adoption: AdoptionPolicy = Field(default_factory=AdoptionPolicy)
    budgets: Budgets = Field(default_factory=Budgets)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig, description="where grids run: local or a "
                                     "Ray cluster; replicas of the endpoint (trials.executors.config)")
    agents: AgentsConfig = Field(default_factory=AgentsConfig, description="agent roles: backends, limits")

    @classmethod
    def load(cls, path: str | Path) -> ExperimentConfig:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path}: no such experiment config") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path}: invalid TOML: {exc}") from None
        try:
            config = cls.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"{path}: {describe(exc, data)}") from None
        tasks_dir = Path(config.tasks.dir).expanduser()
        if not tasks_dir.is_absolute():  # relative to the file, never to wherever the command happens to run
            config.tasks.dir = str((path.parent / tasks_dir).resolve())
        return config

    def to_toml(self) -> str:
        import tomli_w

        return tomli_w.dumps(self.model_dump(mode="json", exclude_none=True))
