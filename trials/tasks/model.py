"""Pydantic models of a Harbor task: ``task.toml`` and the loaded :class:`Task`.

A Harbor task folder holds ``task.toml``, ``instruction.md``, ``environment/Dockerfile``, ``tests/test.sh`` (it
writes ``/logs/verifier/reward.txt`` or ``reward.json``; JSON wins when both exist) and optionally
``solution/solve.sh``. Unknown keys in ``task.toml`` are rejected so a typo never silently falls back to a
default. Older Terminal-Bench folders are imported into the same :class:`Task` (see ``tb_import.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Author(_Strict):
    """One ``authors`` entry written as a table (``{ name = "...", email = "..." }``)."""

    name: str
    email: str | None = None


class TaskMeta(_Strict):
    """The ``[task]`` table. ``name`` defaults to the folder name when absent."""

    name: str | None = None
    description: str = ""
    authors: list[str | Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class VerifierConfig(_Strict):
    """``[verifier]``: how ``tests/test.sh`` runs."""

    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None


class AgentConfig(_Strict):
    """``[agent]``: the agent's wall-clock limit and user."""

    timeout_sec: float = Field(900.0, gt=0)
    user: str | None = None


class EnvironmentConfig(_Strict):
    """``[environment]``: the sandbox the agent works in."""

    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    cpus: float = Field(1.0, gt=0)
    memory_mb: int = Field(2048, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    # False when task.toml says nothing (Harbor's own default is true): an agent gets the network only where a task
    # asks for it. ``rise tasks check`` names every task that leaves it unset (trials/tasks/check.py).
    allow_internet: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = "/app"
    # Terminal-Bench 2 writes these; trials/tasks/fields.py says which are honoured and which ignored here.
    gpus: int = Field(0, ge=0)
    mcp_servers: list[Any] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _sizes_as_text(cls, data: Any) -> Any:
        """Terminal-Bench 2.0 writes ``memory = "2G"`` and ``storage = "10G"`` (Harbor's older spelling of
        ``memory_mb`` / ``storage_mb``): read them as megabytes; both spellings at once is an error."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old in data:
                if new in data:
                    raise ValueError(f"{old} and {new} both set: write one")
                data[new] = size_mb(data.pop(old), old)
        return data


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:iB|i|B)?\s*$", re.IGNORECASE)
_MB = {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def size_mb(value: Any, key: str) -> int:
    """``"2G"`` → 2048, ``"512M"`` → 512 (binary units, as Docker reads them); a bare number is bytes."""
    m = _SIZE.match(str(value))
    if m is None:
        raise ValueError(f"{key} = {value!r} is not a size like \"2G\" or \"512M\"")
    return max(1, round(float(m.group(1)) * _MB[m.group(2).upper()]))


class SolutionConfig(_Strict):
    """``[solution]``: only ``env``, passed to ``solution/solve.sh`` by the oracle agent."""

    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Strict):
    """One ``task.toml``. ``schema_version`` (newer Harbor spelling) is accepted for ``version``."""

    version: str = Field("1.0", validation_alias=AliasChoices("version", "schema_version"))
    artifacts: list[Any] = Field(default_factory=list)  # paths Harbor copies out after a trial; ignored here
    task: TaskMeta = Field(default_factory=TaskMeta)
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)


class Task(BaseModel):
    """A loaded, validated task.

    ``layout`` says which folder format it came from. For ``terminal-bench`` tasks the importer stages a
    Harbor-shaped copy of the tests and solution under ``staged_dir`` (see ``tb_import.py``), so consumers can
    always upload ``tests_dir`` to ``/tests``, run ``bash /tests/test.sh``, upload ``solution_dir`` to
    ``/solution`` and run ``bash /solution/solve.sh``.

    ``legacy_exit_code``: True when the task's own verifier writes no reward file (Terminal-Bench's
    ``run-tests.sh``): the reward is 1 if that script exits 0, else 0. The staged ``tests/test.sh`` wrapper
    already writes that reward to ``/logs/verifier/reward.txt``; a runner should still, when the flag is set and
    no reward file exists, score by the exit status of ``bash /tests/test.sh``.
    """

    name: str
    path: Path
    config: TaskConfig
    instruction: str
    layout: Literal["harbor", "terminal-bench"] = "harbor"
    legacy_exit_code: bool = False
    staged_dir: Path | None = None
    source_environment_dir: Path | None = None  # set by importers whose Dockerfile is not in environment/

    @property
    def environment_dir(self) -> Path:
        """The Docker build context; ``COPY`` sources are relative to it."""
        return self.source_environment_dir or self.path / "environment"

    @property
    def dockerfile(self) -> Path | None:
        """``environment_dir/Dockerfile`` when it exists (a task may instead name ``docker_image``)."""
        candidate = self.environment_dir / "Dockerfile"
        return candidate if candidate.is_file() else None

    @property
    def tests_dir(self) -> Path:
        """The folder copied to ``/tests`` at verification; holds ``test.sh``."""
        return (self.staged_dir or self.path) / "tests"

    @property
    def test_script(self) -> Path:
        """Host path of the verifier entry point (``tests_dir/test.sh``)."""
        return self.tests_dir / "test.sh"

    @property
    def solution_dir(self) -> Path | None:
        """The folder copied to ``/solution`` for the oracle agent (holds ``solve.sh``), or None."""
        candidate = (self.staged_dir or self.path) / "solution"
        return candidate if (candidate / "solve.sh").is_file() else None

    @property
    def workdir(self) -> str:
        return self.config.environment.workdir
