"""The on-disk formats of the trial stack: one trial's ``result.json``, a job's ``config.json`` and
``job_result.json``. Versioned pydantic models, validated on read with errors that name the file.

Status vocabulary (DESIGN.md): ``passed``; ``failed`` with a ``failure_class`` (all score 0, the class is kept
for analysis); ``infra`` is ⊥ — an infrastructure failure that makes the grid incomplete and is never counted
as a fail.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .agents import AgentSpec
from .endpoints.spec import EndpointSpec
from .endpoints.timings import InferenceSummary
from .errors import RiseError
from .harness_api import CostLedger, write_json_atomic
from .limits import LimitsRecord
from .load import MachineLoad
from .validation import describe

RESULT_VERSION = 1
JOB_VERSION = 1

TrialStatus = Literal["passed", "failed", "infra"]
FailureClass = Literal["task_failure", "agent_error", "agent_timeout", "verifier_timeout", "verifier_error"]


MONITOR_STATS_FILE = "monitor_stats.json"  # written by monitor.host beside spans.jsonl when the harness ends


def read_lost_spans(agent_dir: str | os.PathLike, monitored: bool = True) -> dict[str, int]:
    """The monitor's lost-span counts of one trial (empty for an agent no monitor ran); a stats file that is
    missing (a monitor killed before it could write it) or unreadable is itself reported, never taken for zero."""
    path = Path(agent_dir) / MONITOR_STATS_FILE
    if not path.is_file():
        return {"stats_missing": 1} if monitored else {}
    try:
        data = json.loads(path.read_text())
        return {str(k): int(v) for k, v in data["lost_spans"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {"stats_unreadable": 1}


def read_inference(agent_dir: str | os.PathLike) -> InferenceSummary | None:
    """The monitor's sum of the trial's model-call timings (None: no monitor, or it wrote none)."""
    try:
        data = json.loads((Path(agent_dir) / MONITOR_STATS_FILE).read_text())
        summary = InferenceSummary.model_validate(data["inference"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return summary if summary.calls else None


class FormatError(RiseError):
    """A results file cannot be read; names the file and what is wrong."""

    def __init__(self, path: str | os.PathLike, message: str):
        self.path = str(path)
        super().__init__(f"{self.path}: {message}")


def _load(model: type[BaseModel], path: str | os.PathLike):
    path = Path(path)
    try:
        return model.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise
    except ValidationError as exc:
        raise FormatError(path, f"invalid {model.__name__}: {describe(exc)}") from exc
    except (OSError, ValueError) as exc:
        raise FormatError(path, f"unreadable {model.__name__}: {exc}") from exc


class PhaseDurations(BaseModel):
    """Wall-clock seconds per phase of one trial."""

    env_start: float = 0.0
    agent: float = 0.0
    verifier: float = 0.0
    env_stop: float = 0.0
    total: float = 0.0


class VerifierOutcome(BaseModel):
    """What the task's tests did."""

    returncode: int | None = None
    timed_out: bool = False
    reward_source: str | None = Field(default=None, description="reward.json, reward.txt or exit_code")
    reward_detail: Any = Field(default=None, description="the parsed reward.json, when there was one")
    error: str | None = None
    # The reward-forgery detector (trials/environments/verifier.py). Absent from results written before it.
    isolation: Literal["private", "shared"] | None = Field(
        default=None, description="private: the tests ran with a /logs/verifier only they could see; shared: "
        "in the agent's view (a planted reward is removed first, a background writer is not stopped)")
    isolation_note: str | None = Field(default=None, description="why the shared mode, or a failed private one")
    tampered: bool = Field(default=False, description="the agent wrote into the verifier's folder")
    planted: list[str] = Field(default_factory=list, description="what was in /logs/verifier before the "
                               "verifier ran (removed, never read)")
    planted_during: list[str] = Field(default_factory=list, description="what agent processes wrote to the "
                                      "shared /logs/verifier while the tests ran (never read)")


class TrialResult(BaseModel):
    """``<trial>/result.json``: everything the metrics and the analysis need about one trial."""

    schema_version: int = RESULT_VERSION
    trial_name: str = Field(description="folder name, <task>__r<k>")
    run_id: str = Field(description="unique per attempt; a resumed job never reuses one")
    job_id: str | None = None
    task_name: str
    repetition: int = 1
    status: TrialStatus
    failure_class: FailureClass | None = None
    reward: float | None = None
    infra_cause: str | None = Field(default=None, description="⊥ only: image_build, sandbox, model_unreachable...")
    infra_message: str | None = None
    infra_log_path: str | None = None
    traceback: str | None = None
    env_kind: str | None = None
    agent_name: str | None = None
    harness_version: str | None = None
    model: str | None = None
    agent_status: str | None = Field(default=None, description="completed, max_episodes, error, or missing")
    agent_error_kind: str | None = None
    agent_error: str | None = None
    agent_exit_code: int | None = None
    agent_timed_out: bool = False
    episodes: int = 0
    cost: CostLedger = Field(default_factory=CostLedger)
    verifier: VerifierOutcome = Field(default_factory=VerifierOutcome)
    durations: PhaseDurations = Field(default_factory=PhaseDurations)
    started_at: str | None = None
    finished_at: str | None = None
    notes: list[str] = Field(default_factory=list)
    lost_spans: dict[str, int] = Field(default_factory=dict, description="spans the monitor lost, by cause "
                                       "(write, forward, instrumentation); read from the agent's monitor_stats.json")
    # Absent (None) from results written before they were recorded, and for agents no monitor ran.
    inference: InferenceSummary | None = Field(default=None, description="the model calls' time: prefill, "
                                               "decode, waiting, cache hits (trials/endpoints/timings.py)")
    machine_load: MachineLoad | None = Field(default=None, description="the host's load over the trial "
                                             "(trials/load.py)")
    limits: LimitsRecord = Field(default_factory=LimitsRecord, description="the harness's uid, the memory and "
                                 "pids limits of the harness and the sandbox, and which were hit (trials/limits.py)")

    @property
    def is_infra(self) -> bool:
        return self.status == "infra"

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrialResult:
        return _load(cls, path)

    def write(self, trial_dir: str | os.PathLike) -> Path:
        path = Path(trial_dir) / "result.json"
        write_json_atomic(path, self.model_dump(mode="json"))
        return path


class JobConfig(BaseModel):
    """``<job>/config.json``: what a job evaluates. Resuming compares :meth:`fingerprint` values."""

    schema_version: int = JOB_VERSION
    job_id: str = Field(description="labels the job's sandboxes, which a restart reaps: unique per job folder")
    tasks_dir: str
    task_names: list[str] = Field(description="resolved when the job is created, sorted")
    agent: AgentSpec
    env_kind: Literal["local", "docker"] = "local"
    r: int = Field(default=1, ge=1)
    concurrency: int = Field(default=1, ge=1)
    endpoint: EndpointSpec | None = None
    verifier_endpoint: EndpointSpec | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    cell_seeds: bool = Field(default=False, description="each trial samples with a seed of its cell (task, "
                             "repetition): the cells of two such grids are coupled pairs (trials.grid.cell_seed)")

    def identity(self) -> dict[str, Any]:
        """The fields that change what a trial computes. Concurrency and the job id do not; nor do an
        endpoint's base URL, API-key variable and timeout (the same model may come back on another port)."""

        def ep(spec: EndpointSpec | None):
            if spec is None:
                return None
            return spec.model_dump(mode="json", exclude={"base_url", "api_key_env", "timeout_sec", "supports_n",
                                                           "supports_choice"})

        return {
            "tasks_dir": str(Path(self.tasks_dir).resolve()),
            "task_names": sorted(self.task_names),
            "agent": self.agent.model_dump(mode="json", exclude={"argv", "env"}),
            "env_kind": self.env_kind,
            "r": self.r,
            "endpoint": ep(self.endpoint),
            "verifier_endpoint": ep(self.verifier_endpoint),
            "settings": self.settings,
            # only when on, so the fingerprints of the jobs made before the field stay what they were
            **({"cell_seeds": True} if self.cell_seeds else {}),
        }

    def fingerprint(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def differences(self, other: JobConfig) -> list[str]:
        """Human-readable list of identity fields that differ (empty when resumable)."""
        a, b = self.identity(), other.identity()
        return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in {**a, **b} if a.get(k) != b.get(k)]

    @classmethod
    def load(cls, path: str | os.PathLike) -> JobConfig:
        return _load(cls, path)

    def write(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))


class TrialSummary(BaseModel):
    """One cell of the grid in ``job_result.json``."""

    trial_name: str
    task_name: str
    repetition: int
    status: TrialStatus | Literal["missing"]
    failure_class: str | None = None
    infra_cause: str | None = None
    reward: float | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, result: TrialResult) -> TrialSummary:
        return cls(trial_name=result.trial_name, task_name=result.task_name, repetition=result.repetition,
                   status=result.status, failure_class=result.failure_class, infra_cause=result.infra_cause,
                   reward=result.reward, run_id=result.run_id)


class JobResult(BaseModel):
    """``<job>/job_result.json``: the metrics and every cell's status."""

    schema_version: int = JOB_VERSION
    job_id: str
    config_fingerprint: str
    complete: bool
    metrics: dict[str, Any]
    trials: list[TrialSummary]
    started_at: str | None = None
    finished_at: str | None = None
    trials_run: int = Field(default=0, description="trials executed by the last invocation (not kept ones)")
    cost: CostLedger = Field(default_factory=CostLedger, description="sum over the grid's kept trials")

    @classmethod
    def load(cls, path: str | os.PathLike) -> JobResult:
        return _load(cls, path)

    def write(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))
