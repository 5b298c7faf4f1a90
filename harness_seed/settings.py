"""The harness's mechanism settings: ``settings.toml`` beside this file, then the trial's overrides.

Overrides are dotted keys (``{"terminus.max_episodes": 50}``) or nested tables (``{"tmux": {"width": 120}}``),
nested and laid over the file's tables by ``trials.harness_api`` (the runner reads them with the same functions).
Every section is a pydantic model that forbids unknown keys, so a misspelt override fails the trial at once
instead of silently running the defaults. The ``[midharness]`` section stays a plain table: its schema
belongs to the midharness package, which validates it when it builds the actor.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import trials.harness_api as api

SETTINGS_FILE = Path(__file__).with_name("settings.toml")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TerminusSettings(_Section):
    format: Literal["json", "xml"] = "json"
    max_episodes: int = Field(default=1_000_000, ge=1)
    max_command_duration_sec: float = Field(default=60.0, ge=0)
    initial_screen_bytes: int = Field(default=10_000, ge=100)
    confirmations: int = Field(default=2, ge=1)


class TmuxSettings(_Section):
    session_name: str = "terminus-2"
    width: int = Field(default=160, ge=20)
    height: int = Field(default=40, ge=5)
    shell: str = "bash --login"
    term: str = "xterm-256color"
    history_limit: int = Field(default=10_000_000, ge=1000)
    pane_log: str = "/logs/agent/pane.log"
    with_environment: bool = True
    max_send_bytes: int = Field(default=16_000, ge=256)
    blocking: bool = False
    blocking_timeout_sec: float = Field(default=180.0, gt=0)
    exec_timeout_sec: float = Field(default=30.0, gt=0)
    startup_timeout_sec: float = Field(default=5.0, ge=0)
    capture_attempts: int = Field(default=3, ge=1)
    capture_retry_wait_sec: float = Field(default=1.0, ge=0)


class ObservationSettings(_Section):
    limit_bytes: int = Field(default=10_000, ge=100)
    incremental: bool = True


class ContextSettings(_Section):
    summarize: bool = True
    proactive_free_tokens: int = Field(default=8000, ge=0)
    unwind_target_free_tokens: int = Field(default=4000, ge=0)
    proactive_max_fraction: float = Field(default=0.25, gt=0, le=1)
    unwind_max_fraction: float = Field(default=0.125, gt=0, le=1)
    context_limit: int = Field(default=0, ge=0)
    token_count: Literal["tokenize", "estimate"] = "tokenize"
    short_summary_screen_chars: int = Field(default=1000, ge=0)


class ModelSettings(_Section):
    temperature: float | None = None
    max_tokens: int | None = Field(default=4096, ge=1)
    seed: int = Field(default=-1, ge=-1)  # -1: not sent (TOML has no null)
    json_schema: bool = False
    max_attempts: int = Field(default=3, ge=1)
    retry_wait_min_sec: float = Field(default=4.0, ge=0)
    retry_wait_max_sec: float = Field(default=15.0, ge=0)
    retry_multiplier: float = Field(default=1.0, ge=0)
    interleaved_thinking: bool = False


class TrajectorySettings(_Section):
    file: str = "trajectory.rich.json"  # the working record analysis reads, rewritten every episode
    atif_file: str = "trajectory.json"  # strict ATIF v1.8 (Harbor's tools), written at the end; "" = not written


class Settings(_Section):
    terminus: TerminusSettings = Field(default_factory=TerminusSettings)
    tmux: TmuxSettings = Field(default_factory=TmuxSettings)
    observation: ObservationSettings = Field(default_factory=ObservationSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    midharness: dict[str, Any] = Field(default_factory=dict)
    trajectory: TrajectorySettings = Field(default_factory=TrajectorySettings)


def load_settings(overrides: dict[str, Any] | None = None, path: Path | None = None) -> Settings:
    """Defaults from ``settings.toml`` with ``overrides`` applied; raises pydantic's ValidationError naming the
    offending key, and ValueError naming the file and line of a TOML syntax error."""
    path = path or SETTINGS_FILE
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line N, column M)"
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    return Settings.model_validate(api.merge_settings(data, api.nest_settings(overrides or {})))
