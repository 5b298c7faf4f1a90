"""trajectory.json is strict ATIF, checked here without Harbor: the shape ATIF v1.8 fixes (every object's allowed
keys, the required fields, step ids 1..n, agent-only fields, ISO timestamps, tool-call references), on what the
seed's trajectory writer makes. ``tests/test_harbor_diff.py`` checks the same files with Harbor's own models.
Also: the readers find the rich record (trajectory.rich.json) and fall back to an older run's trajectory.json.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from harness_seed import trajectory as tj
from harness_seed.midharness.export import trajectories
from harness_seed.model_call import ModelReply
from harness_seed.parsing import parse_response
from monitor.store import find_agent_dir, load_steps
from trials.harness_api import CostLedger, rich_trajectory_path

VERSIONS = {f"ATIF-v1.{i}" for i in range(9)}
ROOT_KEYS = {"schema_version", "session_id", "trajectory_id", "agent", "steps", "notes", "final_metrics",
             "continued_trajectory_ref", "extra", "subagent_trajectories"}
AGENT_KEYS = {"name", "version", "model_name", "tool_definitions", "extra"}
STEP_KEYS = {"step_id", "timestamp", "source", "model_name", "reasoning_effort", "message", "reasoning_content",
             "tool_calls", "observation", "metrics", "is_copied_context", "llm_call_count", "extra"}
AGENT_ONLY = {"model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"}
TOOL_CALL_KEYS = {"tool_call_id", "function_name", "arguments", "extra"}
RESULT_KEYS = {"source_call_id", "content", "subagent_trajectory_ref", "extra"}
METRIC_KEYS = {"prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "prompt_token_ids",
               "completion_token_ids", "logprobs", "extra"}
FINAL_KEYS = {"total_prompt_tokens", "total_completion_tokens", "total_cached_tokens", "total_cost_usd",
              "total_steps", "extra"}


def _keys(where: str, obj: Any, allowed: set[str], required: set[str] = frozenset()) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{where}: not an object"]
    return ([f"{where}.{k}: not an ATIF field" for k in sorted(set(obj) - allowed)]
            + [f"{where}.{k}: required" for k in sorted(required - set(obj))])


def _step_problems(i: int, step: dict[str, Any]) -> list[str]:
    where = f"steps.{i}"
    out = _keys(where, step, STEP_KEYS, {"step_id", "source", "message"})
    if step.get("step_id") != i + 1:
        out.append(f"{where}.step_id: expected {i + 1}")
    if step.get("source") not in ("system", "user", "agent"):
        out.append(f"{where}.source: {step.get('source')!r}")
    if step.get("source") != "agent":
        out += [f"{where}.{k}: only on agent steps" for k in sorted(AGENT_ONLY) if step.get(k) is not None]
    if not isinstance(step.get("message"), str):
        out.append(f"{where}.message: not a string")
    if step.get("timestamp") is not None:
        try:
            datetime.fromisoformat(step["timestamp"])
        except ValueError:
            out.append(f"{where}.timestamp: not ISO 8601")
    calls = step.get("tool_calls") or []
    for j, call in enumerate(calls):
        out += _keys(f"{where}.tool_calls.{j}", call, TOOL_CALL_KEYS, {"tool_call_id", "function_name", "arguments"})
    if step.get("observation") is not None:
        out += _keys(f"{where}.observation", step["observation"], {"results"}, {"results"})
        ids = {c.get("tool_call_id") for c in calls}
        for j, res in enumerate(step["observation"].get("results") or []):
            out += _keys(f"{where}.observation.results.{j}", res, RESULT_KEYS)
            if res.get("source_call_id") is not None and res["source_call_id"] not in ids:
                out.append(f"{where}.observation.results.{j}.source_call_id: no such tool call")
    if step.get("metrics") is not None:
        out += _keys(f"{where}.metrics", step["metrics"], METRIC_KEYS)
    return out


def atif_problems(doc: dict[str, Any]) -> list[str]:
    """Where ``doc`` is not strict ATIF v1.8 (the subset of the schema the seed can produce; empty: valid)."""
    out = _keys("", doc, ROOT_KEYS, {"agent", "steps"})
    if doc.get("schema_version", "ATIF-v1.8") not in VERSIONS:
        out.append(f"schema_version: {doc.get('schema_version')!r}")
    out += _keys("agent", doc.get("agent"), AGENT_KEYS, {"name", "version"})
    steps = doc.get("steps") or []
    if not steps:
        out.append("steps: at least one")
    for i, step in enumerate(steps):
        out += _step_problems(i, step)
    if doc.get("final_metrics") is not None:
        out += _keys("final_metrics", doc["final_metrics"], FINAL_KEYS)
    return out


def _rich(tmp_path: Path, *, reasoning: bool = False) -> tj.Trajectory:
    """A three-episode run as the seed loop records it: a command, a parse error, a completion claim."""
    t = tj.Trajectory(tmp_path / "trajectory.rich.json", "t-1",
                      {"name": "terminus-2", "version": "seed", "model_name": "m", "extra": {"settings": {}}})
    t.add_prompt("the task and the screen")
    replies = [json.dumps({"analysis": "empty dir", "plan": "write it", "task_complete": False,
                           "commands": [{"keystrokes": "echo hi > out.txt\n", "duration": 0.1}]}),
               "no JSON here",
               json.dumps({"analysis": "done", "plan": "finish", "commands": [], "task_complete": True})]
    sent: list[dict] = [{"role": "user", "content": "the task and the screen"}]
    for episode, text in enumerate(replies):
        extra = {"reasoning": "thinking"} if reasoning else {}
        reply = ModelReply(text, "stop", 100 + episode, 20, 0.5, extra)
        t.add_episode(episode=episode, model_name="m", sent=sent, reply=reply, parsed=parse_response(text, "json"),
                      observation=None if episode == 2 else f"screen {episode}", timings={"model_sec": 0.5},
                      extra={"pending_completion": False})
        sent = sent + [{"role": "assistant", "content": text}, {"role": "user", "content": f"screen {episode}"}]
    t.finish(CostLedger(), {"status": "completed"})
    return t


def test_the_rich_record_is_not_strict_atif_and_its_atif_form_is(tmp_path):
    t = _rich(tmp_path, reasoning=True)
    rich = json.loads(json.dumps(t.data, default=str))
    assert any("trial_id: not an ATIF field" in p for p in atif_problems(rich))  # why it has its own name
    atif = json.loads(json.dumps(tj.to_atif(t.data), default=str))
    assert atif_problems(atif) == []
    assert atif["schema_version"] == "ATIF-v1.8" and [s["step_id"] for s in atif["steps"]] == [1, 2, 3, 4]
    first, claim = atif["steps"][1], atif["steps"][3]
    assert first["message"] == "Analysis: empty dir\nPlan: write it" and first["extra"]["episode"] == 0
    assert first["tool_calls"][0]["function_name"] == "bash_command"
    assert first["metrics"] == {"prompt_tokens": 100, "completion_tokens": 20, "extra": {"latency_sec": 0.5}}
    assert first["reasoning_content"] == "thinking"
    assert atif["steps"][2]["message"] == "no JSON here"  # a reply that did not parse stays as it came
    assert [c["function_name"] for c in claim["tool_calls"]] == ["mark_task_complete"]
    assert atif["extra"]["trial_id"] == "t-1" and atif["final_metrics"]["extra"]["status"] == "completed"
    # the prompt deltas travel along: the full prompt of any step rebuilds from either file
    assert tj.messages_sent(atif, 3) == tj.messages_sent(rich, 3)


def test_write_atif_writes_strict_atif_and_nothing_for_a_run_without_steps(tmp_path):
    t = _rich(tmp_path)
    assert t.write_atif(tmp_path / "trajectory.json") is True
    assert atif_problems(json.loads((tmp_path / "trajectory.json").read_text())) == []
    empty = tj.Trajectory(tmp_path / "e.rich.json", "t-2", {"name": "terminus-2", "version": "seed"})
    assert empty.write_atif(tmp_path / "e.json") is False and not (tmp_path / "e.json").exists()


def test_the_seed_settings_name_the_two_files():
    from harness_seed.settings import load_settings

    s = load_settings()
    assert (s.trajectory.file, s.trajectory.atif_file) == ("trajectory.rich.json", "trajectory.json")


def test_readers_take_the_rich_record_and_fall_back_to_an_older_runs_trajectory_json(tmp_path):
    t = _rich(tmp_path)
    new = tmp_path / "job" / "new__r1" / "agent"
    old = tmp_path / "job" / "old__r1" / "agent"
    new.mkdir(parents=True), old.mkdir(parents=True)
    t.path = new / "trajectory.rich.json"
    t.write()
    t.write_atif(new / "trajectory.json")
    (old / "trajectory.json").write_text(json.dumps(t.data, default=str))  # before the split: rich, old name
    assert rich_trajectory_path(new) == new / "trajectory.rich.json"
    assert rich_trajectory_path(old) == old / "trajectory.json"
    for agent in (new, old):
        assert find_agent_dir(agent.parent) == agent
        assert [s.get("episode") for s in load_steps(agent)] == [None, 0, 1, 2]  # episodes at the top level
    assert trajectories(tmp_path / "job") == [new / "trajectory.rich.json", old / "trajectory.json"]
