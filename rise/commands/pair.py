"""``rise pair``: two harnesses side by side on the same cells, decided as a round decides (issue 38).

Both arms run the same tasks × r in lockstep (``validate.interleave``: block (task, k) starts in both arms at
once, so both see the same machine load); under ``--policy coupled`` (the default) repetition k of both arms also
samples with cell (task, k)'s seed. The decision is the round's own (``validate.adoption.decide``) with the load
check beside it, and the command prints how often the two arms' pairs agreed, per task: the figure the coupled
test's power depends on (docs/statistics.md). Run the seed against itself (the default) and it is the *null
comparison*: a fair design must not adopt it.

Layout: ``<job-dir>/incumbent`` and ``<job-dir>/candidate`` are ordinary job folders (``rise metrics``, ``rise
trace`` and ``rise compare`` read them); ``--resume`` keeps their finished trials. Exit codes: 0 both grids
complete and decided, 2 incomplete (⊥ or missing cells), 1 the comparison could not run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rise.commands import console as _console
from trials.errors import RiseError
from trials.harness_api import ATIF_TRAJECTORY_FILE, write_json_atomic
from trials.results import TrialResult

_out = _console.out()
_err = _console.err()
ARMS = ("incumbent", "candidate")


def replies(trial_dir: Path) -> list[str]:
    """The agent's replies of one trial in order (its ATIF trajectory's agent steps; [] when none was written)."""
    path = trial_dir / "agent" / ATIF_TRAJECTORY_FILE
    try:
        steps = json.loads(path.read_text()).get("steps", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [str(s.get("message") or "") for s in steps if isinstance(s, dict) and s.get("source") == "agent"]


def shared_replies(a: list[str], b: list[str]) -> int:
    """How many replies two trials share from the first on (identical text): 0 when their first replies differ."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def agreement_table(inc: dict[tuple[str, int], TrialResult], cand: dict[tuple[str, int], TrialResult],
                    inc_dirs: dict[tuple[str, int], Path], cand_dirs: dict[tuple[str, int], Path],
                    tasks: list[str], r: int) -> list[dict[str, Any]]:
    """Per task, over the pairs both arms finished (no ⊥): pairs, agreements (both passed or both failed), both
    passed, only the candidate passed (n10), only the incumbent (n01); and how far the trajectories stayed
    identical: pairs whose first reply was the same text, and the mean number of shared leading replies."""
    from validate.coupled import pair_rows  # numpy: not at rise's start

    def grid(results: dict[tuple[str, int], TrialResult]) -> dict[str, list[bool | None]]:  # None: no evidence
        return {t: [None if (x := results.get((t, k))) is None or x.is_infra else x.status == "passed"
                    for k in range(1, r + 1)] for t in tasks}

    rows: list[dict[str, Any]] = pair_rows(grid(cand), grid(inc), tasks, r)  # the outcome counts, as a round's
    for row in rows:
        t = row["task"]
        shared, total = [], []
        for k in range(1, r + 1):
            a, b = inc.get((t, k)), cand.get((t, k))
            if a is None or b is None or a.is_infra or b.is_infra:
                continue
            ra, rb = replies(inc_dirs[(t, k)]), replies(cand_dirs[(t, k)])
            shared.append(shared_replies(ra, rb))
            total.append((len(ra) + len(rb)) / 2)
        row["same_first_reply"] = sum(n > 0 for n in shared)
        row["shared_replies"] = round(sum(shared) / len(shared), 2) if shared else 0.0
        row["replies"] = round(sum(total) / len(total), 2) if total else 0.0
    return rows


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The pairs over every task (``validate.coupled.pair_totals``) and the pairs whose first reply was the same."""
    from validate.coupled import pair_totals  # numpy: not at rise's start

    return {**pair_totals(rows), "same_first_reply": sum(r["same_first_reply"] for r in rows)}


def render(rows: list[dict[str, Any]], tot: dict[str, Any]) -> None:
    from validate.coupled import unclipped_note

    table = Table(title="pairs (task, k): agreement of the two arms")
    for col in ("task", "pairs", "agree", "both pass", "cand only", "inc only", "same 1st reply",
                "shared replies / replies"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["task"], str(r["pairs"]), str(r["agree"]), str(r["both_pass"]), str(r["n10"]), str(r["n01"]),
                      str(r["same_first_reply"]), f"{r['shared_replies']:.1f} / {r['replies']:.1f}")
    table.add_row("all", str(tot["pairs"]), str(tot["agree"]), str(tot["both_pass"]), str(tot["n10"]),
                  str(tot["n01"]), str(tot["same_first_reply"]), "")
    _out.print(table)
    if tot["agreement"] is not None:
        _out.print(f"agreement {tot['agree']}/{tot['pairs']} = {tot['agreement']:.3f}; discordant "
                   f"{tot['n10'] + tot['n01']} (candidate only {tot['n10']}, incumbent only {tot['n01']})")
    if tot["coupling"] is not None:
        _out.print(f"coupling ρ̂ {tot['coupling']:.3f}{unclipped_note(tot)} (agreement beyond chance at each task's "
                   f"pass rate); as the simulations' column: agreement {(1 + tot['coupling']) / 2:.3f} at pass rate "
                   "0.5 (docs/statistics.md)")


def pair_cmd(
    tasks: Annotated[Path | None, typer.Option("--tasks", help="task set folder (Harbor tasks)")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="only these tasks (repeatable)")] = None,
    incumbent: Annotated[str, typer.Option("--incumbent", help="seed, a harness directory or a frozen file")]
    = "seed",
    candidate: Annotated[str, typer.Option("--candidate", help="seed (the null comparison), a harness directory "
                                           "or a frozen file")] = "seed",
    r: Annotated[int, typer.Option("-r", "--repetitions", min=1, help="runs per task in each arm")] = 8,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", min=1, help="trials at once per arm (the "
                                             "server's slots are shared by both arms)")] = 1,
    policy: Annotated[str, typer.Option("--policy", help="coupled (pairs, cell seeds) or stratified")] = "coupled",
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, max=1.0, help="level of the test")] = 0.05,
    env: Annotated[str, typer.Option("--env", help="sandbox: local (bubblewrap) or docker")] = "local",
    base_url: Annotated[str | None, typer.Option("--base-url", help="OpenAI-compatible endpoint incl. /v1")] = None,
    incumbent_base_url: Annotated[str | None, typer.Option(
        "--incumbent-base-url", help="the incumbent arm's own server (the same model): each arm's requests then "
        "never share a batch, one condition for coupled seeds to reproduce; default: --base-url")] = None,
    model: Annotated[str | None, typer.Option("--model", help="served model name (bundled: its name)")] = None,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="variable holding the API key")] = None,
    max_output_tokens: Annotated[int | None, typer.Option("--max-output-tokens", min=1, help="cap on a reply's "
                                                          "tokens, both arms (the experiment's [endpoint])")] = None,
    no_prompt_cache: Annotated[bool, typer.Option(
        "--no-prompt-cache", help="every call recomputes its whole prompt (llama.cpp's cache_prompt false), both "
        "arms: with --incumbent-base-url and one slot per server, the condition under which a coupled seed can "
        "reproduce a reply; costs the prefill of every cached token")] = False,
    setting: Annotated[list[str] | None, typer.Option("--setting", help="candidate's harness setting KEY=VALUE "
                                                      "(a settings candidate)")] = None,
    job_dir: Annotated[Path | None, typer.Option("--job-dir", help="default runs/pairs/<timestamp>")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="keep finished trials, rerun missing and ⊥")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the decision, the load and the "
                                                  "agreement table")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show the progress bar")] = True,
    report: Annotated[bool, typer.Option("--report", help="run nothing: read the two job folders of --job-dir and "
                                         "print where the comparison stands (undecided while incomplete)")] = False,
) -> None:
    """Run two harnesses side by side (lockstep, coupled seeds) and decide as a round would; prints the
    agreement of their pairs per task. With the defaults: the seed against itself, the null comparison."""
    from validate.coupled import COUPLED

    if policy not in (COUPLED, "stratified"):
        raise typer.BadParameter("--policy is coupled or stratified")
    if env not in ("local", "docker"):
        raise typer.BadParameter("--env is local or docker")
    if report and job_dir is None:
        raise typer.BadParameter("--report reads a comparison: name its --job-dir")
    if not report and tasks is None:
        raise typer.BadParameter("--tasks is needed to run a comparison")
    job_dir = job_dir or Path("runs") / "pairs" / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    from rise.commands.eval import run_errors

    with run_errors(f"continue with rise pair --resume --job-dir {job_dir} (same options)"):
        if report:
            outcomes = [_on_disk(job_dir / arm) for arm in ARMS]
        else:
            outcomes = _run(job_dir, tasks, task, [incumbent, candidate], r, concurrency, policy, env,  # type: ignore[arg-type]
                            base_url, incumbent_base_url, model, api_key_env, max_output_tokens, no_prompt_cache,
                            setting or [], resume, progress)
    raise typer.Exit(_decide_and_print(job_dir, outcomes, alpha, json_out))


def _on_disk(arm_dir: Path) -> Any:
    """An arm as far as it ran, from its job folder (``--report``)."""
    from trials.job import load_job
    from validate.evaluate import GridPlan, outcome_of

    if not (arm_dir / "config.json").is_file():
        raise RiseError(f"{arm_dir}: no job here (a comparison's folder holds incumbent/ and candidate/)")
    config, results, _ = load_job(arm_dir)
    plan = GridPlan(purpose="evaluation", agent=config.agent, tasks_dir=Path(config.tasks_dir),
                    task_names=list(config.task_names), r=config.r, job_dir=arm_dir, endpoint=config.endpoint,
                    env_kind=config.env_kind, concurrency=config.concurrency, settings=config.settings,
                    cell_seeds=config.cell_seeds)
    return outcome_of(plan, {(x.task_name, x.repetition): x for x in results if not x.is_infra})


def _run(job_dir: Path, tasks: Path, task: list[str] | None, agents: list[str], r: int, concurrency: int,
         policy: str, env: str, base_url: str | None, incumbent_base_url: str | None, model: str | None,
         api_key_env: str | None, max_output_tokens: int | None, no_prompt_cache: bool, setting: list[str],
         resume: bool, progress: bool) -> list[Any]:
    """Run (or resume) both arms in lockstep; returns their outcomes (incumbent, candidate)."""
    from monitor.agents import resolve_agent
    from rise.commands.eval import _cancel_on_sigterm, _endpoint, _require_reachable, parse_settings
    from trials.settings_check import check_settings
    from trials.tasks import load_task_set
    from validate.coupled import COUPLED
    from validate.evaluate import GridPlan, MemoryBook
    from validate.interleave import run_interleaved

    loaded = load_task_set(tasks, task or None)
    names = sorted(t.name for t in loaded)
    specs = [resolve_agent(a) for a in agents]
    if any(s.kind == "oracle" for s in specs):
        raise RiseError("rise pair compares harnesses that call a model; the oracle calls none")
    cand_settings = parse_settings(setting, specs[1].harness_dir)
    check_settings(specs[1].harness_dir, cand_settings)
    if not resume and any((job_dir / arm / "config.json").exists() for arm in ARMS):
        raise RiseError(f"{job_dir} already holds a comparison: add --resume to go on with it, or choose "
                        "another --job-dir")
    endpoint = _endpoint(specs[0].kind, base_url, model, api_key_env, None)
    if max_output_tokens is not None:
        endpoint = endpoint.model_copy(update={"max_output_tokens": max_output_tokens})
    if no_prompt_cache:
        endpoint = endpoint.model_copy(update={"sampling": {**endpoint.sampling, "cache_prompt": False}})
    endpoints = [endpoint.model_copy(update={"base_url": incumbent_base_url}) if incumbent_base_url else endpoint,
                 endpoint]
    for e in {e.base_url: e for e in endpoints}.values():
        asyncio.run(_require_reachable(e))
    plans = [GridPlan(purpose="control" if arm == "incumbent" else "evaluation", agent=spec, tasks_dir=tasks,
                      task_names=names, r=r, job_dir=job_dir / arm, endpoint=ep, env_kind=env,  # type: ignore[arg-type]
                      concurrency=concurrency, settings=settings, cell_seeds=policy == COUPLED)
             for arm, spec, settings, ep in zip(ARMS, specs, ({}, cand_settings), endpoints)]
    _err.print(f"pair {job_dir}: {len(names)} tasks × r={r} in each arm, lockstep; incumbent {specs[0].name}, "
               f"candidate {specs[1].name}{' ' + ' '.join(setting) if setting else ''}; policy {policy}; model "
               f"{endpoint.model}" + (f" (incumbent at {incumbent_base_url}, candidate at {endpoint.base_url})"
                                      if incumbent_base_url else ""))
    return asyncio.run(_cancel_on_sigterm(run_interleaved([(p, MemoryBook()) for p in plans], progress=progress,
                                                          tasks=loaded)))


def _decide_and_print(job_dir: Path, outcomes: list[Any], alpha: float, json_out: Path | None) -> int:
    """The round's decision on the two arms, their load and the agreement table; returns the exit code."""
    from trials.job import trial_name
    from validate.adoption import decide
    from validate.coupled import COUPLED
    from validate.load_check import apply_load_check, check_load, load_lines

    inc, cand = outcomes
    names, r = list(inc.plan.task_names), inc.plan.r
    policy = COUPLED if inc.plan.cell_seeds and cand.plan.cell_seeds else "stratified"
    decision = decide(cand.grid, inc.grid, names, r, policy=policy, alpha=alpha)  # type: ignore[arg-type]
    load = check_load(cand.results.values(), inc.results.values(), "refuse", paired=True)  # as a round does
    decision = apply_load_check(decision, load)
    dirs = [{(t, k): o.plan.job_dir.resolve() / trial_name(t, k) for (t, k) in o.results} for o in outcomes]
    rows = agreement_table(inc.results, cand.results, dirs[0], dirs[1], names, r)
    tot = totals(rows)
    render(rows, tot)
    for line in load_lines(load.model_dump()):
        _out.print(line)
    verdict = "ADOPT" if decision.adopt else ("reject" if decision.decided else "undecided")
    _out.print(f"[bold]{verdict}[/]: {decision.reason}")
    complete = inc.complete and cand.complete
    if json_out:
        write_json_atomic(json_out, {"job_dir": str(job_dir.resolve()), "tasks": names, "r": r, "policy": policy,
                                     "incumbent": inc.plan.agent.name, "candidate": cand.plan.agent.name,
                                     "candidate_settings": cand.plan.settings, "complete": complete,
                                     "decision": asdict(decision), "load": load.model_dump(),
                                     "agreement": {"tasks": rows, "all": tot}})
    return 0 if complete and decision.decided else 2


def register(app: typer.Typer) -> None:
    app.command("pair")(pair_cmd)
