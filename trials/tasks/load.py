"""Read task folders into :class:`~trials.tasks.model.Task`, collecting every problem on the way.

:func:`inspect_task` is the single place that validates one folder; it returns the task (when it could be
built) and the full list of :class:`Problem`. :func:`load_task` raises the first problem as a
:class:`~trials.errors.TaskError`; ``check.py`` reports them all. A Harbor folder is read by ``harbor.py``, a
Terminal-Bench one by ``tb_import.py``.
"""

from __future__ import annotations

from pathlib import Path

from trials.errors import TaskError

from .harbor import Problem, inspect_harbor_task, parse_task_toml
from .model import Task


def inspect_task(path: str | Path) -> tuple[Task | None, list[Problem]]:
    """Validate one task folder of either layout (Harbor ``task.toml`` or Terminal-Bench ``task.yaml``)."""
    path = Path(path).resolve()
    if not path.is_dir():
        return None, [Problem(str(path), None, "not a directory")]
    if (path / "task.toml").is_file():
        return inspect_harbor_task(path)
    if (path / "task.yaml").is_file():
        from .tb_import import inspect_tb_task

        return inspect_tb_task(path)
    return None, [Problem(str(path / "task.toml"), None, "missing: no task.toml (Harbor) or task.yaml (Terminal-Bench)")]


def load_task(path: str | Path) -> Task:
    """Load and validate one task folder; raises :class:`TaskError` (file and key named) on the first problem."""
    task, problems = inspect_task(path)
    if problems:
        raise problems[0].to_error()
    if task is None:  # inspect_task returns a task whenever there is no problem
        raise TaskError(str(path), None, "task could not be loaded")
    return task


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "task.yaml").is_file()


def task_dirs(root: str | Path) -> list[Path]:
    """The task folders of a task set: ``root`` itself if it is a task, else its non-hidden subfolders."""
    root = Path(root).resolve()
    if not root.is_dir():
        raise TaskError(str(root), None, "task set folder does not exist")
    if is_task_dir(root):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def load_task_set(root: str | Path, names: list[str] | None = None) -> list[Task]:
    """Load the tasks under ``root`` sorted by name; ``names`` selects some (a missing name is an error).

    Only selected tasks need to be valid. A name matches the task's name or its folder name.
    """
    dirs = task_dirs(root)
    if names is not None:
        wanted = set(names)
        by_name: dict[str, Path] = {}
        for d in dirs:
            by_name.setdefault(d.name, d)
            if (d / "task.toml").is_file():
                config, _ = parse_task_toml(d / "task.toml")
                if config and config.task.name:
                    by_name.setdefault(config.task.name.rsplit("/", 1)[-1], d)
        missing = sorted(wanted - by_name.keys())
        if missing:
            raise TaskError(str(root), None, f"no task named {', '.join(missing)} (known: {', '.join(sorted(by_name))})")
        dirs = sorted({by_name[n] for n in wanted})
    tasks = [load_task(d) for d in dirs]
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.name in seen:
            raise TaskError(str(task.path), "task.name", f"duplicate task name {task.name!r} (also {seen[task.name]})")
        seen[task.name] = task.path
    return sorted(tasks, key=lambda t: t.name)
