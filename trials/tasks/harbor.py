"""Read one Harbor task folder (``task.toml``, ``instruction.md``, ``tests/test.sh``, ``environment/``,
``solution/``), collecting every :class:`Problem` on the way; the pieces the Terminal-Bench importer
(``tb_import.py``) shares: the problem type, ``${VAR}`` expansion of env tables, the instruction and the name.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from trials.errors import TaskError
from trials.validation import problems as validation_errors

from .model import Task, TaskConfig

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# ${VAR} or ${VAR:-default}; the default may be empty and holds no "}".
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ENV_TABLES = ("verifier", "environment", "solution")


class Problem(NamedTuple):
    """One thing wrong with a task: the file, the key inside it (or None) and what is wrong."""

    file: str
    key: str | None
    message: str

    def to_error(self) -> TaskError:
        return TaskError(self.file, self.key, self.message)


def expand_env_value(value: str, key: str, file: str, environ: dict[str, str] | None = None) -> str:
    """Expand ``${VAR}`` / ``${VAR:-default}`` in ``value`` from ``environ`` (the host environment).

    An unset variable without a default raises :class:`TaskError` naming ``key``.
    """
    env = os.environ if environ is None else environ

    def sub(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if var in env:
            return env[var]
        if default is not None:
            return default
        raise TaskError(file, key, f"${{{var}}} is not set in the host environment and has no default")

    return _VAR_RE.sub(sub, value)


def expand_config_env(config: TaskConfig, file: str) -> tuple[TaskConfig, list[Problem]]:
    """Return a copy of ``config`` with its env tables expanded, and a problem per unresolvable reference."""
    problems: list[Problem] = []
    updates: dict[str, Any] = {}
    for table in _ENV_TABLES:
        section = getattr(config, table)
        expanded: dict[str, str] = {}
        for name, value in section.env.items():
            try:
                expanded[name] = expand_env_value(value, f"{table}.env.{name}", file)
            except TaskError as exc:
                problems.append(Problem(exc.path, exc.key, exc.message))
                expanded[name] = value
        updates[table] = section.model_copy(update={"env": expanded})
    return config.model_copy(update=updates), problems


def validation_problems(exc: ValidationError, file: str) -> list[Problem]:
    """One :class:`Problem` per pydantic error, keyed by the dotted path in the file."""
    return [Problem(file, key, message) for key, message in validation_errors(exc, with_input=True)]


def parse_task_toml(path: Path) -> tuple[TaskConfig | None, list[Problem]]:
    """Parse and validate one ``task.toml``. Malformed TOML is one problem naming the line."""
    file = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:  # its message carries "(at line N, column M)"
        return None, [Problem(file, None, f"malformed TOML: {exc}")]
    except UnicodeDecodeError as exc:
        return None, [not_utf8(path, exc)]
    except OSError as exc:
        return None, [Problem(file, None, f"cannot read: {exc}")]
    try:
        config = TaskConfig.model_validate(data)
    except ValidationError as exc:
        return None, validation_problems(exc, file)
    return expand_config_env(config, file)


def not_utf8(path: Path, exc: UnicodeDecodeError) -> Problem:
    """A task file that is not UTF-8 text, named with the first byte that does not decode."""
    return Problem(str(path), None, f"not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset {exc.start} "
                                    "cannot be decoded (save the file as UTF-8)")


def read_instruction(path: Path) -> tuple[str, list[Problem]]:
    """Read ``instruction.md``; missing or blank is a problem."""
    if not path.is_file():
        return "", [Problem(str(path), None, "missing: every task needs an instruction.md")]
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return "", [not_utf8(path, exc)]
    except OSError as exc:
        return "", [Problem(str(path), None, f"cannot read: {exc}")]
    if not text.strip():
        return "", [Problem(str(path), None, "instruction is empty")]
    return text, []


def task_name(config: TaskConfig | None, folder: Path, file: str) -> tuple[str, list[Problem]]:
    """The task's short name: the last ``/`` part of ``[task].name`` (Harbor's ``org/name``) or the folder name.

    Names become file names (trial folders), so they must match ``NAME_RE``.
    """
    declared = config.task.name if config else None
    name = declared.rsplit("/", 1)[-1] if declared else folder.name
    if not NAME_RE.match(name):
        key = "task.name" if declared else None
        return folder.name, [Problem(file, key, f"task name {name!r} must match {NAME_RE.pattern}")]
    return name, []


def inspect_harbor_task(path: Path) -> tuple[Task | None, list[Problem]]:
    """Validate a Harbor task folder; return the task (None if it cannot be built) and every problem."""
    toml_path = path / "task.toml"
    config, problems = parse_task_toml(toml_path)
    name, name_problems = task_name(config, path, str(toml_path))
    problems += name_problems
    instruction, instr_problems = read_instruction(path / "instruction.md")
    problems += instr_problems
    test_sh = path / "tests" / "test.sh"
    if not test_sh.is_file():
        problems.append(Problem(str(test_sh), None, "missing: the verifier entry point tests/test.sh"))
    dockerfile = path / "environment" / "Dockerfile"
    if not dockerfile.is_file() and not (config and config.environment.docker_image):
        problems.append(
            Problem(str(dockerfile), None, "missing (and [environment].docker_image is not set)")
        )
    solution_dir = path / "solution"
    if solution_dir.is_dir() and not (solution_dir / "solve.sh").is_file():
        problems.append(Problem(str(solution_dir / "solve.sh"), None, "solution/ exists but has no solve.sh"))
    if config is None or problems:
        return None, problems
    return Task(name=name, path=path, config=config, instruction=instruction), []
