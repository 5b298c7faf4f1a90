"""Scripted scenarios: one harness run on a small task against a scripted model, and what it left behind.

A scenario is a contract case (``validate.contract_model.Case``): its task is written out as a Harbor task
folder, its replies answer the harness's chat requests over real HTTP (``ScriptedServer``), and the trial goes
through the real runner (``trials.runner.run_trial``) with the harness as a process agent in the local sandbox.
The run is then read into one JSON *document* that expectations are evaluated on:

- ``trajectory`` (the whole rich trajectory), ``steps`` (its agent steps), ``claims`` (how many replies claimed
  completion), ``observations`` (each step's observation text, in order), ``last_observation``;
- ``spans`` (flat dicts: ``boundary``, ``name``, ``episode``, ``function``, ``status`` ok|error, ``args``,
  ``result``, ``exception``, ``attributes``);
- ``result`` (result.json), ``outcome`` (agent_result.json), ``status``, ``reward``, ``requests`` (chat
  requests the model answered), ``rules`` (which reply rule answered each of them: an index or ``fallback``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.agents import harness_agent
from trials.agents import AgentSpec
from trials.endpoints.spec import EndpointSpec
from trials.harness_api import rich_trajectory_path

from .contract_model import Case, Reply, TaskSpec

log = logging.getLogger(__name__)

BASE_IMAGE = "python:3.11-slim-bookworm"
FALLBACK = Reply(analysis="Nothing left to do.", plan="Mark the task complete.", task_complete=True)
VERIFIER_DUEL_ANSWER = "A"  # Mid-Harness decision-only duels (max_tokens = 1)
CRASH_KINDS = {"crash", "agent_timeout", "terminated"}


def scripted_server_class() -> type:
    """The project's scripted OpenAI-compatible server class."""
    from trials.endpoints.scripted import ScriptedServer

    return ScriptedServer


def last_user_message(body: dict) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


class ScriptedModel:
    """Answers chat requests from a case's reply rules (first matching rule with uses left)."""

    def __init__(self, case: Case, fmt: str = "json"):
        self.fmt = fmt
        self.rules = list(case.replies)
        self.fallback = case.fallback or FALLBACK
        self.max_requests = case.max_requests
        self.used = [0] * len(self.rules)
        self.answered: list[int | str] = []

    def pick(self, last_user: str) -> tuple[int | str, Reply]:
        if len(self.answered) < self.max_requests:
            for i, rule in enumerate(self.rules):
                if (rule.times is None or self.used[i] < rule.times) and rule.matches(last_user):
                    self.used[i] += 1
                    return i, rule
        return "fallback", self.fallback

    def __call__(self, body: dict) -> str:
        if body.get("max_tokens") == 1:
            return VERIFIER_DUEL_ANSWER
        which, rule = self.pick(last_user_message(body))
        self.answered.append(which)
        return rule.render(self.fmt)


def write_task(spec: TaskSpec, name: str, dest: Path) -> Path:
    """Write ``spec`` as a Harbor task folder ``dest`` (replaced if present); returns it."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "task.toml").write_text(
        f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = {spec.agent_timeout_sec}\n\n'
        f'[verifier]\ntimeout_sec = 30\n\n[environment]\nallow_internet = {str(spec.allow_internet).lower()}\n'
        f'workdir = "/app"\n')
    (dest / "instruction.md").write_text(spec.instruction.rstrip() + "\n")
    env = dest / "environment"
    env.mkdir(exist_ok=True)
    lines = [f"FROM {BASE_IMAGE}", "WORKDIR /app"]
    if spec.files:
        for rel, content in spec.files.items():
            target = env / "files" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        lines.append("COPY files/ /app/")
    lines += [f"RUN {line}" for line in spec.setup]
    (env / "Dockerfile").write_text("\n".join(lines) + "\n")
    tests = dest / "tests"
    tests.mkdir(exist_ok=True)
    if spec.test is not None:
        (tests / "test.sh").write_text(spec.test)
    else:
        (tests / "check.sh").write_text(f"#!/bin/bash\ncd /app\n{spec.check}\n")
        (tests / "test.sh").write_text(
            "#!/bin/bash\nmkdir -p /logs/verifier\n"
            "if bash /tests/check.sh >/logs/verifier/check.log 2>&1; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n")
    return dest


def flat_spans(trial_dir: Path) -> list[dict[str, Any]]:
    """The trial's spans as plain dicts, in start order (empty when the run recorded none)."""
    from monitor.store import TrialTrace

    if not (trial_dir / "agent" / "spans.jsonl").is_file():
        return []
    trace = TrialTrace.load(trial_dir)
    out = []
    for s in trace.spans:
        out.append({"name": s.name, "boundary": s.boundary, "episode": s.episode, "function": s.function,
                    "status": "error" if s.is_error else "ok", "args": s.args, "result": s.result,
                    "exception": s.exception, "attributes": dict(s.attributes)})
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def build_document(trial_dir: Path, model: ScriptedModel | None = None) -> dict[str, Any]:
    """Everything expectations may look at, from a finished trial folder."""
    agent = trial_dir / "agent"
    outcome = _read_json(agent / "agent_result.json") or {}
    traj_file = (outcome.get("metadata") or {}).get("trajectory")  # the rich record, as the harness names it
    trajectory = _read_json(agent / traj_file if traj_file else rich_trajectory_path(agent)) or {"steps": []}
    result = _read_json(trial_dir / "result.json") or {}
    steps = [s for s in trajectory.get("steps", []) if s.get("source") == "agent"]
    observations = []
    for s in steps:
        results = (s.get("observation") or {}).get("results") or [{}]
        observations.append(results[0].get("content"))
    claims = sum(1 for s in steps for c in s.get("tool_calls") or [] if c.get("function_name") ==
                 "mark_task_complete")
    return {
        "trajectory": trajectory, "steps": steps, "claims": claims, "observations": observations,
        "last_observation": next((o for o in reversed(observations) if o is not None), None),
        "spans": flat_spans(trial_dir), "result": result, "outcome": outcome,
        "status": result.get("status"), "reward": result.get("reward"),
        "requests": len(model.answered) if model else None,
        "rules": list(model.answered) if model else [],
    }


def crash_reason(doc: dict[str, Any]) -> str | None:
    """Why this run counts as a crash (never a pass for a negative case), or None."""
    result, outcome = doc.get("result") or {}, doc.get("outcome") or {}
    if not result:
        return "no result.json"
    if result.get("status") == "infra":
        return f"infrastructure failure ({result.get('infra_cause')}): {result.get('infra_message')}"
    if result.get("agent_status") == "missing":
        return f"the harness left no outcome: {result.get('agent_error')}"
    if result.get("agent_timed_out"):
        return "the harness ran past its timeout"
    kind = result.get("agent_error_kind") or outcome.get("error_kind")
    if result.get("agent_status") == "error" and kind in CRASH_KINDS:
        error = (result.get("agent_error") or "").strip().splitlines()
        return f"the harness crashed ({kind}): {error[-1] if error else ''}"
    return None


@dataclass
class ScenarioRun:
    """One case run in one configuration."""

    label: str
    trial_dir: Path
    settings: dict[str, Any]
    document: dict[str, Any] = field(default_factory=dict)
    crash: str | None = None


async def run_scenario(harness_dir: Path, case: Case, task: TaskSpec, settings: dict[str, Any], out_dir: Path,
                       *, label: str, agent: AgentSpec | None = None) -> ScenarioRun:
    """Run ``case`` once with the harness at ``harness_dir`` and ``settings``; results under ``out_dir``."""
    from trials.runner import run_trial
    from trials.tasks.load import load_task

    out_dir = Path(out_dir)
    task_dir = write_task(task, case.task, out_dir / "task")
    trial_dir = out_dir / f"{case.task}__r1"
    effective = {**settings, "terminus.max_episodes": case.max_episodes}
    model = ScriptedModel(case, str(effective.get("terminus.format", "json")))
    agent = agent or harness_agent(Path(harness_dir))
    server = scripted_server_class()(model, model="scripted-contract-model")
    server.start()
    try:
        endpoint = EndpointSpec(base_url=server.base_url, model="scripted-contract-model", timeout_sec=60)
        await run_trial(load_task(task_dir), agent, endpoint, trial_dir, "local", None, settings=effective,
                        agent_timeout_sec=task.agent_timeout_sec)
    finally:
        await asyncio.to_thread(server.stop)
    doc = build_document(trial_dir, model)
    doc["config"] = label
    (out_dir / "scenario.json").write_text(json.dumps({"label": label, "case": case.name, "settings": effective,
                                                       "rules": doc["rules"]}, indent=1))
    return ScenarioRun(label, trial_dir, effective, doc, crash_reason(doc))

