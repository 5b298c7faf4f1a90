"""`rise show NAME vN` (what a version or candidate changed and did), `rise report NAME` (static HTML),
`rise audit NAME` (was anything finished done twice after kills and resumes) and `rise record NAME` (the night's
compact record, to commit)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from evolve.experiment.lock import ExperimentLocked
from evolve.experiment.store import StoreError, open_experiment
from rise.commands import console as _console

_out = _console.out()
_err = _console.err()


def show_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    version: Annotated[str, typer.Argument(help="adopted version (v1) or candidate branch (cand/r01-x, r01-x)")],
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
    code: Annotated[bool, typer.Option("--code/--no-code", help="print the code diff too")] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the view as JSON")] = None,
) -> None:
    """The adopted diff, the Handbook diff, settings changed, and the evaluation against the parent task by task."""
    from evolve.views.show import ShowError, show_text, version_view

    try:
        exp = open_experiment(name, runs_dir)
        view = version_view(exp, version)
    except (StoreError, ShowError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    _out.out(show_text(exp, view, code=code), end="")
    if json_out:
        data = {
            "label": view.label, "commit": view.commit, "parent": view.parent, "parent_commit": view.parent_commit,
            "kind": view.kind, "round": view.round, "slug": view.slug, "status": view.status, "reason": view.reason,
            "decision": view.decision, "files": [asdict(f) for f in view.files],
            "settings": [{"key": s.key, "kind": s.kind, "old": None if s.kind == "added" else s.old,
                          "new": None if s.kind == "removed" else s.new} for s in view.settings],
            "handbook": view.handbook.summary() if view.handbook is not None else view.handbook_note,
            "evaluation": view.evaluation.metrics.model_dump(mode="json") if view.evaluation else None,
            "baseline": view.baseline.label if view.baseline else None,
            "comparison": view.comparison.model_dump(mode="json") if view.comparison else None,
            "heldout": view.heldout.metrics.model_dump(mode="json") if view.heldout else None,
            "notes": view.notes,
        }
        json_out.write_text(json.dumps(data, indent=2, default=str))


def report_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="default runs/NAME/report.html")] = None,
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
) -> None:
    """Write a static HTML report: pass rate by grid with intervals, task × grid heat map, flips, decisions with
    reasons, held-out results, what each version changed, and cost."""
    from evolve.views.report import write_report

    try:
        path = write_report(open_experiment(name, runs_dir), output)
    except StoreError as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    _out.print(f"wrote {path}")


def audit_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
) -> None:
    """After kills and resumes: count ledger events, trials and role calls (finished, failed, interrupted) and
    list anything finished that was done twice or lost (a key booked twice, a trial cell run twice, a finished
    trial never booked, a role call that finished twice with the same inputs). Exit status 1 if any."""
    from evolve.experiment.audit import audit

    try:
        report = audit(open_experiment(name, runs_dir))
    except StoreError as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    for line in report.lines():
        _out.out(line)
    if report.problems:
        raise typer.Exit(1)


def record_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    output: Annotated[Path | None, typer.Option("-o", "--output", "--out", help="the record's folder (default "
                                                "docs/nights/<UTC date of the ledger's first event>)")] = None,
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
    screenshot: Annotated[bool, typer.Option("--screenshot/--no-screenshot", help="the report in headless "
                                             "Chromium, when one is on PATH")] = True,
    snapshot: Annotated[bool, typer.Option("--snapshot", help="also pack the whole experiment, traces included, "
                                           "into snapshot.tar.xz beside the record (`rise snapshot`): what a "
                                           "machine that has lost the night needs to resume it")] = False,
) -> None:
    """The night's compact record, to commit at every stop: the frozen config, the ledger, one line per trial,
    the power lines, each decision with its numbers, time per stage, stops and resumes, rise status / show /
    audit, the morning page and the report with its screenshot; no traces. Rerun: rewritten with the state now.
    Reads the experiment only."""
    from evolve.views.night import write_record

    try:
        exp = open_experiment(name, runs_dir)
        led = exp.ledger
        day = led.events[0].ts[:10] if led.events else dt.datetime.now(dt.UTC).date().isoformat()
        rec = write_record(exp, output or Path("docs") / "nights" / day, take_screenshot=screenshot,
                           snapshot=snapshot)
    except (StoreError, ExperimentLocked, ValueError, OSError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    _out.print(f"wrote {rec.out}: {len(rec.sizes)} files, {rec.total:,} bytes ({rec.total / 1024:.1f} KiB); "
               f"screenshot: {rec.screenshot}", markup=False)
    if rec.snapshot:
        _out.print(f"snapshot: {rec.snapshot}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit_cmd)
    app.command("show")(show_cmd)
    app.command("report")(report_cmd)
    app.command("record")(record_cmd)
