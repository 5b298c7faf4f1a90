"""``rise tasks import`` and the per-task verdict of ``rise tasks check``: does each task run here as it is,
through the offline adapter (and what it changes), or not at all (and why)? See trials/tasks/adapter.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rise.commands import console as _console
from trials.environments.images import docker_client, ensure_base_image, image_exists
from trials.environments.releases import release_of_image
from trials.errors import InfraError, TaskError
from trials.tasks import inspect_task
from trials.tasks.adapt_import import MANIFEST, RECORD, import_tasks
from trials.tasks.adapter import Verdict, plan
from trials.tasks.load import task_dirs

STYLE = {"as-is": "green", "adapted": "yellow", "cannot": "red", "invalid": "red"}


def local_images() -> Callable[[str], bool]:
    """``present(image)`` against the local Docker engine; without one, no image is present."""
    try:
        client = docker_client()
    except InfraError:
        return lambda _image: False
    return lambda image: image_exists(client, image)


def _detail(verdict: Verdict) -> str:
    """The lines a reader needs: why not, what changed, what is ignored, what else to know."""
    lines = [f"cannot: {r}" for r in verdict.reasons]
    lines += [f"{c.file} [{c.rule}]: {c.why}" for c in verdict.changes]
    lines += [f"ignored: {i}" for i in verdict.ignored] + [f"note: {n}" for n in verdict.notes]
    return "\n".join(lines)


def print_verdicts(console: Console, directory: Path, online: bool) -> None:
    present = local_images()
    where = "a machine that can fetch" if online else "this machine (no image registry, no installers)"
    table = Table(title=f"can each task run on {where}?", show_lines=True)
    for column in ("task", "verdict", "local base", "what and why"):
        table.add_column(column, overflow="fold")
    counts: dict[str, int] = {}
    for folder in task_dirs(directory):
        task, _ = inspect_task(folder)
        if task is None:
            continue
        verdict = plan(task, present, online=online)
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
        label = {"as-is": "runs as is", "adapted": "runs through the adapter", "cannot": "cannot run here"}
        base = f"{verdict.base_image} (python3 {verdict.python})" if verdict.base_image else "-"
        table.add_row(task.name, f"[{STYLE[verdict.status]}]{label[verdict.status]}[/]", escape(base),
                      escape(_detail(verdict)))
    console.print(table)
    console.print(", ".join(f"{n} {status}" for status, n in sorted(counts.items())))


def import_cmd(
    source: Annotated[Path, typer.Argument(help="the user's task set: a folder of Harbor task folders")],
    dest: Annotated[Path, typer.Argument(help="where the imported set is written (its own folder)")],
    online: Annotated[bool, typer.Option("--online", help="this machine can fetch at run time: copy every task "
                                                          "as it is, no adapter")] = False,
    build_bases: Annotated[bool, typer.Option("--build-bases", help="build the local base images the imported "
                                                                     "tasks need (rise images base --release X)")]
    = False,
    task: Annotated[list[str] | None, typer.Option("--task", "-t", help="import only this task folder (repeat "
                                                                       "for more); default: every task")] = None,
) -> None:
    """Import a Harbor task set (Terminal-Bench 2) as it is, or through the offline adapter with a record per task
    (rise-adapter.json) and a manifest of every verdict (rise-import.json). The adapter fetches each task's
    test tools as wheels: for the whole Terminal-Bench 2 set that is gigabytes (torch, transformers), so
    ``--task`` takes a few first."""
    console = _console.out()
    if dest.resolve() == source.resolve() or source.resolve() in dest.resolve().parents:
        console.print(f"[red]the destination {dest} must not be the source or inside it[/red]")
        raise typer.Exit(2)

    def progress(i: int, n: int, name: str) -> None:
        console.print(f"[dim][{i}/{n}] {escape(name)}[/dim]")

    try:
        manifest = import_tasks(source, dest, local_images(), online=online, only=task, progress=progress)
    except TaskError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(1) from None
    table = Table(title=f"imported {source} -> {dest}")
    for column in ("task", "status", "adapter sha256", "why not / notes"):
        table.add_column(column, overflow="fold")
    for entry in manifest.tasks:
        why = "\n".join(entry.problems or (entry.verdict.reasons if entry.verdict else []))
        table.add_row(entry.name, f"[{STYLE.get(entry.status, 'white')}]{entry.status}[/]",
                      (entry.adapter_sha256 or "")[:16], escape(why))
    console.print(table)
    console.print(f"{len(manifest.tasks)} tasks: {manifest.count('as-is')} as is, {manifest.count('adapted')} "
                  f"adapted (each with {RECORD}), {manifest.count('cannot')} cannot run here, "
                  f"{manifest.count('invalid')} invalid; manifest: {dest / MANIFEST}")
    _bases(console, manifest.missing_bases, build_bases)


def _bases(console: Console, missing: list[str], build: bool) -> None:
    """Build the base images the imported tasks need, or say how (a docker run also builds them when first used)."""
    for image in missing:
        release = release_of_image(image)
        command = f"rise images base --release {release.codename}"
        if not build:
            console.print(f"[yellow]{image} is not built yet[/yellow]: `{command}` (or --build-bases) builds it "
                          "before the tasks' images")
            continue
        try:
            with console.status(f"building {image} ({release.label}; debootstrap, minutes the first time)"):
                ensure_base_image(client=docker_client(), release=release)
        except InfraError as exc:
            console.print(f"[red]{escape(str(exc))}[/red]")
            raise typer.Exit(1) from None
        console.print(f"[green]{image}[/green] built")


def register_adapt(app: typer.Typer) -> None:
    app.command("import")(import_cmd)
