"""``rise round`` (one evolution round over given candidates, resumable) and ``rise reference`` (the reference
corpus of a version). Exit codes: 0 the round finished (adopted or not), 2 it is blocked (⊥ cells: rerun with
--resume), 1 it could not run."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from evolve.commands import console as _console
from trials.errors import RiseError

from ..controller import CandidateInput, Proposal, RoundReport, run_reference, run_round
from ..store import StoreError, open_experiment

_out = _console.out()
_err = _console.err()


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        slug, sep, value = item.partition("=")
        if not sep or not slug.strip() or not value.strip():
            raise typer.BadParameter(f"{what} wants SLUG=VALUE, got {item!r}")
        out[slug.strip()] = value.strip()
    return out


def _proposal(path: str) -> Proposal:
    p = Path(path)
    text = p.read_text()
    data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    return Proposal.model_validate(data)


def render_round(report: RoundReport) -> None:
    table = Table(title=f"round {report.round} from {report.incumbent}")
    for col in ("candidate", "commit", "outcome", "reason", "regressions"):
        table.add_column(col)
    for c in report.candidates:
        outcome = c.status + (f" → {c.version}" if c.version else "")
        table.add_row(c.slug, c.commit[:10], outcome, c.reason, ", ".join(c.regressions) or "—")
    _out.print(table)
    if report.blocked:
        _out.print("[yellow]blocked: some decision needs cells that are ⊥; rerun with --resume[/]")
    else:
        _out.print(f"adopted: {report.adopted or 'nothing (the incumbent stays)'}")


def round_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    candidate: Annotated[list[str] | None, typer.Option("--candidate", help="SLUG=PATCH or SLUG=BRANCH")] = None,
    proposal: Annotated[list[str] | None, typer.Option("--proposal", help="SLUG=FILE (.json/.toml)")] = None,
    round_no: Annotated[int | None, typer.Option("--round", help="default: the next round (the last with --resume)")]
    = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue a started round; finished work is kept")]
    = False,
    runs_dir: Annotated[Path, typer.Option(help="where experiments live")] = Path("runs"),
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Take candidates through checks, screening, evaluation and adoption (one round)."""
    try:
        exp = open_experiment(name, runs_dir)
        rounds = [e.round for e in exp.ledger.find("round_start")]
        n = round_no or ((max(rounds, default=1)) if resume else max(rounds, default=0) + 1)
        props = {slug: _proposal(f) for slug, f in _pairs(proposal or [], "--proposal").items()}
        cands = [CandidateInput(slug, src, props.get(slug, Proposal()))
                 for slug, src in _pairs(candidate or [], "--candidate").items()]
        report = run_round(exp, n, cands, resume=resume, progress=progress)
    except (RiseError, StoreError, ValueError, OSError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    render_round(report)
    raise typer.Exit(2 if report.blocked else 0)


def reference_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    version: Annotated[str | None, typer.Option("--version", help="default: the incumbent")] = None,
    runs_dir: Annotated[Path, typer.Option(help="where experiments live")] = Path("runs"),
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Run (or finish) a version's reference corpus: development set × r and the held-out split."""
    try:
        exp = open_experiment(name, runs_dir)
        path = run_reference(exp, version, progress=progress)
    except (RiseError, StoreError, ValueError, OSError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    _out.print(f"reference corpus of {version or exp.incumbent()}: {path}")


def register(app: typer.Typer) -> None:
    app.command("round")(round_cmd)
    app.command("reference")(reference_cmd)
