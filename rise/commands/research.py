"""``rise research``: sync the external-harness corpus into the cache, search it (BM25), show a reference with its
provenance checked. Exit codes: 0 ok, 1 a reference no longer matches its hash, 2 bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from research.api import Research, ResearchSettings
from research.sources import ResearchError

research_app = typer.Typer(help="The external-harness corpus: sync, search, show references with provenance.",
                           no_args_is_help=True)
_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)

CorpusOpt = Annotated[Path | None, typer.Option(
    "--corpus", help="corpus file (default: research/corpus.toml shipped with the project)")]


def _research(corpus: Path | None) -> Research:
    return Research(ResearchSettings(corpus=str(corpus) if corpus else ""))


def _fail(exc: Exception) -> None:
    _err.print(f"[red]error[/red]: {escape(str(exc))}", soft_wrap=True)
    raise typer.Exit(2)


@research_app.command("sync")
def sync_cmd(corpus: CorpusOpt = None,
             update: Annotated[bool, typer.Option("--update", help="fetch git mirrors again")] = False,
             source: Annotated[list[str] | None, typer.Option(
                 "--source", help="sync only this source (repeatable)")] = None) -> None:
    """Fetch every source at its pin into the cache, then update the index by content hash."""
    r = _research(corpus)
    try:
        rep = r.sync(update=update, only=source or None, log=lambda m: _err.print(escape(m), soft_wrap=True))
    except ResearchError as exc:
        _fail(exc)
    st = rep.index
    size = r.index_path.stat().st_size / 1e6
    _out.print(f"{len(rep.sources)} sources, {sum(st.per_source.values())} units; files seen {st.files_seen}, "
               f"(re)indexed {st.files_indexed}, removed {st.files_removed}; fetch {rep.fetch_seconds:.1f}s, "
               f"index {st.seconds:.1f}s, {size:.1f} MB at {r.index_path}", soft_wrap=True)
    if rep.removed:
        _out.print(f"dropped from the index (no longer in the corpus): {', '.join(rep.removed)}")


@research_app.command("sources")
def sources_cmd(corpus: CorpusOpt = None) -> None:
    """The synced sources: kind, pinned version, units."""
    try:
        rows = _research(corpus).sources()
    except ResearchError as exc:
        _fail(exc)
    table = Table("source", "framework", "kind", "version", "units", "synced")
    for s in rows:
        table.add_row(s["name"], s["framework"], s["kind"], s["version"][:16], str(s["units"]), s["synced_at"])
    _out.print(table)


@research_app.command("search")
def search_cmd(query: Annotated[str, typer.Argument(help="free text, e.g. \"verify completion before "
                                                    "accepting the claim\"")],
               limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="hits")] = 8,
               per_framework: Annotated[int, typer.Option("--per-framework", min=1,
                                                          help="at most this many hits per framework")] = 3,
               as_json: Annotated[bool, typer.Option("--json", help="print the search record as JSON")] = False,
               corpus: CorpusOpt = None) -> None:
    """Ranked references (BM25); each is recorded in the search log so `show ID` finds it later."""
    try:
        rec = _research(corpus).search(query, limit=limit, per_framework=per_framework)
    except ResearchError as exc:
        _fail(exc)
    if as_json:
        print(rec.model_dump_json(indent=2))
        return
    if not rec.references:
        _out.print(f"no references for {query!r} (search recorded)")
        return
    for i, ref in enumerate(rec.references, 1):
        _out.print(f"[bold]{i}. {escape(ref.framework)}[/bold]  {escape(ref.unit)} ({ref.unit_kind})  "
                   f"score {ref.score:.2f}  id [cyan]{ref.id}[/cyan]", soft_wrap=True)
        _out.print(f"   {escape(ref.locator)}", soft_wrap=True)
        for line in ref.excerpt.split("\n")[:4]:
            _out.print(f"   │ {escape(line[:140])}", soft_wrap=True)


@research_app.command("show")
def show_cmd(ref: Annotated[str, typer.Argument(help="a reference id from a search, or SOURCE@VERSION:PATH#LA-LB")],
             as_json: Annotated[bool, typer.Option("--json", help="reference and verification as JSON")] = False,
             corpus: CorpusOpt = None) -> None:
    """Re-read a reference from its source at its pinned version and check its hash."""
    r = _research(corpus)
    try:
        reference = r.reference(ref)
    except ResearchError as exc:
        _fail(exc)
    check = r.verify(reference)
    if as_json:
        print(json.dumps({"reference": reference.model_dump(mode="json"),
                          "verification": check.model_dump(mode="json")}, indent=2))
    else:
        _out.print(f"[bold]{escape(reference.locator)}[/bold]", soft_wrap=True)
        _out.print(f"framework {escape(reference.framework)} · {reference.kind} {escape(reference.origin)} · "
                   f"{escape(reference.unit)} ({reference.unit_kind})", soft_wrap=True)
        if reference.query:
            _out.print(f"found by {reference.query!r} at {reference.found_at.isoformat(timespec='seconds')}",
                       soft_wrap=True)
        colour = "green" if check.ok else "red"
        _out.print(f"[{colour}]{check.status}[/{colour}]: {escape(check.detail)}", soft_wrap=True)
        for n, line in enumerate(check.text.split("\n") if check.text else [], reference.start_line):
            _out.print(f"{n:6d} │ {escape(line)}", soft_wrap=True)
    raise typer.Exit(0 if check.ok else 1)


def register(app: typer.Typer) -> None:
    app.add_typer(research_app, name="research")
