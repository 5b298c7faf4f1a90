"""``rise analyze NAME``: analysis alone on a version's reference corpus (pairs, findings, groups, review, rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evolve.experiment.lock import ExperimentLocked, experiment_lock
from evolve.experiment.store import StoreError, open_experiment

ROLES = ("analyst", "grouper", "reviewer")


def _backends(exp, backend: str | None, recording: Path | None, record: bool):
    """One backend per role (or, for replay, per call): from ``--backend`` when given, else from
    experiment.toml's ``[agents]``."""
    from evolve.roles.runtime import make_backend

    cfg = exp.config
    if backend is None:
        return {r: cfg.agents.backend_for(r, cfg.endpoint) for r in ROLES}
    if backend == "replay":  # one recording per call (the replay backend records one call per file)
        if recording is None:
            raise ValueError("--backend replay needs --recording DIR (one <call>.yaml per role call)")
        endpoint = cfg.agents.endpoint or cfg.endpoint
        return lambda role, call: make_backend("replay", endpoint, recording=recording / f"{call}.yaml",
                                               record=record)
    if backend == "openai":
        return {r: make_backend("openai", cfg.agents.endpoint or cfg.endpoint) for r in ROLES}
    return {r: make_backend(backend, None) for r in ROLES}


def analyze_cmd(
    name: Annotated[str, typer.Argument(help="experiment name (under --runs-dir) or path")],
    version: Annotated[str | None, typer.Option("--version", help="version whose reference corpus to analyse "
                                                "(default: the incumbent)")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="finish an analysis a kill interrupted (no role call "
                                         "is made twice)")] = False,
    no_harness_evidence: Annotated[bool, typer.Option(
        "--no-harness-evidence", help="ablation: analysts see trajectories and code only (no spans, no Handbook)")
    ] = False,
    backend: Annotated[str | None, typer.Option("--backend", help="openai | claude | replay (default: the agents "
                                                "section of experiment.toml)")] = None,
    recording: Annotated[Path | None, typer.Option("--recording", help="replay: folder of <role>.yaml "
                                                   "recordings")] = None,
    record: Annotated[bool, typer.Option("--record", help="replay: record the calls it does not have")] = False,
    per_task: Annotated[int, typer.Option("--pairs-per-task", min=1, help="pairs per flipping task")] = 2,
    max_pairs: Annotated[int | None, typer.Option("--max-pairs", min=1, help="pairs in all")] = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns", min=1, help="model requests per role call")] = None,
    max_output_tokens: Annotated[int | None, typer.Option("--max-output-tokens", min=1)] = None,
    deadline: Annotated[float | None, typer.Option("--deadline", help="seconds per role call")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="records folder (default: "
                                             "rounds/rNN/analysis of the next round)")] = None,
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
) -> None:
    """Pairs of the flipping tasks → findings (analyst) → groups (grouper) → review → ranked groups."""
    from evolve.roles.analysis.pairs import CorpusError
    from evolve.roles.analysis.pipeline import Analysis, AnalysisError
    from evolve.roles.analysis.records import render_groups

    limits = {k: v for k, v in (("max_turns", max_turns), ("max_output_tokens", max_output_tokens),
                                ("deadline_s", deadline)) if v is not None}
    try:
        exp = open_experiment(name, runs_dir)
        with experiment_lock(exp.root):
            analysis = Analysis(exp, _backends(exp, backend, recording, record), version=version,
                                harness_evidence=not no_harness_evidence, out_dir=out, per_task=per_task,
                                max_pairs=max_pairs, max_usd=exp.config.agents.max_usd, agents=exp.config.agents,
                                limits=limits)
            started = [e for e in analysis.led.events if e.key.startswith(analysis.prefix + ":")]
            if started and not resume:
                typer.echo(f"error: the analysis of {analysis.tag} already has {len(started)} ledger event(s) "
                           f"({analysis.prefix}); add --resume to finish or reprint it", err=True)
                raise typer.Exit(1)
            result = analysis.run()
    except (StoreError, AnalysisError, CorpusError, ExperimentLocked, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(render_groups(result))
    typer.echo(f"records: {analysis.out / 'summary.md'} and analysis.json")


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze_cmd)
