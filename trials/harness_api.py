"""The small, stable API a harness may use from ``trials`` (DESIGN.md: harness_seed imports only this).

A harness is a Python package run in its own subprocess as ``python -m <package> --spec trial_spec.json``
(or through ``monitor.host``, which instruments it first). It reads a :class:`TrialSpec`, reconnects to the
sandbox with :func:`attach_environment`, talks to the model through :class:`ModelClient`, writes its files
under ``spec.agent_dir`` and ends by writing an :class:`AgentOutcome` to ``agent_result.json`` there.

The harness runs confined (docs/security.md, :mod:`trials.confine`): its spec names the sandbox by a ``channel``
handle and its endpoints as ``http://model-<i>.rise/...``; :func:`attach_environment` and :class:`ModelClient`
reach both through the trial channel's socket, so a harness written against this API needs nothing else.
"""

from __future__ import annotations

import contextvars
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .endpoints.spec import EndpointSpec, PriceTable
from .endpoints.timings import CallTimings, InferenceSummary
from .environments.base import Environment, ExecResult
from .environments.factory import attach as attach_environment
from .harness_settings import merge as merge_settings
from .harness_settings import nest as nest_settings
from .terminal import IDENTITY_KEYS as TERMINAL_KEYS
from .terminal import create_command as tmux_create_command

SPEC_VERSION = 1

# A run's trajectory files in its agent folder. ``trajectory.json`` is strict ATIF (what Harbor's tools and
# models read); ``trajectory.rich.json`` is the platform's working record that analysis, the monitor and the
# validators read (ATIF-shaped, plus ``trial_id`` and ``episode`` on every step and the messages-sent deltas).
ATIF_TRAJECTORY_FILE = "trajectory.json"
RICH_TRAJECTORY_FILE = "trajectory.rich.json"

# Set by the harness loop at the start of each episode; read by the monitor to tag spans.
EPISODE: contextvars.ContextVar[int | None] = contextvars.ContextVar("rise_episode", default=None)
TRIAL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("rise_trial_id", default=None)


def set_episode(index: int | None) -> None:
    """Mark the episode the current task is in (spans and log lines carry it)."""
    EPISODE.set(index)


class TrialSpec(BaseModel):
    """Everything a harness process receives about its trial."""

    spec_version: int = SPEC_VERSION
    trial_id: str
    task_name: str
    instruction: str
    env: dict[str, Any] = Field(description="handle of the started sandbox, for attach_environment")
    endpoint: EndpointSpec
    verifier_endpoint: EndpointSpec | None = None
    agent_dir: str = Field(description="host folder for trajectory.json, agent_result.json, logs")
    timeout_sec: float = 900.0
    workdir: str = "/app"
    settings: dict[str, Any] = Field(default_factory=dict, description="overrides of harness settings, dotted "
                                     "or nested (nest_settings, merge_settings lay them over the defaults)")
    harness_version: str = "seed"
    refine_context: str | None = Field(default=None, description="Sequential Refine: summary of an attempt")

    @classmethod
    def load(cls, path: str | os.PathLike) -> TrialSpec:
        return cls.model_validate_json(Path(path).read_text())

    def dump(self, path: str | os.PathLike) -> None:
        Path(path).write_text(self.model_dump_json(indent=2))


class Cost(BaseModel):
    """The platform's one cost record: calls (the failed among them), tokens in and out, dollars, seconds.

    A trial's generator and verifier calls (:class:`CostLedger`), a role call (``evolve.roles.runtime.Usage`` adds
    its requests and tool calls), an analysis's cost per role, a set of trials (:class:`trials.cost.CostSummary`)
    and the experiment's budgets all count in it. Fields a writer does not know stay 0."""

    calls: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    seconds: float = 0.0

    def add(self, input_tokens: int = 0, output_tokens: int = 0, calls: int = 1, *, failed: int = 0,
            usd: float = 0.0, seconds: float = 0.0) -> Cost:
        """Count ``calls`` more calls (in place); returns the record."""
        self.calls += calls
        self.failed += failed
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.usd += usd
        self.seconds += seconds
        return self

    def merge(self, other: Cost) -> Cost:
        """Add another record into this one (in place); returns the record."""
        return self.add(other.input_tokens, other.output_tokens, other.calls, failed=other.failed, usd=other.usd,
                        seconds=other.seconds)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


Usage = Cost  # the record's name in harnesses written before it was shared (generator and verifier usage)


class CostLedger(BaseModel):
    """Per-trial cost: generator and verifier tokens, parallel output tokens (POT), dollars."""

    generator: Cost = Field(default_factory=Cost)
    verifier: Cost = Field(default_factory=Cost)
    parallel_output_tokens: int = Field(default=0, description="max over parallel branches, summed per step")
    cost_usd: float = 0.0

    def merge(self, other: CostLedger) -> CostLedger:
        """Add ``other`` into this ledger (job totals are the sum of their trials)."""
        self.generator.merge(other.generator)
        self.verifier.merge(other.verifier)
        self.parallel_output_tokens += other.parallel_output_tokens
        self.cost_usd += other.cost_usd
        return self

    def price(self, gen: PriceTable, ver: PriceTable | None = None) -> float:
        ver = ver or gen
        self.cost_usd = gen.cost(self.generator.input_tokens, self.generator.output_tokens) + ver.cost(
            self.verifier.input_tokens, self.verifier.output_tokens
        )
        return self.cost_usd


class AgentOutcome(BaseModel):
    """What the harness reports at the end (``agent_result.json``)."""

    status: Literal["completed", "max_episodes", "error"] = "completed"
    error_kind: str | None = Field(default=None, description="e.g. model_unreachable (⊥), parse, crash")
    error: str | None = None
    episodes: int = 0
    cost: CostLedger = Field(default_factory=CostLedger)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def write(self, agent_dir: str | os.PathLike) -> Path:
        path = Path(agent_dir) / "agent_result.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=2))
        os.replace(tmp, path)
        return path


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Rewrite a JSON file so a reader (or a kill) never sees half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def rich_trajectory_path(agent_dir: str | os.PathLike) -> Path:
    """The rich trajectory of the run in ``agent_dir``: ``trajectory.rich.json``, else ``trajectory.json``
    (a run from before the two files were split kept its rich record under that name)."""
    rich = Path(agent_dir) / RICH_TRAJECTORY_FILE
    return rich if rich.is_file() else Path(agent_dir) / ATIF_TRAJECTORY_FILE


def __getattr__(name: str):  # lazy: the client pulls in openai
    if name in {"ModelClient", "ChatResult", "ModelError", "ContextLengthExceeded", "AuthError", "ServerUnreachable"}:
        from .endpoints import client

        return getattr(client, name)
    raise AttributeError(name)


__all__ = [
    "ATIF_TRAJECTORY_FILE",
    "EPISODE",
    "RICH_TRAJECTORY_FILE",
    "TERMINAL_KEYS",
    "TRIAL_ID",
    "AgentOutcome",
    "CallTimings",
    "Cost",
    "CostLedger",
    "EndpointSpec",
    "Environment",
    "ExecResult",
    "InferenceSummary",
    "TrialSpec",
    "Usage",
    "attach_environment",
    "merge_settings",
    "nest_settings",
    "rich_trajectory_path",
    "set_episode",
    "tmux_create_command",
    "write_json_atomic",
]
