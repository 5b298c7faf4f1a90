"""validate.evaluate.run_grid with the fake sandbox and fake agent: booking, resume, ⊥ retries, curtailment,
the config guard and the kill hook (fast; no tmux, no sandbox)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from trials.agents import AgentSpec
from validate.evaluate import EvaluationError, GridPlan, MemoryBook, run_grid, stop_when_decided

from .test_job_resume import Factory, _runs
from .test_runner_fake_env import REPO, fake_agent, make_task


def _plan(tmp_path, names=("a", "b"), r=2, modes=None, agent: AgentSpec | None = None) -> tuple[GridPlan, list]:
    tasks = [make_task(tmp_path / "tasks", n) for n in names]
    plan = GridPlan(purpose="evaluation", agent=agent or fake_agent(), tasks_dir=tmp_path / "tasks",
                    task_names=list(names), r=r, job_dir=tmp_path / "job", endpoint=None, concurrency=1,
                    settings={"run_log": str(tmp_path / "runs.log"), "modes": modes or {}})
    return plan, tasks


def _go(plan, tasks, book, **kw):
    return asyncio.run(run_grid(plan, book, tasks=tasks, env_factory=kw.pop("factory", Factory()), **kw))


def test_every_trial_booked_once_and_resume_runs_nothing_finished(tmp_path):
    plan, tasks = _plan(tmp_path, modes={"b": "wrong"})
    book = MemoryBook()
    out = _go(plan, tasks, book)
    assert out.complete and out.trials_run == 4 and out.grid == {"a": [True, True], "b": [False, False]}
    assert sorted(book.booked) == [("a", 1, "passed"), ("a", 2, "passed"), ("b", 1, "failed"), ("b", 2, "failed")]
    assert (plan.job_dir / "job_result.json").is_file()
    again = _go(plan, tasks, book)
    assert again.trials_run == 0 and len(book.booked) == 4 and sorted(_runs(tmp_path / "runs.log").values()) == [1] * 4


def test_a_finished_trial_whose_booking_was_lost_is_booked_not_rerun(tmp_path):
    plan, tasks = _plan(tmp_path)
    _go(plan, tasks, MemoryBook())
    fresh = MemoryBook()  # as if a kill came between result.json and the ledger append
    out = _go(plan, tasks, fresh)
    assert out.trials_run == 0 and len(fresh.booked) == 4


def test_infra_cell_is_retried_in_the_same_call_and_each_attempt_booked(tmp_path):
    plan, tasks = _plan(tmp_path)
    book = MemoryBook()
    factory = Factory(fail_once={"b__r2"})
    out = _go(plan, tasks, book, factory=factory)
    assert out.complete and factory.starts["b__r2"] == 2
    assert ("b", 2, "infra") in book.booked and ("b", 2, "passed") in book.booked
    assert (plan.job_dir / "b__r2.attempt-1").is_dir()  # the ⊥ attempt is kept as evidence

    plan2, tasks2 = _plan(tmp_path / "x")
    out = _go(plan2, tasks2, MemoryBook(), factory=Factory(fail_once={"a__r1"}), infra_retries=0)
    assert not out.complete and [m.reason for m in out.metrics.missing] == ["infra:image_build"]


def test_sequential_stopping_stops_once_decided(tmp_path):
    """Baseline Pass@1 0.5 over a × b × r=2; a candidate failing everything cannot beat it once 2 of its 4
    cells have failed (the best completion then is 0.5, not above), so curtailment stops it there."""
    plan, tasks = _plan(tmp_path, modes={"a": "wrong", "b": "wrong"})
    baseline = {"a": [True, True], "b": [False, False]}
    out = _go(plan, tasks, MemoryBook(), stop=stop_when_decided(baseline, ["a", "b"], 2))
    assert out.stopped_early and out.trials_run == 2 and not out.complete
    assert out.grid == {"a": [False], "b": [False]}


def test_a_folder_of_another_configuration_is_refused(tmp_path):
    plan, tasks = _plan(tmp_path)
    _go(plan, tasks, MemoryBook())
    plan.r = 3
    with pytest.raises(EvaluationError, match="another configuration"):
        _go(plan, tasks, MemoryBook())


def test_kill_hook_kills_the_process_at_the_named_stage(tmp_path):
    code = ("from validate.evaluate import kill_point\n"
            "kill_point('screening:trial'); print('first passed', flush=True)\n"
            "kill_point('screening:trial'); print('never')\n")
    env = {**os.environ, "RISE_TEST_KILL_AT": "screening:trial@2", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -9 and proc.stdout == "first passed\n"
    env["RISE_TEST_KILL_AT"] = "evaluation"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "never" in proc.stdout

