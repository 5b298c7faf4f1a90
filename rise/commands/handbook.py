"""``rise handbook``: check, render, diff and resync a harness's Handbook; map a trial's spans to behaviours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from handbook.callgraph import suggest, unclaimed
from handbook.check import check_harness
from handbook.diff import diff_handbooks, render_diff_html, render_diff_markdown
from handbook.lookup import map_trial
from handbook.model import HandbookError, load_handbook
from handbook.render import rendering_is_current, write_rendered
from handbook.resync import affected_behaviours
from handbook.source import HarnessSource
from rise.commands import console as _console

handbook_app = typer.Typer(help="Check, render, diff and resync Harness Handbooks.", no_args_is_help=True)

HarnessDir = Annotated[Path, typer.Argument(help="a harness package directory (holding HANDBOOK.toml)")]
RepoOpt = Annotated[Path | None, typer.Option(
    "--repo", help="read the versions as git revisions of this repository instead of directories")]
SubdirOpt = Annotated[str, typer.Option(
    "--path", help="with --repo (or revisions): the harness folder inside the repository")]


def _fail(console: Console, message: str) -> None:
    console.print(f"[red]error[/red]: {escape(message)}")
    raise typer.Exit(2)


@handbook_app.command("check")
def check_cmd(path: HarnessDir,
              as_json: Annotated[bool, typer.Option("--json", help="print problems as JSON")] = False) -> None:
    """Check the Handbook against the code (ast), recording.toml and settings.toml; exit 1 on problems."""
    console = _console.out()
    try:
        report = check_harness(path)
    except HandbookError as exc:
        _fail(console, str(exc))
    if as_json:
        print(json.dumps({"ok": report.ok, "summary": report.summary(),
                          "problems": [p.__dict__ for p in report.problems]}, indent=2))
    else:
        for p in report.problems:
            console.print(f"[red]✗[/red] {escape(str(p))}", soft_wrap=True)
        colour = "green" if report.ok else "red"
        console.print(f"[{colour}]{escape(report.summary())}[/{colour}]", soft_wrap=True)
    raise typer.Exit(0 if report.ok else 1)


@handbook_app.command("render")
def render_cmd(path: HarnessDir,
               check: Annotated[bool, typer.Option("--check", help="only tell whether HANDBOOK.md is current "
                                                   "(exit 1 if not)")] = False) -> None:
    """Regenerate HANDBOOK.md from HANDBOOK.toml."""
    console = _console.out()
    try:
        if check:
            current = rendering_is_current(path)
            console.print("HANDBOOK.md is current" if current else
                          "HANDBOOK.md is stale: run `rise handbook render`")
            raise typer.Exit(0 if current else 1)
        out = write_rendered(path)
    except HandbookError as exc:
        _fail(console, str(exc))
    console.print(f"wrote {out}")


def _load_version(spec: str, repo: Path | None, subdir: str):
    p = Path(spec)
    if repo is None and (p.is_file() or p.is_dir()):
        return load_handbook(p)
    book = HarnessSource.from_git(repo or Path("."), spec, subdir).handbook()
    if book is None:
        raise HandbookError(f"{repo or '.'}@{spec}:{subdir}", None, "no HANDBOOK.toml at this revision")
    return book


@handbook_app.command("diff")
def diff_cmd(
    old: Annotated[str, typer.Argument(help="old version: harness dir, HANDBOOK.toml, or git revision")],
    new: Annotated[str, typer.Argument(help="new version, same forms")],
    html: Annotated[Path | None, typer.Option("--html", help="also write the diff as HTML here")] = None,
    repo: RepoOpt = None,
    subdir: SubdirOpt = "",
) -> None:
    """Behaviours added, removed and changed field by field between two Handbooks (Markdown on stdout)."""
    console = _console.out()
    try:
        diff = diff_handbooks(_load_version(old, repo, subdir), _load_version(new, repo, subdir), old, new)
    except HandbookError as exc:
        _fail(console, str(exc))
    print(render_diff_markdown(diff), end="")
    if html:
        html.write_text(render_diff_html(diff))
        console.print(f"wrote {html}")


@handbook_app.command("suggest")
def suggest_cmd(
    path: HarnessDir,
    behaviour: Annotated[str | None, typer.Option("--behaviour", "-b", help="only this behaviour id")] = None,
    depth: Annotated[int | None, typer.Option("--depth", help="follow calls at most this deep")] = None,
) -> None:
    """Suggest implementing functions from the static call graph: helpers a behaviour's functions reach that
    no behaviour lists yet, and package functions nobody lists."""
    console = _console.out()
    try:
        source = HarnessSource.from_dir(path)
        book = load_handbook(path)
        suggestions = suggest(book, source, behaviour, depth)
    except (HandbookError, KeyError) as exc:
        _fail(console, str(exc))
    reached: set[str] = set()
    for s in suggestions:
        if not s.add:
            continue
        console.print(f"[bold]{escape(s.behaviour)}[/bold]: add")
        for ref, call_path in s.add:
            reached.add(ref)
            console.print(f"  + {escape(ref)}   [dim](via {escape(' → '.join(call_path))})[/dim]", soft_wrap=True)
    if behaviour is None:
        orphans = [r for r in unclaimed(book, source) if r not in reached]
        if orphans:
            console.print("[bold]not reached from any behaviour[/bold] (a new behaviour, an entry point, "
                          "or dead code):")
            for ref in orphans:
                console.print(f"  ? {escape(ref)}")
    if not any(s.add for s in suggestions):
        console.print("no suggestions: every reachable function is listed by a behaviour")


@handbook_app.command("affected")
def affected_cmd(
    old: Annotated[str, typer.Argument(help="old version: harness dir or git revision")],
    new: Annotated[str, typer.Argument(help="new version: harness dir or git revision")],
    repo: RepoOpt = None,
    subdir: SubdirOpt = "",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Behaviours whose functions (or settings, or recorded boundaries) changed between two versions."""
    console = _console.out()
    try:
        report = affected_behaviours(HarnessSource.open(old, repo, subdir), HarnessSource.open(new, repo, subdir),
                                      old, new)
    except HandbookError as exc:
        _fail(console, str(exc))
    if as_json:
        print(json.dumps({"functions": report.functions, "settings": report.settings,
                          "boundaries": report.boundaries, "uncovered": report.uncovered,
                          "affected": [a.__dict__ for a in report.affected]}, indent=2))
        return
    for a in report.affected:
        console.print(f"[bold]{escape(a.behaviour)}[/bold] ({escape(a.name)}, stage {escape(a.stage)})")
        for reason in a.reasons:
            console.print(f"  - {escape(reason)}", soft_wrap=True)
    if report.uncovered:
        console.print("[yellow]changed functions no behaviour covers[/yellow]:")
        for ref in report.uncovered:
            console.print(f"  ? {escape(ref)} ({report.functions[ref]})")
    console.print(escape(report.summary()), soft_wrap=True)


@handbook_app.command("spans")
def spans_cmd(
    trial: Annotated[Path, typer.Argument(help="a trial folder (reads agent/spans.jsonl)")],
    harness: Annotated[Path, typer.Option("--harness", help="harness dir whose Handbook to use")] = Path(
        "harness_seed"),
    behaviour: Annotated[str | None, typer.Option("--behaviour", "-b")] = None,
    episode: Annotated[int | None, typer.Option("--episode")] = None,
) -> None:
    """Map a trial's recorded spans to behaviours (counts, or one behaviour's spans); exit 1 if any span maps
    to no behaviour."""
    console = _console.out()
    try:
        book = load_handbook(harness)
        mapping = map_trial(book, trial, HarnessSource.from_dir(harness))
        if behaviour:
            book.behaviour(behaviour)
    except (HandbookError, KeyError) as exc:
        _fail(console, str(exc))
    if behaviour:
        for span in sorted(mapping.by_behaviour[behaviour], key=lambda s: s.start_ns):
            if episode is None or span.episode == episode:
                console.print(f"episode {span.episode}  {escape(span.name)}  {span.status or ''}")
        return
    for bid, spans in mapping.by_behaviour.items():
        if spans:
            console.print(f"{len(spans):6d}  {escape(bid)}")
    for span in mapping.unmapped:
        console.print(f"[red]unmapped[/red] {escape(span.name)} ({escape(span.function)} "
                      f"{escape(span.file)})", soft_wrap=True)
    console.print(f"{mapping.total} span(s), {len(mapping.unmapped)} unmapped"
                  + (f", {mapping.skipped_lines} unreadable line(s)" if mapping.skipped_lines else ""))
    raise typer.Exit(1 if mapping.unmapped else 0)


def register(app: typer.Typer) -> None:
    app.add_typer(handbook_app, name="handbook")

