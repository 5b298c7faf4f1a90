"""One trial through the runner with a fake sandbox and a scripted agent subprocess (real process groups)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from trials.results import TrialResult
from trials.runner import parse_reward, run_trial

from .test_runner_fake_env import DirEnv, fake_agent, make_task


def _alive(pid: int) -> bool:
    """True for a live process; a zombie (dead, not yet reaped by init) counts as dead."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def _run(tmp_path, mode="solve", task=None, env_opts=None, **kw):
    task = task or make_task(tmp_path / "tasks")
    envs = []

    def factory(kind, task, trial_dir, job_id):
        envs.append(DirEnv(task, trial_dir, job_id, **(env_opts or {})))
        return envs[-1]

    import asyncio

    res = asyncio.run(run_trial(task, fake_agent(), None, tmp_path / "job" / f"{task.name}__r1", "fake", "job1",
                                settings={"mode": mode}, env_factory=factory, **kw))
    return res, envs


def test_passed_trial_writes_everything(tmp_path):
    res, envs = _run(tmp_path)
    tdir = tmp_path / "job" / "t1__r1"
    assert res.status == "passed" and res.reward == 1.0 and res.failure_class is None
    assert TrialResult.load(tdir / "result.json").run_id == res.run_id
    assert (tdir / "config.json").is_file() and (tdir / "agent" / "trial_spec.json").is_file()
    assert (tdir / "agent" / "stdout.log").is_file()
    assert (tdir / "verifier" / "test-stdout.txt").is_file()
    assert res.cost.generator.input_tokens == 100 and res.episodes == 2
    assert res.harness_version == "fake-v1" and res.verifier.reward_source == "reward.txt"
    assert res.durations.total >= res.durations.agent > 0
    assert envs[0].stopped


def test_wrong_answer_is_failed_not_infra(tmp_path):
    res, envs = _run(tmp_path, "wrong")
    assert res.status == "failed" and res.failure_class == "task_failure" and res.reward == 0.0
    assert envs[0].stopped


def test_agent_timeout_kills_process_group(tmp_path):
    t0 = time.monotonic()
    res, envs = _run(tmp_path, "sleep", agent_timeout_sec=1.5)
    assert time.monotonic() - t0 < 20
    assert res.status == "failed" and res.failure_class == "agent_timeout" and res.agent_timed_out
    child = int((tmp_path / "job" / "t1__r1" / "agent" / "child.pid").read_text())
    time.sleep(0.2)
    assert not _alive(child)  # the agent's child died with its group
    assert envs[0].stopped


def test_agent_crash_without_result_is_agent_error(tmp_path):
    res, _ = _run(tmp_path, "crash")
    assert res.status == "failed" and res.failure_class == "agent_error"
    assert res.agent_status == "missing" and res.agent_exit_code == 3


def test_agent_reported_error_is_agent_error(tmp_path):
    res, _ = _run(tmp_path, "error")
    assert res.failure_class == "agent_error" and res.agent_error_kind == "crash"


def test_model_unreachable_is_infra(tmp_path):
    res, envs = _run(tmp_path, "unreachable")
    assert res.status == "infra" and res.infra_cause == "model_unreachable"
    assert envs[0].stopped


def test_harness_reported_sandbox_failure_is_infra(tmp_path):
    res, envs = _run(tmp_path, "sandbox_lost")
    assert res.status == "infra" and res.infra_cause == "sandbox" and "tmux" in res.infra_message
    assert envs[0].stopped


def test_build_failure_is_infra_with_log(tmp_path):
    res, envs = _run(tmp_path, env_opts={"fail_start": True})
    assert res.status == "infra" and res.infra_cause == "image_build"
    assert res.infra_log_path and res.infra_log_path.endswith("build.log")
    assert envs[0].stopped


def test_unexpected_exception_is_infra_with_traceback(tmp_path):
    res, envs = _run(tmp_path, env_opts={"fail_exec": True})
    assert res.status == "infra" and res.infra_cause == "runner_error"
    assert "fake exec exploded" in res.traceback
    assert envs[0].stopped
    assert json.loads((tmp_path / "job" / "t1__r1" / "result.json").read_text())["status"] == "infra"


def test_verifier_timeout(tmp_path):
    task = make_task(tmp_path / "tasks", verifier_env={"VERIFIER_SLEEP": "5"}, verifier_timeout=1)
    res, _ = _run(tmp_path, task=task)
    assert res.status == "failed" and res.failure_class == "verifier_timeout"


def test_reward_json_wins(tmp_path):
    task = make_task(tmp_path / "tasks", verifier_env={"REWARD_STYLE": "json"})
    res, _ = _run(tmp_path, task=task)
    assert res.status == "passed" and res.verifier.reward_source == "reward.json"


def test_no_reward_file_is_verifier_error_unless_legacy(tmp_path):
    task = make_task(tmp_path / "tasks", verifier_env={"REWARD_STYLE": "none"})
    res, _ = _run(tmp_path, task=task)
    assert res.status == "failed" and res.failure_class == "verifier_error"
    legacy = make_task(tmp_path / "tasks2", verifier_env={"REWARD_STYLE": "none"}, legacy=True)
    res, _ = _run(tmp_path / "b", task=legacy)
    assert res.status == "passed" and res.verifier.reward_source == "exit_code"


def test_parse_reward_rules(tmp_path):
    d = tmp_path
    assert parse_reward(d)[0] is None
    (d / "reward.txt").write_text(" 0.5\n")
    assert parse_reward(d)[:2] == (0.5, "reward.txt")
    (d / "reward.json").write_text(json.dumps({"a": 1, "b": 0, "name": "x"}))
    assert parse_reward(d)[:2] == (0.5, "reward.json")  # mean of the numeric values
    (d / "reward.json").write_text(json.dumps({"reward": 1.0, "b": 0}))
    assert parse_reward(d)[0] == 1.0
    (d / "reward.json").write_text("1")
    assert parse_reward(d)[0] == 1.0
    (d / "reward.json").write_text("{broken")
    reward, _, _, error = parse_reward(d)
    assert reward is None and "not JSON" in error
