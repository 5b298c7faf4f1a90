"""``rise trace``: read a trial's dual trace (spans + trajectory), where its time went, and send it to an OTLP
collector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from monitor.export import export_file_to_collector
from monitor.store import SPANS_FILENAME, TrialTrace, find_agent_dir
from monitor.view import episode_records, render_steps, render_tree

trace_app = typer.Typer(help="Show a trial's dual trace; export its spans to Phoenix/Jaeger.", no_args_is_help=True)

TrialDir = Annotated[Path, typer.Argument(help="a trial folder (holding agent/) or its agent folder")]


def _load(trial_dir: Path) -> TrialTrace:
    agent_dir = find_agent_dir(trial_dir)
    if not (agent_dir / SPANS_FILENAME).is_file():
        typer.echo(f"error: no {SPANS_FILENAME} under {trial_dir} (was the harness run through monitor.host?)",
                   err=True)
        raise typer.Exit(2)
    return TrialTrace.load(agent_dir)


@trace_app.command("show")
def show(
    trial_dir: TrialDir,
    episode: Annotated[int | None, typer.Option("--episode", "-e", help="only this episode")] = None,
    full: Annotated[bool, typer.Option("--full", help="do not clip long values")] = False,
    tree: Annotated[bool, typer.Option("--tree", help="print the span tree instead of the step view")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="the raw form: per episode, its trajectory steps and "
                                          "spans as one JSON object a line")] = False,
) -> None:
    """Per step: the model's analysis and plan, its keystrokes, what the harness dispatched, what came back on
    the screen and what the model was shown next; parse errors, warnings and summarizations are marked."""
    trace = _load(trial_dir)
    if as_json:
        for record in episode_records(trace, episode):
            typer.echo(json.dumps(record, ensure_ascii=False, default=str))
    elif tree:
        typer.echo(render_tree(trace, width=None if full else 140))
    else:
        typer.echo(render_steps(trace, episode=episode, max_lines=None if full else 6,
                                width=None if full else 140))


@trace_app.command("spans")
def spans(
    trial_dir: TrialDir,
    function: Annotated[str | None, typer.Option("--function", "-f", help="boundary, e.g. loop:Agent.step")] = None,
    episode: Annotated[int | None, typer.Option("--episode", "-e")] = None,
    errors: Annotated[bool, typer.Option("--errors", help="only spans that raised")] = False,
) -> None:
    """List spans as JSON lines (boundary, episode, duration, args, return, exception)."""
    trace = _load(trial_dir)
    if errors:
        chosen = trace.exceptions(episode)
    elif function:
        chosen = trace.spans_of(function, episode)
    else:
        chosen = trace.spans if episode is None else trace.in_episode(episode)
    for s in chosen:
        typer.echo(json.dumps({
            "boundary": s.boundary, "episode": s.episode, "ms": round(s.duration_ms, 3), "args": s.args,
            "return": s.result, "error": s.is_error, "exception": s.exception,
            "span_id": format(s.data.span_id, "016x"),
        }, ensure_ascii=False))


@trace_app.command("export")
def export(
    trial_dir: TrialDir,
    otlp: Annotated[str, typer.Option("--otlp", help="collector base URL (e.g. http://localhost:6006) or its "
                                      ".../v1/traces URL")],
) -> None:
    """Send the trial's spans to an OTLP/HTTP (protobuf) collector such as Phoenix or Jaeger."""
    path = find_agent_dir(trial_dir) / SPANS_FILENAME
    if not path.is_file():
        typer.echo(f"error: no {SPANS_FILENAME} under {trial_dir}", err=True)
        raise typer.Exit(2)
    try:
        sent, bad = export_file_to_collector(path, otlp)
    except ConnectionError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"sent {sent} spans to {otlp}" + (f" ({bad} unreadable lines skipped)" if bad else ""))


@trace_app.command("digest")
def digest_cmd(
    trial_dir: TrialDir,
    trajectory_only: Annotated[bool, typer.Option("--trajectory-only", help="detectors over the trajectory "
                                                  "alone (the --no-harness-evidence ablation)")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="recompute even if the cached digest is current")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the digest as JSON")] = False,
) -> None:
    """The trial's detector hits in episode order (cached beside the trial as digest.json)."""
    from evolve.roles.analysis.digest import DigestError, digest, render_digest

    try:
        d = digest(trial_dir, "trajectory" if trajectory_only else "full", refresh=refresh)
    except DigestError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(d.model_dump_json(indent=1) if as_json else render_digest(d))


@trace_app.command("time")
def time_cmd(
    path: Annotated[Path, typer.Argument(help="a trial folder (holding result.json) or a job folder")],
) -> None:
    """Where the time went: prefill, decode, waiting for the model, commands and harness, sandbox, verifier;
    the prompt cache's hit ratio, the speeds and the machine's load. A trial also lists its model calls."""
    from monitor.inference import render_calls
    from trials.job import load_job
    from trials.results import FormatError, TrialResult
    from trials.time_split import grid_load, grid_split, render_split, trial_split

    try:
        if (path / "result.json").is_file():
            res = TrialResult.load(path / "result.json")
            typer.echo(render_split(trial_split(res), grid_load([res])))
            if (find_agent_dir(path) / SPANS_FILENAME).is_file():
                typer.echo("\n" + render_calls(TrialTrace.load(find_agent_dir(path))))
            return
        if not (path / "config.json").is_file():
            typer.echo(f"error: {path} holds neither a result.json (a trial) nor a config.json (a job)", err=True)
            raise typer.Exit(2)
        _, results, _ = load_job(path)
    except (FormatError, OSError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for res in sorted(results, key=lambda r: r.trial_name):
        split = trial_split(res)
        hit = split.inference.cache_hit_ratio
        typer.echo(f"{res.trial_name:<40} {res.status:<6} " + " ".join(
            f"{p} {getattr(split, p):.0f}s" for p in ("prefill", "decode", "waiting", "model", "other")) +
            f" cache {'—' if hit is None else f'{100 * hit:.0f}%'}")
    typer.echo(f"\ngrid ({len(results)} trials):\n" + render_split(grid_split(results), grid_load(results)))


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
