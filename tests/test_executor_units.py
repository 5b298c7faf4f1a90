"""Executors without a cluster: capacity arithmetic, the worker side of a Ray trial run in-process, atomic
delivery into a job folder, the rerun rule of ``run_cell`` and the executor config (no Ray start-up here)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.test_job_resume import Factory
from tests.test_runner_fake_env import fake_agent, make_task
from trials.executors.base import Executor, LocalExecutor, TrialCall
from trials.executors.config import ExecutorConfig
from trials.executors.delivery import INCOMING, deliver_tar, materialize, rewrite_paths, ship
from trials.executors.ray_executor import slots_offered
from trials.executors.ray_worker import relocate_agent, run_on_worker, trial_limit
from trials.grid import run_cell, run_job
from trials.results import JobConfig, TrialResult


def _loadable_task(root: Path, name: str):
    task = make_task(root, name)
    (task.path / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n')
    (task.path / "instruction.md").write_text("write 42 to /app/answer.txt\n")
    (task.path / "environment").mkdir(exist_ok=True)
    (task.path / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    return task


def test_slots_offered_counts_alive_nodes_and_every_resource():
    nodes = [{"Alive": True, "Resources": {"rise_trial": 4.0, "rise_docker": 1.0}},
             {"Alive": True, "Resources": {"rise_trial": 2.0}},
             {"Alive": False, "Resources": {"rise_trial": 8.0}},
             {"Alive": True, "Resources": {"CPU": 16.0}}]
    assert slots_offered(nodes, {"rise_trial": 1.0}) == 6
    assert slots_offered(nodes, {"rise_trial": 2.0}) == 3
    assert slots_offered(nodes, {"rise_trial": 1.0, "rise_docker": 1.0}) == 1


def test_executor_config_rejects_bad_values_and_adds_docker_capacity():
    cfg = ExecutorConfig(kind="ray", address="10.0.0.1:6379")
    assert cfg.trial_resources("local") == {"rise_trial": 1.0}
    assert cfg.trial_resources("docker") == {"rise_trial": 1.0, "rise_docker": 1.0}
    with pytest.raises(ValueError, match="must be > 0: rise_trial"):
        ExecutorConfig(resources={"rise_trial": 0})
    with pytest.raises(ValueError, match="kind"):
        ExecutorConfig(kind="slurm")
    with pytest.raises(ValueError, match="extra"):
        ExecutorConfig(adress="typo")


def test_relocate_agent_swaps_python_and_harness_copy(tmp_path):
    agent = fake_agent().model_copy(update={"argv": ["/driver/python", "-m", "monitor.host", "--harness",
                                                     "/driver/h", "--spec", "{spec}"],
                                            "env": {"PYTHONPATH": "/driver"}, "harness_dir": "/driver/h"})
    moved = relocate_agent(agent, "/driver/python", tmp_path / "h")
    assert moved.argv[0] == sys.executable and moved.argv[4] == str(tmp_path / "h")
    assert moved.harness_dir == str(tmp_path / "h") and moved.harness_version == agent.harness_version


def test_ship_and_materialize_skip_caches_and_unpack_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "h"
    (src / "__pycache__").mkdir(parents=True)
    (src / "main.py").write_text("print(1)\n")
    (src / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"x")
    digest, name, data = ship(src)
    first = materialize(digest, name, data)
    assert (first / "main.py").read_text() == "print(1)\n" and not (first / "__pycache__").exists()
    (first / "marker").write_text("kept")  # a second trial on this node reuses the copy
    assert materialize(digest, name, data) == first and (first / "marker").exists()


def test_worker_runs_the_same_trial_code_and_the_driver_delivers_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_RAY_SCRATCH", str(tmp_path / "scratch"))
    task = _loadable_task(tmp_path / "tasks", "t1")
    spec = {"trial_name": "t1__r1", "job_dir": str(tmp_path / "job"), "job_id": "j", "task_path": str(task.path),
            "agent": fake_agent().model_dump(mode="json"), "endpoint": None, "verifier_endpoint": None,
            "env_kind": "local", "settings": {"mode": "solve"}, "repetition": 1, "driver_python": sys.executable,
            "delivery": "object_store", "trial_timeout_sec": 60}
    out = run_on_worker(spec, None, None, Factory(), node_id="n1")
    assert out["result"]["status"] == "passed" and out["node_id"] == "n1"
    assert not Path(out["worker_dir"]).exists()  # the worker keeps nothing once the tar is made
    job = tmp_path / "job"
    job.mkdir()
    trial = job / "t1__r1"
    deliver_tar(out["tar"], "t1__r1", out["worker_dir"], trial, "abc")
    res = TrialResult.load(trial / "result.json")
    assert res.status == "passed" and res.trial_name == "t1__r1"
    assert json.loads((trial / "executor.json").read_text())["node_id"] == "n1"
    assert out["worker_dir"] not in (trial / "config.json").read_text()  # paths point at the driver's folder
    assert not any((job / INCOMING).iterdir())
    with pytest.raises(FileExistsError, match="delivery refused"):  # never a second result in one cell
        deliver_tar(out["tar"], "t1__r1", out["worker_dir"], trial, "def")
    assert TrialResult.load(trial / "result.json").run_id == res.run_id


def test_worker_wall_clock_limit_is_infra(tmp_path, monkeypatch):
    monkeypatch.setenv("RISE_RAY_SCRATCH", str(tmp_path / "scratch"))
    task = _loadable_task(tmp_path / "tasks", "t1")
    assert trial_limit(task, None) == 30 + 30 + 600 and trial_limit(task, 5) == 5
    spec = {"trial_name": "t1__r1", "job_dir": str(tmp_path / "job"), "job_id": "j", "task_path": str(task.path),
            "agent": fake_agent().model_dump(mode="json"), "endpoint": None, "verifier_endpoint": None,
            "env_kind": "local", "settings": {"mode": "sleep"}, "repetition": 1, "driver_python": sys.executable,
            "delivery": "shared", "trial_timeout_sec": 1.5}
    out = run_on_worker(spec, None, None, Factory())
    assert out["result"]["status"] == "infra" and out["result"]["infra_cause"] == "trial_timeout"
    assert Path(out["worker_dir"]).is_relative_to(tmp_path / "job" / INCOMING)  # shared: under the job folder


def test_rewrite_paths_keeps_json_valid(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"infra_log_path": "/w/x\"y/t/build.log"}))
    rewrite_paths(tmp_path, "/w/x\"y/t", "/job/t")
    assert json.loads((tmp_path / "result.json").read_text()) == {"infra_log_path": "/job/t/build.log"}


class _LosesFirst(Executor):
    """Loses each cell's first attempt as if its node died, then runs it locally."""

    kind = "test"

    def __init__(self) -> None:
        self.inner, self.calls = LocalExecutor(2), []

    def slot(self):
        return self.inner.slot()

    async def run(self, call: TrialCall) -> TrialResult:
        self.calls.append(call.trial_dir.name)
        if self.calls.count(call.trial_dir.name) == 1:
            call.trial_dir.mkdir(parents=True)
            res = TrialResult(trial_name=call.trial_dir.name, run_id="lost", task_name=call.task.name,
                              repetition=call.repetition, status="infra", infra_cause="node_lost")
            res.write(call.trial_dir)
            return res
        return await self.inner.run(call)

    def rerun_cause(self, result: TrialResult) -> bool:
        return result.infra_cause == "node_lost"


def test_run_job_reruns_a_lost_attempt_once_and_keeps_it(tmp_path):
    tasks = [make_task(tmp_path / "tasks", n) for n in ("a", "b")]
    config = JobConfig(job_id="j", tasks_dir=str(tmp_path / "tasks"), task_names=["a", "b"], agent=fake_agent(),
                       r=2, concurrency=2, settings={"mode": "solve"})
    ex = _LosesFirst()
    res = asyncio.run(run_job(config, tmp_path / "job", tasks=tasks, env_factory=Factory(), progress=False,
                              executor=ex))
    assert res.complete and res.metrics["pass_at_1"] == 1.0
    assert sorted(ex.calls) == sorted(["a__r1", "a__r2", "b__r1", "b__r2"] * 2)
    for cell in ("a__r1", "a__r2", "b__r1", "b__r2"):
        assert TrialResult.load(tmp_path / "job" / f"{cell}.attempt-1" / "result.json").infra_cause == "node_lost"
        assert TrialResult.load(tmp_path / "job" / cell / "result.json").status == "passed"
    assert not (tmp_path / "job" / INCOMING).exists()


def test_run_cell_gives_up_after_the_allowed_reruns(tmp_path):
    task = make_task(tmp_path / "tasks", "a")

    class AlwaysLost(_LosesFirst):
        async def run(self, call):
            call.trial_dir.mkdir(parents=True)
            self.calls.append(call.trial_dir.name)
            res = TrialResult(trial_name="a__r1", run_id=str(len(self.calls)), task_name="a", status="infra",
                              infra_cause="node_lost")
            res.write(call.trial_dir)
            return res

    ex = AlwaysLost()
    call = TrialCall(task=task, agent=fake_agent(), endpoint=None, trial_dir=tmp_path / "job" / "a__r1",
                     env_kind="local", job_id="j")
    res = asyncio.run(run_cell(ex, call, reruns=1))
    assert res.is_infra and len(ex.calls) == 2  # the ⊥ stays: the grid is incomplete, never silently dropped
    assert (tmp_path / "job" / "a__r1.attempt-1").is_dir()


def test_rise_eval_refuses_a_ray_address_without_the_ray_executor(tmp_path):
    from typer.testing import CliRunner

    from rise.cli import app

    res = CliRunner().invoke(app, ["eval", "--tasks", str(tmp_path), "--ray-address", "1.2.3.4:6379"])
    assert res.exit_code == 2 and "--ray-address needs --executor ray" in res.output
    res = CliRunner().invoke(app, ["eval", "--tasks", str(tmp_path), "--executor", "slurm"])
    assert res.exit_code == 2 and "--executor is local or ray" in res.output


def test_experiment_executor_reaches_every_grid_plan_of_the_controller(tmp_path):
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment, open_experiment
    from evolve.round.controller import Controller

    cfg = ExperimentConfig.model_validate({
        "name": "scale", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
        "tasks": {"dir": str(Path(__file__).resolve().parents[1] / "data" / "starter")},
        "executor": {"kind": "ray", "address": "head:6379", "replicas": ["http://127.0.0.1:10/v1"],
                     "trial_timeout_sec": 900}})
    init_experiment("scale", cfg, runs_dir=tmp_path / "runs")
    exp = open_experiment("scale", runs_dir=tmp_path / "runs")  # read back from the frozen experiment.toml
    plan = Controller(exp).plan("reference", exp.root / "harness", ["hello-file"], 1, tmp_path / "job")
    assert plan.executor == ExecutorConfig(kind="ray", address="head:6379", replicas=["http://127.0.0.1:10/v1"],
                                           trial_timeout_sec=900)
    with pytest.raises(ValueError, match=r"executor\.kind"):
        ExperimentConfig.model_validate({**cfg.model_dump(mode="json"), "executor": {"kind": "k8s"}})
