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

from evolve.experiment.store import StoreError, open_experiment
from evolve.round.controller import CandidateInput, Proposal, RoundReport, run_reference, run_round
from rise.commands import console as _console
from trials.errors import RiseError

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
    tiers: Annotated[str, typer.Option(help="mechanism tiers a proposal may take, comma-separated: settings, "
                                            "prompt, code (a model that cannot write code: settings,prompt)")]
    = "settings,prompt,code",
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
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
        report = run_round(exp, n, cands, resume=resume, progress=progress,
                           say=lambda s: _out.print(s, markup=False, soft_wrap=True))
    except (RiseError, StoreError, ValueError, OSError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    render_round(report)
    raise typer.Exit(2 if report.blocked else 0)


def reference_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    version: Annotated[str | None, typer.Option("--version", help="default: the incumbent")] = None,
    tiers: Annotated[str, typer.Option(help="mechanism tiers a proposal may take, comma-separated: settings, "
                                            "prompt, code (a model that cannot write code: settings,prompt)")]
    = "settings,prompt,code",
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
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


def evolve_cmd(
    name: Annotated[str, typer.Argument(help="experiment name or path")],
    rounds: Annotated[int, typer.Option("--rounds", help="the last round number to reach")] = 1,
    candidates: Annotated[int, typer.Option("--candidates", help="groups, so candidates, per round")] = 1,
    strict_switches: Annotated[bool, typer.Option("--strict-switches", help="a settings-tier proposal's keys "
                                                  "can only be the Handbook's switches (its answer schema lists "
                                                  "them; for a small model on a constraining server)")] = False,
    spare_groups: Annotated[int, typer.Option("--spare-groups", min=0, help="groups tried after those when a "
                                              "proposal or an implementation fails (the next ranked ones); at "
                                              "most --candidates are evaluated")] = 2,
    resume: Annotated[bool, typer.Option("--resume", help="continue a started round; finished work is kept")]
    = False,
    no_external_research: Annotated[bool, typer.Option("--no-external-research",
                                                       help="ablation: proposals from local information only")]
    = False,
    no_harness_evidence: Annotated[bool, typer.Option("--no-harness-evidence",
                                                      help="ablation: analysts see trajectories and code only")]
    = False,
    patience: Annotated[int, typer.Option(help="stop after this many rounds in a row without adoption")] = 2,
    max_usd: Annotated[float | None, typer.Option(help="$ for role calls and trials (default: budgets.max_usd)")]
    = None,
    max_tokens: Annotated[int | None, typer.Option(help="tokens of role calls")] = None,
    max_hours: Annotated[float | None, typer.Option(
        help="wall time of this invocation: checked before each unit, and a unit still running a minute past it "
             "(a grid of hours) is cut off as a kill would; --resume goes on")] = None,
    max_pairs: Annotated[int | None, typer.Option(help="at most this many success/failure pairs analysed")]
    = None,
    tiers: Annotated[str, typer.Option(help="mechanism tiers a proposal may take, comma-separated: settings, "
                                            "prompt, code (a model that cannot write code: settings,prompt)")]
    = "settings,prompt,code",
    runs_dir: Annotated[Path, typer.Option(help="where experiments live", envvar="RISE_RUNS_DIR")] = Path("runs"),
    progress: Annotated[bool, typer.Option("--progress/--no-progress")] = True,
    config: Annotated[Path | None, typer.Option("--config", help="the experiment TOML this experiment was made "
                                                "from: where its frozen experiment.toml differs, each field is "
                                                "named (the frozen one is used)")] = None,
    force: Annotated[bool, typer.Option("--force", help="evolve even on a grid that cannot adopt a perfect "
                                        "candidate")] = False,
) -> None:
    """The overnight loop: analysis, research, proposals, implementation, checks, screening, evaluation,
    decision and publication, round after round within budgets (exit 0: stopped for good; 3: a budget or ⊥ cells
    stopped it, raise the budget or fix the cause and rerun with --resume; 1: it could not run; 4: refused, the
    grid cannot adopt a perfect candidate: the power line printed first says what to raise, --force overrides)."""
    from evolve.loop import Evolution, EvolveOptions
    from evolve.round.power import PowerRefusal, preflight

    try:
        exp = open_experiment(name, runs_dir)
    except StoreError as exc:
        found = (Path(name) / "experiment.toml").exists() or (runs_dir / name / "experiment.toml").exists()
        what = "the experiment exists but cannot be read (nothing was changed): " if found else ""
        _err.print(f"[red]error:[/] {what}{exc}", soft_wrap=True)
        raise typer.Exit(1) from None
    _resume_lines(exp, config)
    try:
        opts = EvolveOptions(rounds=rounds, candidates=candidates, spare_groups=spare_groups, resume=resume,
                             strict_switches=strict_switches,
                             patience=patience,
                             external_research=not no_external_research,
                             harness_evidence=not no_harness_evidence, max_usd=max_usd, max_tokens=max_tokens,
                             max_hours=max_hours, max_pairs=max_pairs,
                             tiers=[t.strip() for t in tiers.split(",") if t.strip()])
        check = preflight(exp, lambda s: _out.print(s, markup=False, soft_wrap=True), force, candidates)
        if max_hours:  # also inside a unit (a grid of hours): stopped as a kill would, resumable
            from evolve.experiment.budget import arm_deadline

            arm_deadline(max_hours * 3600, lambda s: _err.print(s, markup=False, soft_wrap=True))
        report = Evolution(exp, opts, progress=progress, say=lambda s: _out.print(s, markup=False),
                           preflight=check).run()
    except PowerRefusal as exc:
        _err.print(f"[red]error:[/] {exc}", soft_wrap=True)
        raise typer.Exit(4) from None
    except KeyboardInterrupt:
        _err.print("interrupted: finished role calls and trials are kept; rerun with --resume")
        raise typer.Exit(130) from None
    except (RiseError, StoreError, ValueError, OSError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    adopted = [f"round {r['round']}: {r['adopted']}" for r in report.rounds if r["adopted"]]
    _out.print(f"stopped: {report.stopped}", markup=False)
    _out.print("adopted: " + (", ".join(adopted) or "nothing"), markup=False)
    raise typer.Exit(0 if report.final else 3)


def _resume_lines(exp, config: Path | None) -> None:
    """Where a night in progress stands (evolve.views.resume), and how the frozen config differs from ``config``."""
    from evolve.views.resume import config_differences, render_summary, resume_summary

    for line in render_summary(resume_summary(exp), resuming=True):
        _out.print(line, markup=False, soft_wrap=True)
    if not Path(exp.config.tasks.dir).is_dir():  # the checkout it was made in may be gone: the grids would fail
        _err.print(f"warning: the tasks folder {exp.config.tasks.dir} of {exp.config_path} (tasks.dir) does not "
                   "exist: its grids cannot run until it does", markup=False, soft_wrap=True)
    if config is not None and (diffs := config_differences(exp, config)):
        _err.print(f"warning: {exp.config_path} (frozen) differs from {config}; going on with the frozen one "
                   f"(to start over with {config}, move {exp.root} aside):", markup=False, soft_wrap=True)
        for line in diffs:
            _err.print(f"  {line}", markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("round")(round_cmd)
    app.command("reference")(reference_cmd)
    app.command("evolve")(evolve_cmd)
