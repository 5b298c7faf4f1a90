"""Trajectory-level scaling over :func:`trials.runner.run_trial`: Best-of-T and Sequential Refine.

Both combine with Mid-Harness (pass ``settings={"midharness": {...}}``; it acts inside each trial). Every
attempt is a full trial in its own folder ``<out>/<task>__r<k>__t<j>/`` (fresh sandbox, agent, task tests), and
the run's record ``<out>/<task>__r<k>.scaling.json`` counts the environment runs it took. Honesty rules:

- **Best-of-T** runs T independent trials. ``selector="verifier"`` picks one with a model judge that sees only
  the task and each attempt's final state (commands run, last terminal output), never the task's tests or
  rewards; the reported reward is the picked attempt's. ``selector="pass@T"`` reports whether any attempt
  passed: an oracle metric, labelled as such, not a deployable system. ``selector="first"`` is the
  baseline. Environment runs: T.
- **Sequential Refine** runs attempt 1, then each next attempt in a fresh sandbox with a summary of the
  previous one as ``refine_context`` (the harness puts it in its first prompt). It always runs all attempts:
  stopping early on a passing reward would use the tests as feedback. The reported reward is the last
  attempt's. Environment runs: the attempts run.
- If any attempt is ⊥ (infrastructure), the run is ⊥: selecting among the survivors would hide the failure.

The judge prompt is kept here as a template constant because this room owns no template folder; it belongs
in a ``.j2`` beside this file (house rule) once one is assigned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, Field

from .endpoints.spec import EndpointSpec
from .harness_api import CostLedger, rich_trajectory_path, write_json_atomic
from .results import TrialResult
from .runner import EnvFactory, run_trial

log = logging.getLogger(__name__)

SCALING_VERSION = 1
Selector = Literal["verifier", "pass@T", "first"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\r")

_JUDGE = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False).from_string(
    """You are judging {{ attempts | length }} independent attempts by an AI agent to solve a task in a Linux \
terminal. You see what each attempt did and how its terminal looked at the end, not whether it passed.

## Task
{{ task }}
{% for a in attempts %}
## Attempt {{ loop.index }}
{{ a }}
{% endfor %}
Which attempt most likely left the system in a state that solves the task? Think briefly, then end with a
final line exactly of the form
BEST: <number from 1 to {{ attempts | length }}>"""
)


class AttemptRecord(BaseModel):
    trial_name: str
    status: str
    reward: float | None = None
    infra_cause: str | None = None
    episodes: int = 0
    refine_context_chars: int = 0


class ScalingResult(BaseModel):
    """``<out>/<task>__r<k>.scaling.json``: one Best-of-T or Sequential Refine run of one task."""

    schema_version: int = SCALING_VERSION
    mode: Literal["best_of_t", "sequential_refine"]
    task_name: str
    repetition: int = 1
    attempts_requested: int
    attempts: list[AttemptRecord] = Field(default_factory=list)
    env_runs: int = Field(default=0, description="sandboxes started (each attempt is one full trial)")
    selector: str | None = None
    oracle: bool = Field(default=False, description="the reward used the tests to choose (pass@T)")
    selected: int | None = Field(default=None, description="0-based attempt whose reward is reported")
    status: Literal["passed", "failed", "infra"] = "infra"
    reward: float | None = None
    selection: dict[str, Any] = Field(default_factory=dict, description="the judge's call, when one was made")
    cost: CostLedger = Field(default_factory=CostLedger, description="all attempts plus the judge (verifier)")

    def write(self, path: str | Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))


# -- what an attempt left behind -------------------------------------------------------------------------


def _commands(trajectory: Any) -> tuple[list[str], bool]:
    """Keystrokes of the ATIF ``bash_command`` tool calls, and whether completion was claimed."""
    keys, claimed = [], False
    for step in (trajectory or {}).get("steps", []) if isinstance(trajectory, dict) else []:
        for call in step.get("tool_calls") or []:
            if call.get("function_name") == "bash_command":
                keys.append(str((call.get("arguments") or {}).get("keystrokes", "")))
            elif call.get("function_name") == "mark_task_complete":
                claimed = True
    return keys, claimed


def _last_observation(trajectory: Any) -> str:
    for step in reversed((trajectory or {}).get("steps", []) if isinstance(trajectory, dict) else []):
        for result in (step.get("observation") or {}).get("results", []) or []:
            if result.get("content"):
                return str(result["content"])
    return ""


def attempt_digest(trial_dir: str | Path, max_commands: int = 40, screen_chars: int = 2500) -> str:
    """A plain-text account of one attempt from its own files: the commands it ran (last ``max_commands``),
    whether it claimed completion, and the end of its terminal (pane log, else the last observation)."""
    agent = Path(trial_dir) / "agent"
    try:
        trajectory = json.loads(rich_trajectory_path(agent).read_text())
    except (OSError, ValueError):
        trajectory = None
    keys, claimed = _commands(trajectory)
    screen = ""
    pane = agent / "pane.log"
    if pane.is_file():
        screen = _ANSI.sub("", pane.read_text(errors="replace"))
    if not screen.strip():
        screen = _last_observation(trajectory)
    screen = screen[-screen_chars:]
    lines = [f"Commands run ({len(keys)}):"]
    if len(keys) > max_commands:
        lines.append(f"  [... {len(keys) - max_commands} earlier commands omitted ...]")
    lines += [f"  {json.dumps(k, ensure_ascii=False)}" for k in keys[-max_commands:]] or ["  (none)"]
    lines.append(f"Claimed the task complete: {'yes' if claimed else 'no'}")
    lines.append("Terminal at the end:")
    lines.append(screen.strip() or "(no terminal output recorded)")
    return "\n".join(lines)


def refine_summary(trial_dir: str | Path, attempt: int) -> str:
    """The ``refine_context`` handed to the next attempt: what attempt ``attempt`` did, not its reward."""
    return (f"A previous attempt (attempt {attempt}) at this task ran in a fresh copy of this environment; its "
            f"changes are gone. What it did:\n{attempt_digest(trial_dir)}\n"
            "Learn from it: keep what worked, avoid what did not, and verify your result before finishing.")


# -- selection -------------------------------------------------------------------------------------------


def _read_best(text: str, count: int) -> int | None:
    for token in reversed(re.findall(r"BEST\s*[:=]\s*\**\s*(\d+)", text or "", flags=re.IGNORECASE)):
        if 1 <= int(token) <= count:
            return int(token) - 1
    for token in re.findall(r"\d+", (text or "").strip().splitlines()[-1] if (text or "").strip() else ""):
        if 1 <= int(token) <= count:
            return int(token) - 1
    return None


async def judge_final_states(task: str, digests: list[str], endpoint: EndpointSpec, cost: CostLedger,
                             max_tokens: int = 1024) -> tuple[int, dict[str, Any]]:
    """Ask a model which attempt to keep; an unreadable answer keeps attempt 1 (recorded)."""
    from .endpoints.client import ModelClient

    prompt = _JUDGE.render(task=task, attempts=digests)
    async with ModelClient(endpoint) as client:
        result = await client.chat([{"role": "user", "content": prompt}], temperature=0.0, max_tokens=max_tokens)
    cost.verifier.add(result.input_tokens, result.output_tokens, calls=result.requests)
    cost.parallel_output_tokens += result.output_tokens
    picked = _read_best(result.text, len(digests))
    record = {"model": endpoint.model, "text": result.text, "input_tokens": result.input_tokens,
              "output_tokens": result.output_tokens, "unreadable": picked is None}
    return (picked if picked is not None else 0), record


# -- the two modes ---------------------------------------------------------------------------------------


def _record(res: TrialResult, context: str | None = None) -> AttemptRecord:
    return AttemptRecord(trial_name=res.trial_name, status=res.status, reward=res.reward,
                         infra_cause=res.infra_cause, episodes=res.episodes,
                         refine_context_chars=len(context or ""))


def _add_cost(total: CostLedger, part: CostLedger) -> None:
    total.generator.add(part.generator.input_tokens, part.generator.output_tokens, part.generator.calls)
    total.verifier.add(part.verifier.input_tokens, part.verifier.output_tokens, part.verifier.calls)
    total.parallel_output_tokens += part.parallel_output_tokens
    total.cost_usd += part.cost_usd


def _finish(out: ScalingResult, results: list[TrialResult]) -> None:
    for r in results:
        _add_cost(out.cost, r.cost)
    if any(r.status == "infra" for r in results):
        out.status, out.reward, out.selected = "infra", None, None
        return
    if out.oracle:
        out.reward = max((r.reward or 0.0) for r in results)
    elif out.selected is not None:
        out.reward = results[out.selected].reward
    out.status = "passed" if (out.reward or 0.0) >= 1.0 else "failed"


def _attempt_dir(out_dir: Path, task: Any, repetition: int, j: int) -> Path:
    return Path(out_dir) / f"{task.name}__r{repetition}__t{j}"


async def best_of_t(task: Any, agent: Any, endpoint: EndpointSpec | None, out_dir: str | Path, t: int, *,
                    selector: Selector = "verifier", judge_endpoint: EndpointSpec | None = None,
                    env_kind: str = "local", job_id: str | None = None, settings: dict[str, Any] | None = None,
                    verifier_endpoint: EndpointSpec | None = None, repetition: int = 1,
                    env_factory: EnvFactory | None = None, concurrency: int = 1) -> ScalingResult:
    """T independent trials of ``task``; the reported reward per ``selector`` (see the module docstring)."""
    if t < 1:
        raise ValueError(f"T must be at least 1, got {t}")
    out_dir = Path(out_dir)
    out = ScalingResult(mode="best_of_t", task_name=task.name, repetition=repetition, attempts_requested=t,
                        selector=selector, oracle=selector == "pass@T")
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(j: int) -> TrialResult:
        async with gate:
            return await run_trial(task, agent, endpoint, _attempt_dir(out_dir, task, repetition, j), env_kind,
                                   job_id, settings, verifier_endpoint, repetition=repetition,
                                   env_factory=env_factory)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(one(j)) for j in range(1, t + 1)]
    results = [x.result() for x in tasks]
    out.attempts = [_record(r) for r in results]
    out.env_runs = len(results)
    if not any(r.status == "infra" for r in results):
        if selector == "first" or t == 1:
            out.selected = 0
        elif selector == "verifier":
            judge = judge_endpoint or verifier_endpoint or endpoint
            if judge is None:
                raise ValueError("selector='verifier' needs a judge, verifier or generator endpoint")
            digests = [attempt_digest(_attempt_dir(out_dir, task, repetition, j)) for j in range(1, t + 1)]
            out.selected, out.selection = await judge_final_states(task.instruction, digests, judge, out.cost)
    _finish(out, results)
    out.write(out_dir / f"{task.name}__r{repetition}.scaling.json")
    return out


async def sequential_refine(task: Any, agent: Any, endpoint: EndpointSpec | None, out_dir: str | Path,
                            attempts: int = 2, *, env_kind: str = "local", job_id: str | None = None,
                            settings: dict[str, Any] | None = None, verifier_endpoint: EndpointSpec | None = None,
                            repetition: int = 1, env_factory: EnvFactory | None = None) -> ScalingResult:
    """Attempt after attempt, each given a summary of the one before; the last attempt's reward counts."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    out_dir = Path(out_dir)
    out = ScalingResult(mode="sequential_refine", task_name=task.name, repetition=repetition,
                        attempts_requested=attempts, selector="last")
    results: list[TrialResult] = []
    context: str | None = None
    for j in range(1, attempts + 1):
        kwargs: dict[str, Any] = {"refine_context": context} if context is not None else {}
        res = await run_trial(task, agent, endpoint, _attempt_dir(out_dir, task, repetition, j), env_kind,
                              job_id, settings, verifier_endpoint, repetition=repetition,
                              env_factory=env_factory, **kwargs)
        results.append(res)
        out.attempts.append(_record(res, context))
        if res.status == "infra":
            break
        context = refine_summary(_attempt_dir(out_dir, task, repetition, j), j)
    out.env_runs = len(results)
    out.selected = len(results) - 1
    _finish(out, results)
    out.write(out_dir / f"{task.name}__r{repetition}.scaling.json")
    return out
