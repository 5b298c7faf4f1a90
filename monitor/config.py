"""The recording config: which harness functions become spans and how much of their data is kept.

It lives beside the harness code as ``recording.toml`` so a candidate can move its boundaries by editing a
file, never by decorating code. Boundaries are ``module:qualname`` relative to the harness package
(``loop:Agent.step`` means ``<pkg>.loop`` → ``Agent.step``). Example::

    version = 1

    [limits]                  # global; each boundary may override
    max_arg_chars = 2000      # per captured argument
    max_return_chars = 4000

    [redact]
    patterns = ['corp-[0-9a-f]{32}']     # extra regexes, on top of the built-in secret patterns

    [[boundary]]
    target = "model_call:ModelCaller.call"
    genai = true              # GenAI attributes (model, token usage, candidate count)

    [[boundary]]
    target = "loop:Agent.run"
    capture_args = false
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trials.errors import RiseError
from trials.validation import first_problem

CONFIG_VERSION = 1
CONFIG_FILENAME = "recording.toml"
_TARGET = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class RecordingConfigError(RiseError):
    """The recording config is invalid or names something that does not exist; names file and field."""

    def __init__(self, path: str | Path | None, key: str | None, message: str):
        self.path, self.key, self.message = (str(path) if path else "<recording config>"), key, message
        where = self.path + (f" [{key}]" if key else "")
        super().__init__(f"{where}: {message}")


class Limits(BaseModel):
    """Size limits for captured data, in characters (after redaction)."""

    model_config = ConfigDict(extra="forbid")

    max_arg_chars: int = Field(default=2000, ge=0, description="per captured argument")
    max_return_chars: int = Field(default=4000, ge=0)
    max_exception_chars: int = Field(default=4000, ge=0, description="exception message + stack trace")


class Redaction(BaseModel):
    """Extra secret patterns; the built-in ones (monitor/redact.py) always apply."""

    model_config = ConfigDict(extra="forbid")

    patterns: list[str] = Field(default_factory=list, description="regexes whose matches become [REDACTED]")
    env_names: str = Field(
        default=r"(?i)(KEY|TOKEN|SECRET|PASSW|CREDENTIAL)",
        description="env vars whose NAME matches have their VALUE redacted wherever it appears",
    )

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for i, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"patterns[{i}] {pattern!r} is not a valid regex: {exc}") from None
        return value


class Boundary(BaseModel):
    """One function boundary to record."""

    model_config = ConfigDict(extra="forbid")

    target: str = Field(description="module:qualname relative to the harness package, e.g. loop:Agent.step")
    capture_args: bool = True
    capture_return: bool = True
    skip_args: list[str] = Field(default_factory=list, description="argument names never captured")
    max_arg_chars: int | None = Field(default=None, ge=0)
    max_return_chars: int | None = Field(default=None, ge=0)
    genai: bool = Field(default=False, description="a model call: add gen_ai.* attributes")

    @field_validator("target")
    @classmethod
    def _shape(cls, value: str) -> str:
        if not _TARGET.match(value):
            raise ValueError(f"{value!r} is not 'module:qualname' (e.g. 'loop:Agent.step')")
        return value

    @property
    def module(self) -> str:
        return self.target.split(":", 1)[0]

    @property
    def qualname(self) -> str:
        return self.target.split(":", 1)[1]


class RecordingConfig(BaseModel):
    """A harness version's recording config (``recording.toml``)."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = CONFIG_VERSION
    backend: Literal["lean", "sdk"] = Field(
        default="lean",
        description="lean: our own span objects (fast); sdk: the OpenTelemetry SDK tracer (slower, but spans "
        "of other OTel-instrumented code nest under ours)",
    )
    write: Literal["thread", "sync"] = Field(
        default="thread",
        description="thread: a writer thread redacts, encodes and appends spans off the harness's path, in "
        "bursts (see write_linger_ms); sync: before the wrapped call returns (slower; nothing in flight at a "
        "SIGKILL)",
    )
    write_linger_ms: float = Field(
        default=250.0, ge=0, le=5000,
        description="thread mode: after the first span of a burst the writer waits this long for the rest and "
        "writes them together (one wake-up, warm caches and one write per burst: benchmarks/monitor_overhead.py "
        "measured the writer's CPU per span in a trial at 0 / 20 / 100 / 500 ms: about 97 / 100 / 75 / 54 µs "
        "on a loaded 2-core machine). SIGTERM flushes everything; a SIGKILL can lose this last window",
    )
    limits: Limits = Field(default_factory=Limits)
    redact: Redaction = Field(default_factory=Redaction)
    boundary: list[Boundary] = Field(default_factory=list)

    @field_validator("boundary")
    @classmethod
    def _unique(cls, value: list[Boundary]) -> list[Boundary]:
        seen: set[str] = set()
        for i, b in enumerate(value):
            if b.target in seen:
                raise ValueError(f"boundary[{i}]: {b.target!r} is listed twice")
            seen.add(b.target)
        return value

    def arg_limit(self, b: Boundary) -> int:
        return self.limits.max_arg_chars if b.max_arg_chars is None else b.max_arg_chars

    def return_limit(self, b: Boundary) -> int:
        return self.limits.max_return_chars if b.max_return_chars is None else b.max_return_chars

    @classmethod
    def from_toml(cls, text: str, path: str | Path | None = None) -> RecordingConfig:
        """Parse and validate TOML text; errors name the file and the field."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise RecordingConfigError(path, None, f"not valid TOML: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            key, message = first_problem(exc, label_keys=())
            raise RecordingConfigError(path, key, message) from None

    @classmethod
    def load(cls, path: str | Path) -> RecordingConfig:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise RecordingConfigError(path, None, f"cannot read: {exc}") from None
        return cls.from_toml(text, path)


def load_for_harness(harness_dir: str | Path) -> tuple[RecordingConfig, Path | None]:
    """The config beside a harness package, or an empty one (no boundaries) when it has none."""
    path = Path(harness_dir) / CONFIG_FILENAME
    if path.is_file():
        return RecordingConfig.load(path), path
    return RecordingConfig(), None
