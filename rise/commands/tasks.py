"""``rise tasks``: validate and list task sets (Harbor folders and imported Terminal-Bench ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from rise.commands import console as _console
from trials.errors import TaskError
from trials.tasks import check_task_set, inspect_task
from trials.tasks.check import count_tasks, offline_by_default
from trials.tasks.load import task_dirs

from .tasks_adapt import print_verdicts, register_adapt

TaskDir = Annotated[Path, typer.Argument(help="a folder of task folders, or one task folder")]

tasks_app = typer.Typer(help="Validate and list task sets.", no_args_is_help=True)


def _short(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


@tasks_app.command("check")
def check(directory: TaskDir,
          online: Annotated[bool, typer.Option("--online", help="this machine can fetch at run time (images, "
                                                                 "installers): judge the tasks as they are")] = False,
          ) -> None:
    """Report every problem in a task set, naming the file and the key; exit 1 if there is any. Then say per task
    whether it runs here as is, through the offline adapter (and what it changes), or not (and why)."""
    console = _console.out()
    problems = check_task_set(directory)
    for note in offline_by_default(directory) if not problems else []:
        console.print(f"[yellow]note[/yellow]: {escape(_short(note.file, directory))} {note.key}: {escape(note.message)}")
    if not problems:
        console.print(f"[green]ok[/green]: {count_tasks(directory)} tasks in {directory}, no problems")
        print_verdicts(console, directory, online)
        raise typer.Exit(0)
    table = Table(title=f"{len(problems)} problem(s) in {directory}", show_lines=False)
    table.add_column("file", overflow="fold")
    table.add_column("key")
    table.add_column("problem", overflow="fold")
    for p in problems:
        table.add_row(escape(_short(p.file, directory)), escape(p.key or ""), escape(p.message))
    console.print(table)
    raise typer.Exit(1)


@tasks_app.command("list")
def list_tasks(directory: TaskDir) -> None:
    """List the tasks of a set with their layout, timeouts and category; invalid ones are marked."""
    console = _console.out()
    try:
        dirs = task_dirs(directory)
    except TaskError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from None
    table = Table(title=f"tasks in {directory}")
    for column in ("name", "layout", "category", "difficulty", "agent s", "verifier s", "internet"):
        table.add_column(column)
    invalid = 0
    for folder in dirs:
        task, problems = inspect_task(folder)
        if task is None:
            invalid += 1
            table.add_row(folder.name, "[red]invalid[/red]", f"{len(problems)} problem(s)", "", "", "", "")
            continue
        meta, cfg = task.config.metadata, task.config
        table.add_row(task.name, task.layout, str(meta.get("category", "")), str(meta.get("difficulty", "")),
                      f"{cfg.agent.timeout_sec:g}", f"{cfg.verifier.timeout_sec:g}",
                      "yes" if cfg.environment.allow_internet else "no")
    console.print(table)
    if invalid:
        console.print(f"[yellow]{invalid} invalid task(s): run `rise tasks check {directory}`[/yellow]")


def register(app: typer.Typer) -> None:
    register_adapt(tasks_app)
    app.add_typer(tasks_app, name="tasks")
