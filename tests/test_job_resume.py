"""The job grid with a fake sandbox: concurrency, ⊥ handling, resume, config guard and the lock."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import pytest

from trials.grid import run_job
from trials.job import JobError, job_lock
from trials.results import JobConfig, JobResult, TrialResult

from .test_runner_fake_env import DirEnv, fake_agent, make_task


def _setup(tmp_path, names=("a", "b", "c"), r=2, settings=None, concurrency=2):
    tasks = [make_task(tmp_path / "tasks", n) for n in names]
    log = tmp_path / "runs.log"
    config = JobConfig(job_id="job1", tasks_dir=str(tmp_path / "tasks"), task_names=list(names),
                       agent=fake_agent(), env_kind="local", r=r, concurrency=concurrency,
                       settings={"run_log": str(log), **(settings or {})})
    return tasks, config, log


class Factory:
    """Fails the env start of the given trial folders (once each) — a transient ⊥."""

    def __init__(self, fail_once=()):
        self.fail_once, self.starts = set(fail_once), collections.Counter()

    def __call__(self, kind, task, trial_dir, job_id):
        name = Path(trial_dir).name
        self.starts[name] += 1
        fail = name in self.fail_once
        self.fail_once.discard(name)
        return DirEnv(task, trial_dir, job_id, fail_start=fail)


def _runs(log: Path) -> collections.Counter:
    return collections.Counter(log.read_text().split()) if log.exists() else collections.Counter()


def test_grid_runs_every_cell_once(tmp_path):
    tasks, config, log = _setup(tmp_path, settings={"modes": {"b": "wrong"}})
    res = asyncio.run(run_job(config, tmp_path / "job", tasks=tasks, env_factory=Factory(), progress=False))
    assert res.complete and res.trials_run == 6
    assert res.metrics["pass_at_1"] == pytest.approx(4 / 6)
    assert res.metrics["pass_hat_r"] == pytest.approx(2 / 3)
    assert sorted(_runs(log).values()) == [1] * 6
    assert JobResult.load(tmp_path / "job" / "job_result.json").complete
    assert {t.status for t in res.trials} == {"passed", "failed"}
    # the fake agent books 100 in / 10 out generator tokens per trial; the job sums its six trials
    assert (res.cost.generator.calls, res.cost.generator.input_tokens, res.cost.generator.output_tokens) == (
        6, 600, 60)


def test_resume_reruns_only_infra_and_keeps_the_rest(tmp_path):
    tasks, config, log = _setup(tmp_path)
    job = tmp_path / "job"
    first = asyncio.run(run_job(config, job, tasks=tasks, env_factory=Factory(fail_once={"b__r2"}), progress=False))
    assert not first.complete
    assert [(m["task"], m["repetition"], m["reason"]) for m in first.metrics["missing"]] == [
        ("b", 2, "infra:image_build")]
    kept = {d.name: (TrialResult.load(d / "result.json").run_id, (d / "result.json").stat().st_mtime_ns)
            for d in job.iterdir() if d.is_dir() and d.name != "b__r2"}
    # a half-written trial: its folder exists but result.json was never written
    (job / "c__r2" / "result.json").unlink()
    del kept["c__r2"]

    factory = Factory()
    second = asyncio.run(run_job(config, job, resume=True, tasks=tasks, env_factory=factory, progress=False))
    assert second.complete and second.trials_run == 2
    assert set(factory.starts) == {"b__r2", "c__r2"} and set(factory.starts.values()) == {1}
    for name, (run_id, mtime) in kept.items():
        res = job / name / "result.json"
        assert TrialResult.load(res).run_id == run_id and res.stat().st_mtime_ns == mtime
    assert (job / "b__r2.attempt-1" / "result.json").is_file()  # the ⊥ attempt is kept as evidence
    assert (job / "c__r2.attempt-1").is_dir()
    runs = _runs(log)
    assert all(n == 1 for cell, n in runs.items() if not cell.endswith(("b__r2", "c__r2")))

    third = asyncio.run(run_job(config, job, resume=True, tasks=tasks, env_factory=Factory(), progress=False))
    assert third.complete and third.trials_run == 0


def test_existing_job_needs_resume_and_same_config(tmp_path):
    tasks, config, _ = _setup(tmp_path, names=("a",), r=1)
    job = tmp_path / "job"
    asyncio.run(run_job(config, job, tasks=tasks, env_factory=Factory(), progress=False))
    with pytest.raises(JobError, match="--resume"):
        asyncio.run(run_job(config, job, tasks=tasks, env_factory=Factory(), progress=False))
    changed = config.model_copy(update={"r": 2})
    with pytest.raises(JobError, match="config changed"):
        asyncio.run(run_job(changed, job, resume=True, tasks=tasks, env_factory=Factory(), progress=False))
    # concurrency is not part of the identity
    more = config.model_copy(update={"concurrency": 4})
    assert asyncio.run(run_job(more, job, resume=True, tasks=tasks, env_factory=Factory(), progress=False)).complete
    forced = asyncio.run(run_job(changed, job, resume=True, force_config=True, tasks=tasks, env_factory=Factory(),
                                 progress=False))
    assert forced.complete and forced.trials_run == 1  # only a__r2 is new
    assert list(job.glob("config.*.json"))  # the replaced config is kept


def test_lock_refuses_a_second_run(tmp_path):
    tasks, config, _ = _setup(tmp_path, names=("a",), r=1)
    job = tmp_path / "job"
    job.mkdir()
    with job_lock(job), pytest.raises(JobError, match="another process"):
        asyncio.run(run_job(config, job, tasks=tasks, env_factory=Factory(), progress=False))
    # the lock is released: a stale lock file (content from a dead process) does not block
    (job / "job.lock").write_text("999999\n")
    assert asyncio.run(run_job(config, job, tasks=tasks, env_factory=Factory(), progress=False)).complete
