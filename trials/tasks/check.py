"""Validate a whole task set and report every problem (``rise tasks check``), not just the first."""

from __future__ import annotations

from pathlib import Path

from trials.errors import TaskError

from .harbor import Problem, parse_task_toml, task_name
from .load import inspect_task, task_dirs
from .model import Task


def _name_of(folder: Path, task: Task | None) -> str:
    """The name a folder claims, even when the task is invalid (for the duplicate check)."""
    if task is not None:
        return task.name
    config = None
    if (folder / "task.toml").is_file():
        config, _ = parse_task_toml(folder / "task.toml")
    return task_name(config, folder, "")[0]


def check_task_set(root: str | Path) -> list[Problem]:
    """Every problem in the task set under ``root`` (a folder of task folders, or one task folder).

    Covers malformed TOML/YAML (with the line), wrong types, unknown keys, unresolvable ``${VAR}`` references,
    a missing or empty instruction, a missing ``tests/test.sh``, a missing Dockerfile (unless
    ``docker_image`` is set), folders that are not tasks, and duplicate task names.
    """
    try:
        dirs = task_dirs(root)
    except TaskError as exc:
        return [Problem(exc.path, exc.key, exc.message)]
    if not dirs:
        return [Problem(str(Path(root).resolve()), None, "no task folders found")]
    problems: list[Problem] = []
    claimed: dict[str, Path] = {}
    for folder in dirs:
        task, found = inspect_task(folder)
        problems += found
        name = _name_of(folder, task)
        if name in claimed:
            file = folder / ("task.toml" if (folder / "task.toml").is_file() else "task.yaml")
            problems.append(Problem(str(file), "task.name", f"duplicate task name {name!r} (also {claimed[name]})"))
        else:
            claimed[name] = folder
    return problems


NOTE_OFFLINE = {
    "harbor": "not set: the task runs offline here (this platform's default is false; Harbor's own default is "
              "true); write allow_internet = true if it needs the network",
    "terminal-bench": "Terminal-Bench has no such setting and ran with the network; imported tasks run offline "
                      "here unless their folder is converted to task.toml with allow_internet = true",
}


def offline_by_default(root: str | Path) -> list[Problem]:
    """Notes (not problems) for valid tasks that leave ``[environment].allow_internet`` unset, so they run
    without the network where Harbor would have given it (issue 44: the default is false here)."""
    notes: list[Problem] = []
    for folder in task_dirs(root):
        task, _ = inspect_task(folder)
        if task is not None and "allow_internet" not in task.config.environment.model_fields_set:
            file = folder / ("task.yaml" if task.layout == "terminal-bench" else "task.toml")
            notes.append(Problem(str(file), "environment.allow_internet",
                                 NOTE_OFFLINE.get(task.layout, NOTE_OFFLINE["harbor"])))
    return notes


def count_tasks(root: str | Path) -> int:
    """How many task folders ``root`` holds (for the summary line of a clean check)."""
    return len(task_dirs(root))
