"""Trajectory-level scaling (trials/scaling.py) over the real runner, a fake sandbox and a scripted agent.

The agent here (``python -m tests.test_midharness_scaling --spec PATH``) solves or fails per attempt
(``settings["attempt_modes"]["<j>"]``, j read from the trial folder ``…__t<j>``), writes an ATIF-style trajectory
and a pane log, and keeps the ``refine_context`` it was given, so the tests can see what each attempt got.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.fakes.openai_server import ScriptedServer
from tests.test_runner_fake_env import REPO, DirEnv, make_task
from trials.agents import AgentSpec
from trials.endpoints.spec import EndpointSpec
from trials.scaling import _read_best, attempt_digest, best_of_t, sequential_refine


def scripted_agent() -> AgentSpec:
    return AgentSpec(kind="process", name="scaling-fake", harness_version="scaling-fake-v1",
                     argv=[sys.executable, "-m", "tests.test_midharness_scaling", "--spec", "{spec}"],
                     env={"PYTHONPATH": str(REPO)})


def factory(kind, task, trial_dir, job_id):
    return DirEnv(task, trial_dir, job_id)


def agent_main(spec_path: str) -> int:
    from trials.harness_api import AgentOutcome, CostLedger, TrialSpec, write_json_atomic

    spec = TrialSpec.load(spec_path)
    agent_dir = Path(spec.agent_dir)
    j = re.search(r"__t(\d+)$", agent_dir.parent.name).group(1)
    mode = spec.settings.get("attempt_modes", {}).get(j, "wrong")
    if mode == "unreachable":
        AgentOutcome(status="error", error_kind="model_unreachable", error="refused").write(agent_dir)
        return 1
    answer = "42" if mode == "solve" else "41"
    (Path(spec.env["root"]) / "app" / "answer.txt").write_text(answer)
    given = spec.refine_context or spec.settings.get("refine_context_via_settings") or ""
    (agent_dir / "refine_context.txt").write_text(given)
    command = f"echo {answer} > /app/answer.txt\n"
    write_json_atomic(agent_dir / "trajectory.json", {"steps": [
        {"step_id": 1, "source": "user", "message": spec.instruction},
        {"step_id": 2, "source": "agent", "tool_calls": [
            {"function_name": "bash_command", "arguments": {"keystrokes": command, "duration": 0.1}},
            {"function_name": "mark_task_complete", "arguments": {}}],
         "observation": {"results": [{"content": f"root@box:/app# {command}"}]}}]})
    (agent_dir / "pane.log").write_text(f"\x1b[32mroot@box\x1b[0m:/app# {command}root@box:/app# cat answer.txt\n"
                                        f"{answer}\n")
    cost = CostLedger()
    cost.generator.add(100, 10)
    AgentOutcome(status="completed", episodes=1, cost=cost).write(agent_dir)
    return 0


def judge_prefers_42(body: dict) -> str:
    prompt = body["messages"][0]["content"]
    blocks = re.split(r"\n## Attempt (\d+)\n", prompt)
    for number, block in zip(blocks[1::2], blocks[2::2]):
        if "echo 42" in block:
            return f"Attempt {number} wrote the right value.\nBEST: {number}"
    return "BEST: 1"


async def test_best_of_t_verifier_picks_the_passing_attempt_without_seeing_rewards(tmp_path):
    task = make_task(tmp_path / "tasks")
    settings = {"attempt_modes": {"1": "wrong", "2": "wrong", "3": "solve", "4": "wrong"}}
    with ScriptedServer(judge_prefers_42) as srv:
        judge = EndpointSpec(base_url=srv.base_url, model="judge", timeout_sec=20)
        out = await best_of_t(task, scripted_agent(), None, tmp_path / "job", 4, selector="verifier",
                              judge_endpoint=judge, env_kind="fake", job_id="j", settings=settings,
                              env_factory=factory)
        prompt = srv.requests[0]["messages"][0]["content"]
    assert out.env_runs == 4 and len(out.attempts) == 4 and len(srv.requests) == 1
    assert out.selected == 2 and out.reward == 1.0 and out.status == "passed" and not out.oracle
    assert [a.reward for a in out.attempts] == [0.0, 0.0, 1.0, 0.0]
    assert "reward" not in prompt.lower() and "test.sh" not in prompt and "\x1b" not in prompt
    assert out.cost.generator.input_tokens == 400 and out.cost.verifier.calls == 1
    saved = json.loads((tmp_path / "job" / "t1__r1.scaling.json").read_text())
    assert saved["selected"] == 2 and saved["env_runs"] == 4
    assert all((tmp_path / "job" / f"t1__r1__t{j}" / "result.json").is_file() for j in range(1, 5))


async def test_best_of_t_pass_at_t_is_labelled_oracle_and_first_is_baseline(tmp_path):
    task = make_task(tmp_path / "tasks")
    settings = {"attempt_modes": {"1": "wrong", "2": "solve"}}
    oracle = await best_of_t(task, scripted_agent(), None, tmp_path / "a", 2, selector="pass@T", env_kind="fake",
                             settings=settings, env_factory=factory)
    assert oracle.oracle and oracle.reward == 1.0 and oracle.selected is None and oracle.env_runs == 2
    first = await best_of_t(task, scripted_agent(), None, tmp_path / "b", 2, selector="first", env_kind="fake",
                            settings=settings, env_factory=factory, concurrency=2)
    assert first.selected == 0 and first.reward == 0.0 and first.status == "failed"


async def test_best_of_t_with_an_infra_attempt_is_infra(tmp_path):
    task = make_task(tmp_path / "tasks")
    settings = {"attempt_modes": {"1": "solve", "2": "unreachable"}}
    out = await best_of_t(task, scripted_agent(), None, tmp_path / "job", 2, selector="pass@T", env_kind="fake",
                          settings=settings, env_factory=factory)
    assert out.status == "infra" and out.reward is None and out.env_runs == 2
    assert out.attempts[1].infra_cause == "model_unreachable"


def test_digest_reads_commands_claim_and_screen(tmp_path):
    agent = tmp_path / "t" / "agent"
    agent.mkdir(parents=True)
    (agent / "trajectory.json").write_text(json.dumps({"steps": [{"tool_calls": [
        {"function_name": "bash_command", "arguments": {"keystrokes": "ls\n"}}]}]}))
    digest = attempt_digest(tmp_path / "t")
    assert '"ls\\n"' in digest and "Claimed the task complete: no" in digest
    assert "(no terminal output recorded)" in digest
    assert _read_best("thinking... 3 is bad\nBEST: 2", 3) == 1 and _read_best("no idea", 3) is None


async def test_sequential_refine_hands_a_summary_forward_and_counts_runs(tmp_path):
    task = make_task(tmp_path / "tasks")
    settings = {"attempt_modes": {"1": "wrong", "2": "solve"}}
    out = await sequential_refine(task, scripted_agent(), None, tmp_path / "job", 2, env_kind="fake",
                                  settings=settings, env_factory=factory)
    assert out.env_runs == 2 and out.selected == 1 and out.reward == 1.0 and out.status == "passed"
    first = (tmp_path / "job" / "t1__r1__t1" / "agent" / "refine_context.txt").read_text()
    second = (tmp_path / "job" / "t1__r1__t2" / "agent" / "refine_context.txt").read_text()
    assert first == "" and "echo 41 > /app/answer.txt" in second and "reward" not in second.lower()


async def test_sequential_refine_logic_with_a_runner_that_takes_refine_context(tmp_path, monkeypatch):
    """Until run_trial takes refine_context, stand in for it: carry the summary through the settings."""
    from trials import scaling
    from trials.runner import run_trial as real

    async def run_trial(task, agent, endpoint, trial_dir, env_kind, job_id, settings=None, verifier_endpoint=None,
                        *, refine_context=None, **kw):
        settings = dict(settings or {}, refine_context_via_settings=refine_context)
        return await real(task, agent, endpoint, trial_dir, env_kind, job_id, settings, verifier_endpoint, **kw)

    monkeypatch.setattr(scaling, "run_trial", run_trial)
    task = make_task(tmp_path / "tasks")
    settings = {"attempt_modes": {"1": "wrong", "2": "solve", "3": "wrong"}}
    out = await scaling.sequential_refine(task, scripted_agent(), None, tmp_path / "job", 3, env_kind="fake",
                                          settings=settings, env_factory=factory)
    assert out.env_runs == 3 and out.selected == 2 and out.reward == 0.0 and out.status == "failed"  # last counts
    ctx = [(tmp_path / "job" / f"t1__r1__t{j}" / "agent" / "refine_context.txt").read_text() for j in (1, 2, 3)]
    assert ctx[0] == "" and "attempt 1" in ctx[1] and "echo 41" in ctx[1] and "echo 42" in ctx[2]
    assert [a.refine_context_chars > 0 for a in out.attempts] == [False, True, True]


if __name__ == "__main__":
    sys.exit(agent_main(sys.argv[sys.argv.index("--spec") + 1]))
