"""``rise eval`` (run or resume a tasks × r grid), ``rise metrics`` (a job's metrics) and ``rise compare``
(two jobs, paired per task). Exit codes: 0 the grid is complete (tasks may have failed), 2 it is incomplete
(⊥ or missing cells, listed), 1 the job could not run (bad task set, changed config, locked folder...)."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from monitor.agents import resolve_agent
from rise.commands import console as _console
from trials.endpoints.spec import EndpointSpec
from trials.errors import RiseError
from trials.harness_api import CostLedger, write_json_atomic
from trials.harness_settings import Defaults, SettingError, parse_overrides
from trials.metrics import Comparison, GridMetrics, compare, grid_from_results
from trials.results import JobConfig

DEFAULT_MODEL = "qwen2.5-coder-1.5b"

_out = _console.out()
_err = _console.err()


def parse_settings(items: list[str], harness_dir: str | Path | None = None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (trials.harness_settings.parse_overrides): a key of the harness's ``settings.toml``
    takes its default's type; any other VALUE that parses as JSON (numbers, true/false, lists) is taken as such."""
    try:
        return parse_overrides(items, Defaults.of_harness(harness_dir))
    except SettingError as exc:
        raise typer.BadParameter(str(exc)) from None


def job_id_for(job_dir: Path) -> str:
    """Folder name plus a hash of its absolute path: sandboxes are labelled (and reaped) by job id, so two
    jobs in folders of the same name must not share one."""
    path = str(job_dir.resolve())
    return f"{job_dir.resolve().name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def render_cost(cost: CostLedger, console: Console = _out) -> None:
    """One line of job totals: generator and verifier calls and tokens, POT, dollars."""
    g, v = cost.generator, cost.verifier
    console.print(f"cost: generator {g.calls} calls, {g.input_tokens} in / {g.output_tokens} out tokens; "
                  f"verifier {v.calls} calls, {v.input_tokens} in / {v.output_tokens} out; "
                  f"POT {cost.parallel_output_tokens}; ${cost.cost_usd:.4f}")


def render_metrics(m: GridMetrics, title: str, console: Console = _out) -> None:
    """The metrics table, the per-task outcome table and the list of unknown cells."""
    head = Table(title=f"{title}  ({m.n_tasks} tasks × r={m.r}, "
                       f"{'complete' if m.complete else '[bold yellow]INCOMPLETE[/]'})")
    head.add_column("metric")
    head.add_column("value", justify="right")
    head.add_column("95% interval")
    w = m.wilson_pass_at_1
    boot = m.bootstrap

    def ci(key: str) -> str:
        return f"bootstrap {_fmt(boot[key].low)}–{_fmt(boot[key].high)}" if key in boot else ""

    head.add_row("Pass@1", _fmt(m.pass_at_1),
                 (f"Wilson {_fmt(w.low)}–{_fmt(w.high)}; " if w else "") + ci("pass_at_1"))
    head.add_row("Pass^r", _fmt(m.pass_hat_r), ci("pass_hat_r"))
    head.add_row("Pass@r", _fmt(m.pass_at_r), ci("pass_at_r"))
    head.add_row("Flip", _fmt(m.flip), "")
    for k, v in m.pass_at_k.items():
        if 1 < k < m.r:
            head.add_row(f"pass@{k} (unbiased)", _fmt(v), "")
    c = m.counts
    cells = f"{c['cells_passed']} / {c['cells_failed']} / {c['cells_unknown']}"
    head.add_row("cells pass / fail / unknown", cells, "")
    console.print(head)
    tasks = Table(title="per task")
    for col in ("task", "pass", "fail", "⊥/missing", "rate", "outcome"):
        tasks.add_column(col)
    for row in m.tasks:
        tasks.add_row(row.task, str(row.passes), str(row.fails), str(row.unknown), _fmt(row.rate), row.outcome)
    console.print(tasks)
    if m.missing:
        console.print("[yellow]unknown cells (rerun with --resume):[/] "
                      + ", ".join(f"{x.task}__r{x.repetition} ({x.reason})" for x in m.missing))


def render_comparison(c: Comparison, a: str, b: str, console: Console = _out) -> None:
    table = Table(title=f"{b} against {a}")
    for col in ("task", "A", "B", "rate A", "rate B", "pair"):
        table.add_column(col)
    for row in c.tasks:
        table.add_row(row.task, row.a or "—", row.b or "—", _fmt(row.rate_a), _fmt(row.rate_b), row.pair)
    console.print(table)
    counts = ", ".join(f"{k} {v}" for k, v in c.counts.items() if v)
    console.print(f"Pass@1 {_fmt(c.pass_at_1_a)} → {_fmt(c.pass_at_1_b)} (Δ {_fmt(c.delta_pass_at_1)}); {counts}; "
                  f"tasks up {c.improved_tasks}, down {c.worsened_tasks}, sign test p={c.sign_test_p:.3f}"
                  + ("" if c.complete else "  [yellow](incomplete: some tasks unpaired or with ⊥ cells)[/]"))


def _endpoint(agent_kind: str, base_url: str | None, model: str | None, api_key_env: str | None,
              port: int | None) -> EndpointSpec | None:
    if base_url:
        if not model:
            raise typer.BadParameter("--base-url needs --model (the served model name)")
        return EndpointSpec(base_url=base_url, model=model, api_key_env=api_key_env)
    if agent_kind == "oracle":
        return None
    from trials.endpoints.serve import ensure_bundled_server  # imported late: only runs that start the server
    kwargs = {"port": port} if port else {}
    _err.print(f"no --base-url: starting or reusing the bundled model server ({model or DEFAULT_MODEL})")
    from rise.commands.serve import seed_head

    return ensure_bundled_server(model or DEFAULT_MODEL, progress=_err.print, warm_head=seed_head(), **kwargs)


async def _require_reachable(endpoint: EndpointSpec) -> None:
    """A dead server is the user's to fix before the grid, not a grid of ⊥ trials."""
    from trials.endpoints.client import ModelClient, unreachable_hint

    async with ModelClient(endpoint) as client:
        if not await client.health():
            raise RiseError(f"the model server does not answer: {unreachable_hint(endpoint.base_url)}")


@contextmanager
def run_errors(resume_hint: str) -> Iterator[None]:
    """A run's failures as the commands report them: a clear error (exit 1), or an interruption with how to go
    on (exit 130)."""
    try:
        yield
    except (RiseError, ValueError) as exc:
        _err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        _err.print(f"[yellow]interrupted[/]: {resume_hint}")
        raise typer.Exit(130) from None


async def _cancel_on_sigterm(coro: Any) -> Any:
    """Run ``coro``; SIGTERM cancels it like Ctrl-C does, so agents are killed and sandboxes stopped."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await coro
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def eval_cmd(
    tasks: Annotated[Path, typer.Option("--tasks", help="task set folder (Harbor tasks)")],
    task: Annotated[list[str] | None, typer.Option("--task", help="only these tasks (repeatable)")] = None,
    agent: Annotated[str, typer.Option("--agent", help="oracle, seed, a harness directory or a frozen file")]
    = "seed",
    env: Annotated[str, typer.Option("--env", help="sandbox: local (bubblewrap) or docker")] = "local",
    r: Annotated[int, typer.Option("-r", "--repetitions", min=1, help="runs per task")] = 1,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", min=1, help="trials at once")] = 1,
    base_url: Annotated[list[str] | None, typer.Option(
        "--base-url", help="OpenAI-compatible endpoint incl. /v1; repeat it for a pool of replicas of one model")]
    = None,
    model: Annotated[str | None, typer.Option("--model", help="served model name (bundled: its name)")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="variable holding the API key")] = None,
    port: Annotated[int | None, typer.Option("--port", help="port of the bundled server")] = None,
    job_dir: Annotated[Path | None, typer.Option("--job-dir", help="default runs/jobs/<timestamp>")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="keep finished trials, rerun missing and ⊥")] = False,
    force_config: Annotated[bool, typer.Option("--force-config", help="resume even if the config changed")]
    = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="write metrics + every trial's status")] = None,
    setting: Annotated[list[str] | None, typer.Option("--setting", help="harness setting KEY=VALUE")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show the progress bar")] = True,
    executor: Annotated[str, typer.Option("--executor", help="where trials run: local, or ray (a Ray cluster)")]
    = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray cluster address (default auto)")]
    = None,
) -> None:
    """Run a tasks × r grid of trials (or resume one) and print its metrics."""
    from trials.grid import run_job
    from trials.settings_check import check_settings
    from trials.tasks import load_task_set

    if env not in ("local", "docker"):
        raise typer.BadParameter("--env is local or docker")
    if executor not in ("local", "ray"):
        raise typer.BadParameter("--executor is local or ray")
    if ray_address and executor != "ray":
        raise typer.BadParameter("--ray-address needs --executor ray")
    from trials.executors.config import ExecutorConfig

    urls = base_url or []
    exec_cfg = ExecutorConfig(kind=executor, address=ray_address, replicas=urls[1:])
    job_dir = job_dir or Path("runs") / "jobs" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    with run_errors(f"running trials were stopped; continue with --resume --job-dir {job_dir}"):
        loaded = load_task_set(tasks, task or None)
        spec = resolve_agent(agent)
        settings = parse_settings(setting or [], spec.harness_dir)
        check_settings(spec.harness_dir, settings)  # a typo fails here, not as every trial's "failure"
        endpoint = _endpoint(spec.kind, urls[0] if urls else None, model, api_key_env, port)
        if endpoint is not None and spec.kind != "oracle":
            asyncio.run(_require_reachable(endpoint))
        config = JobConfig(job_id=job_id_for(job_dir), tasks_dir=str(Path(tasks).resolve()),
                           task_names=sorted(t.name for t in loaded), agent=spec, env_kind=env, r=r,
                           concurrency=concurrency, endpoint=endpoint, settings=settings)
        _err.print(f"job {job_dir}: {len(loaded)} tasks × r={r}, agent {spec.name} ({spec.harness_version}), "
                   f"env {env}, model {endpoint.model if endpoint else '—'}")
        result = asyncio.run(_cancel_on_sigterm(run_job(config, job_dir, resume=resume, force_config=force_config,
                                                        progress=progress, tasks=loaded, executor=exec_cfg)))
    render_metrics(GridMetrics.model_validate(result.metrics), f"job {job_dir}")
    render_cost(result.cost)
    if json_out:
        write_json_atomic(json_out, {"job_dir": str(job_dir.resolve()), **result.model_dump(mode="json")})
    raise typer.Exit(0 if result.complete else 2)


def metrics_cmd(
    job_dir: Annotated[Path, typer.Argument(help="a job folder written by rise eval")],
    json_out: Annotated[Path | None, typer.Option("--json", help="write metrics + every trial's status")] = None,
) -> None:
    """Recompute and print a job's metrics from its trial folders."""
    from trials.job import summarize

    try:
        config = JobConfig.load(job_dir / "config.json")
    except (FileNotFoundError, RiseError) as exc:
        _err.print(f"[red]error:[/] {job_dir}: not a readable job ({exc})")
        raise typer.Exit(1) from None
    result = summarize(config, job_dir)
    render_metrics(GridMetrics.model_validate(result.metrics), f"job {job_dir}")
    render_cost(result.cost)
    if json_out:
        write_json_atomic(json_out, {"job_dir": str(job_dir.resolve()), **result.model_dump(mode="json")})
    raise typer.Exit(0 if result.complete else 2)


def compare_cmd(
    job_a: Annotated[Path, typer.Argument(help="baseline job folder")],
    job_b: Annotated[Path, typer.Argument(help="candidate job folder")],
    json_out: Annotated[Path | None, typer.Option("--json", help="write the comparison")] = None,
) -> None:
    """Paired per-task comparison of two jobs: stable pass, stable fail, fixed, regressed, flipping."""
    from trials.job import load_job

    grids = []
    for d in (job_a, job_b):
        try:
            config, results, _ = load_job(d)
        except (FileNotFoundError, RiseError) as exc:
            _err.print(f"[red]error:[/] {d}: not a readable job ({exc})")
            raise typer.Exit(1) from None
        grids.append((grid_from_results(results, config.task_names, config.r)[0], config.r))
    comp = compare(grids[0][0], grids[1][0], grids[0][1], grids[1][1])
    render_comparison(comp, str(job_a), str(job_b))
    if json_out:
        write_json_atomic(json_out, comp.model_dump(mode="json"))
    raise typer.Exit(0 if comp.complete else 2)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command("metrics")(metrics_cmd)
    app.command("compare")(compare_cmd)
