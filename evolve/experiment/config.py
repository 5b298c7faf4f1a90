"""The frozen experiment configuration (``runs/<name>/experiment.toml``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evolve.roles.runtime.config import AgentsConfig
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


def parse_rate(value: object, where: str) -> float:
    """A pass rate written as a number in [0, 1] or as ``"passes/runs"`` (``"3/8"``)."""
    if isinstance(value, str) and "/" in value:
        num, _, den = value.partition("/")
        try:
            value = int(num) / int(den)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{where}: {value!r} is not a rate or 'passes/runs'") from None
    try:
        rate = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a rate or 'passes/runs'") from None
    if not 0 <= rate <= 1:
        raise ValueError(f"{where}: {value!r} is not a pass rate in [0, 1]")
    return rate


class AdoptionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    policy: Literal["paper", "paired", "stratified", "coupled"] = Field(
        default="stratified", description="stratified (exact test, the default), coupled (exact test on the "
        "discordant pairs of interleaved arms; needs baseline = interleaved), paired (sign test) or paper")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="family-wise false-adoption level of one night: "
                         "split over its rounds, then over each round's candidates (docs/statistics.md)")
    night_rounds: int = Field(default=3, ge=1, description="rounds one night's alpha is split over (rounds 1..N "
                              "are night 1, N+1..2N night 2, ...): each round is tested at alpha / night_rounds")
    baseline: Literal["interleaved", "reference", "control"] = Field(
        default="interleaved", description="what a candidate is decided against: interleaved (incumbent trials run "
        "in lockstep with its evaluation, the same load; the default), reference (the incumbent's reference corpus, "
        "run earlier) or control (a fresh incumbent grid at the round's start); docs/statistics.md")
    load_check: Literal["refuse", "flag"] | None = Field(
        default=None, description="arms run under clearly different load (validate.load_check): refuse (not "
        "adopted) or flag (recorded only); default refuse with interleaved arms, flag otherwise")
    sequential: bool = Field(default=False, description="stop an evaluation once its outcome is decided")
    control: Literal["none", "midharness"] = Field(
        default="none", description="midharness: also compare each candidate with the incumbent run with Mid-Harness "
        "action scaling at the candidate's tokens per trial (evolve.round.control_arm)")
    require_beat_control_arm: bool = Field(default=False, description="adopt only a candidate that also beats "
                                           "the compute-matched control arm; false: the arm is reported only")
    control_verifiers: list[Literal["listwise", "pointwise", "pairwise", "tournament"]] = Field(
        default_factory=lambda: ["listwise", "pointwise", "pairwise", "tournament"], min_length=1,
        description="verifiers the control arm may use (one-token verdicts, the seed's default)")
    control_max_n: int = Field(default=16, ge=1, le=64, description="most samples per step the arm may use")
    control_attempts: int = Field(default=3, ge=1, le=5, description="arm grids to run when one misses the "
                                  "candidate's tokens per trial by more than 10 %")
    grading_r: int | None = Field(default=None, ge=1, description="fresh runs per named task that predictions are "
                                  "graded against (evolve.round.grading_runs); default r")
    gain: float = Field(default=0.15, gt=0, le=1, description="the per-task pass-rate gain the grid should find: "
                        "power is stated at it (validate.power)")
    prior: dict[str, float] = Field(default_factory=dict, description="expected pass rate per development task "
                                    "(a rate or 'passes/runs'), for the power estimate before the reference corpus "
                                    "exists; tasks not named: 0.5")

    @model_validator(mode="after")
    def _pairs_need_interleaved_arms(self) -> AdoptionPolicy:
        # a pair is one block run in both arms at once: against a corpus run earlier, cell k is no pair
        if self.policy == "coupled" and self.baseline != "interleaved":
            raise ValueError(f"adoption.policy 'coupled' decides on pairs of interleaved trials: it needs "
                             f"adoption.baseline = 'interleaved' (got {self.baseline!r})")
        return self

    @property
    def load_action(self) -> str:
        return self.load_check or ("refuse" if self.baseline == "interleaved" else "flag")

    @field_validator("prior", mode="before")
    @classmethod
    def _rates(cls, value: object) -> object:
        return {k: parse_rate(v, f"adoption.prior.{k}") for k, v in value.items()} if isinstance(value, dict) else value


class Budgets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_rounds: int = 3
    max_candidates_per_round: int = 3
    max_trials: int | None = None
    max_usd: float | None = None


class TransferConfig(BaseModel):
    """After an adoption (``evolve.round.transfer``): vN against its parent on the held-out split with the fixed model,
    and on the development and held-out tasks with a second model. A record: it never decides anything."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(default=True, description="freeze an adopted version and run its transfer evaluation")
    model: str = Field(default="qwen2.5-coder-0.5b", description="the second model (served name)")
    base_url: str | None = Field(default=None, description="its OpenAI-compatible endpoint, e.g. "
                                 "http://127.0.0.1:8081/v1; none: the second-model part is recorded as skipped")
    r: int = Field(default=4, ge=1, description="repetitions of the second-model grids (small: a record)")


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
    transfer: TransferConfig = Field(default_factory=TransferConfig, description="freeze and transfer after an "
                                     "adoption (evolve.round.transfer)")

    @model_validator(mode="after")
    def _prior_names_development_tasks(self) -> ExperimentConfig:
        unknown = sorted(set(self.adoption.prior) - set(self.tasks.development)) if self.tasks.development else []
        if unknown:
            raise ValueError(f"adoption.prior names {', '.join(unknown)}, not among tasks.development")
        return self

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
