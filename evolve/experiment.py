"""The frozen experiment configuration (``runs/<name>/experiment.toml``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.agents.config import AgentsConfig
from trials.endpoints.spec import EndpointSpec
from trials.executors.config import ExecutorConfig

EXPERIMENT_VERSION = 1


class TaskSplit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dir: str = Field(description="Harbor task folder")
    development: list[str] = Field(default_factory=list, description="tasks used to evolve; empty = all others")
    heldout: list[str] = Field(default_factory=list, description="sealed tasks: evaluated, never used to decide")


class AdoptionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: Literal["paper", "paired"] = "paper"
    alpha: float = Field(default=0.05, gt=0, lt=1)
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
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"[{'.'.join(map(str, e['loc']))}] {e['msg']}" for e in exc.errors())
            raise ValueError(f"{path}: {problems}") from None

    def to_toml(self) -> str:
        import tomli_w

        return tomli_w.dumps(self.model_dump(mode="json", exclude_none=True))
