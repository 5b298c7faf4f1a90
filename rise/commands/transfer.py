"""``rise transfer NAME vN``: freeze an adopted version and run (or finish) its transfer evaluation against its
parent (``evolve.round.transfer``), as ``rise evolve`` does after each adoption; for versions adopted by ``rise round``,
or with ``[transfer] enabled = false``. Resumable: a finished grid or trial is never run again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from evolve.experiment.lock import experiment_lock
from evolve.experiment.store import Experiment, StoreError, open_experiment
from evolve.round.controller import Controller
from evolve.round.transfer import run_transfer
from rise.commands import console as _console
from trials.errors import RiseError

_out = _console.out()


def _round_of(exp: Experiment, version: str) -> int:
    path = exp.root / "versions" / version / "version.json"
    return int(json.loads(path.read_text()).get("round") or 0) if path.is_file() else 0


def summary_lines(table: dict) -> list[str]:
    """One line per part: its status or reason, and the pooled row of each split."""
    out = [f"{table['version']} against {table['parent']}; frozen as {table['frozen']}"]
    for part in table["parts"]:
        head = f"{part['role']} {part['model']}: {part['status']}" + (f": {part['reason']}" if part["reason"] else "")
        out.append(head)
        for row in part["rows"]:
            if row["task"] == "all":
                diff = "—" if row["difference"] is None else f"{row['difference']:+.3f}"
                out.append(f"  {row['split']}: {table['parent']} {row['parent'][0]}/{row['parent'][1]}, "
                           f"{table['version']} {row['new'][0]}/{row['new'][1]}, Pass@1 difference {diff}")
    return out


def transfer_cmd(
    name: Annotated[str, typer.Argument(help="experiment name (under --runs-dir) or path")],
    version: Annotated[str, typer.Argument(help="adopted version tag, e.g. v1")],
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
) -> None:
    """Freeze VERSION and compare it with its parent: held-out split with the experiment's model, development and
    held-out tasks with the second model ([transfer] model / base_url)."""
    try:
        exp = open_experiment(name, runs_dir)
        with experiment_lock(exp.root):
            n = _round_of(exp, version)
            ev = asyncio.run(run_transfer(exp, Controller(exp, progress=progress), n, version, say=_out.print))
            if n and (exp.root / "rounds" / f"r{n:02d}").is_dir():
                from evolve.views.rounds import write_round_summary

                write_round_summary(exp, n)
    except (ValueError, StoreError, RiseError) as exc:
        _out.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    for line in summary_lines(ev.table):
        _out.print(line, soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    app.command("transfer")(transfer_cmd)
