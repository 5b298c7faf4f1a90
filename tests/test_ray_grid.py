"""The ray executor on a real local Ray cluster started here: a head (no trial slots) and two worker nodes
with distinct resources, every one a ``ray start`` process tree. Trials run in the real local sandbox.

1. An oracle grid on both workers gives the same trial set and metrics as the local executor.
2. ``kill -9`` of every process of one worker node while its trials are inside their agent phase: those
   attempts become ⊥ ``node_lost`` (kept as ``<trial>.attempt-1``), run again on the other node, and the grid
   completes with exactly one result per cell. The gated task makes "while inside" an event, not a timing:
   its solution waits for a file ``/app/go`` that the test writes only for the surviving node.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trials.agents import oracle_agent
from trials.environments.local import bwrap_available
from trials.executors.config import ExecutorConfig
from trials.executors.local_cluster import LocalRayCluster
from trials.grid import run_job
from trials.results import JobConfig, TrialResult

pytestmark = [pytest.mark.ray, pytest.mark.sandbox,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                 reason="Ray is not installed (pip install -e '.[dev]')"),
              pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) and nsenter are not installed"),
              pytest.mark.skipif(shutil.which("ray") is None, reason="the ray command is not on PATH")]

REPO = Path(__file__).resolve().parent.parent
STARTER = REPO / "data" / "starter"
NODES = {"a": {"rise_trial": 2, "node_a": 1}, "b": {"rise_trial": 2, "node_b": 1}}
GATED_SOLVE = """#!/bin/bash
# waits (at most 120 s) for the test to open the gate, then solves hello-file
for _ in $(seq 1 600); do [ -e /app/go ] && break; sleep 0.2; done
printf 'Hello, world!\\n' > /app/hello.txt
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalRayCluster(tmp_path_factory.mktemp("ray"), NODES)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _task_set(root: Path) -> Path:
    """Two starter tasks, and a copy of hello-file whose oracle writes the wrong text (a failing cell)."""
    for name in ("hello-file", "count-lines"):
        shutil.copytree(STARTER / name, root / name)
    bad = root / "wrong-hello"
    shutil.copytree(STARTER / "hello-file", bad)
    (bad / "task.toml").write_text((bad / "task.toml").read_text().replace('"hello-file"', '"wrong-hello"'))
    (bad / "solution" / "solve.sh").write_text("#!/bin/bash\nprintf 'bye\\n' > /app/hello.txt\n")
    return root


def _config(tasks: Path, job_id: str, r: int = 2, concurrency: int = 2) -> JobConfig:
    names = sorted(p.name for p in tasks.iterdir() if p.is_dir())
    return JobConfig(job_id=job_id, tasks_dir=str(tasks), task_names=names, agent=oracle_agent(), env_kind="local",
                     r=r, concurrency=concurrency)


def _node_names() -> dict[str, str]:
    """Ray node id → our node name, from the distinct resource each worker offers."""
    import ray

    out = {}
    for node in ray.nodes():
        for name in NODES:
            if f"node_{name}" in (node.get("Resources") or {}):
                out[node["NodeID"]] = name
    return out


def _ran_on(trial_dir: Path, names: dict[str, str]) -> str:
    return names.get(json.loads((trial_dir / "executor.json").read_text())["node_id"], "?")


def test_oracle_grid_on_two_workers_matches_the_local_executor(cluster, tmp_path):
    tasks = _task_set(tmp_path / "tasks")
    local = asyncio.run(run_job(_config(tasks, "local-job"), tmp_path / "local", progress=False))
    remote = asyncio.run(run_job(_config(tasks, "ray-job"), tmp_path / "ray", progress=False,
                                 executor=ExecutorConfig(kind="ray", address=cluster.address)))
    assert local.complete and remote.complete
    keys = ("pass_at_1", "pass_hat_r", "pass_at_r", "flip", "counts")
    assert {k: remote.metrics[k] for k in keys} == {k: local.metrics[k] for k in keys}
    assert remote.metrics["pass_at_1"] == pytest.approx(4 / 6)  # wrong-hello fails on both executors
    assert [(t.trial_name, t.status) for t in remote.trials] == [(t.trial_name, t.status) for t in local.trials]
    names = _node_names()
    where = {t.trial_name: _ran_on(tmp_path / "ray" / t.trial_name, names) for t in remote.trials}
    assert set(where.values()) == {"a", "b"}, where  # both workers took trials; the head (no slots) none
    assert not list((tmp_path / "ray").glob("*.attempt-*")) and not (tmp_path / "ray" / ".incoming").exists()
    for t in remote.trials:  # the delivered folders are whole trial folders, paths rewritten to the driver's
        res = TrialResult.load(tmp_path / "ray" / t.trial_name / "result.json")
        assert res.trial_name == t.trial_name and (tmp_path / "ray" / t.trial_name / "verifier").is_dir()


def test_rise_eval_executor_ray_flag(cluster, tmp_path):
    from typer.testing import CliRunner

    from rise.cli import app

    out = tmp_path / "eval.json"
    res = CliRunner().invoke(app, ["eval", "--tasks", str(STARTER), "--task", "hello-file", "--agent", "oracle",
                                   "-r", "2", "--executor", "ray", "--ray-address", cluster.address,
                                   "--job-dir", str(tmp_path / "job"), "--json", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["complete"] and [t["status"] for t in data["trials"]] == ["passed", "passed"]
    names = _node_names()
    assert {_ran_on(tmp_path / "job" / t["trial_name"], names) for t in data["trials"]} <= {"a", "b"}


def test_round_grid_runs_on_the_executor_of_its_plan(cluster, tmp_path):
    """validate.evaluate.run_grid (every grid of a round) takes the executor from GridPlan.executor, which the
    controller fills from experiment.toml's [executor]; every finished trial is booked once. Shared delivery:
    the workers write under the job folder itself (this machine's filesystem is shared by every node)."""
    from validate.evaluate import GridPlan, MemoryBook, run_grid

    plan = GridPlan(purpose="evaluation", agent=oracle_agent(), tasks_dir=STARTER, task_names=["hello-file"], r=2,
                    job_dir=tmp_path / "grid", endpoint=None,
                    executor=ExecutorConfig(kind="ray", address=cluster.address, delivery="shared"))
    book = MemoryBook()
    outcome = asyncio.run(run_grid(plan, book))
    assert outcome.complete and sorted(book.booked) == [("hello-file", 1, "passed"), ("hello-file", 2, "passed")]
    names = _node_names()
    assert {_ran_on(d, names) for d in outcome.trial_dirs()} <= {"a", "b"}
    assert sorted(p.name for p in (tmp_path / "grid").iterdir() if p.is_dir()) == ["hello-file__r1", "hello-file__r2"]


def _gated_tasks(root: Path, n: int) -> Path:
    """``n`` copies of hello-file whose solution waits at the gate ``/app/go``."""
    for i in range(n):
        dest = root / f"gated-{i}"
        shutil.copytree(STARTER / "hello-file", dest)
        (dest / "task.toml").write_text((dest / "task.toml").read_text().replace('"hello-file"', f'"gated-{i}"'))
        (dest / "solution" / "solve.sh").write_text(GATED_SOLVE)
    return root


def _waiting(cluster: LocalRayCluster, job_id: str, nodes=tuple(NODES)) -> list[Path]:
    """Worker folders (``<scratch>/<job id>/<attempt>/<trial>``) of ``job_id``'s trials inside their agent phase
    on ``nodes``; a killed driver's attempts stay there too, beside the new ones of the same trial."""
    return sorted(pid.parent.parent for node in nodes
                  for pid in cluster.scratch(node).glob(f"{job_id}/*/*/agent/agent.pid"))


def _open_gate(work: Path) -> None:
    """Let the gated solution of the trial in worker folder ``work`` go on."""
    try:
        (work / "sandbox" / "root" / "app" / "go").touch()
    except FileNotFoundError:  # that trial has just ended (or was a killed attempt's), its folder is gone
        pass


def _until(check, what: str, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def test_a_trial_past_its_wall_clock_limit_on_a_worker_is_infra_and_not_rerun(cluster, tmp_path):
    tasks = _gated_tasks(tmp_path / "tasks", 1)  # its gate never opens: the solution waits (up to 120 s)
    res = asyncio.run(run_job(_config(tasks, "limit-job", r=1), tmp_path / "job", progress=False,
                              executor=ExecutorConfig(kind="ray", address=cluster.address, trial_timeout_sec=4)))
    trial = TrialResult.load(tmp_path / "job" / "gated-0__r1" / "result.json")
    assert trial.status == "infra" and trial.infra_cause == "trial_timeout" and "4 s" in trial.infra_message
    assert not res.complete and not list((tmp_path / "job").glob("*.attempt-*"))  # a limit is not a lost node


def test_a_driver_killed_mid_grid_resumes_without_running_a_delivered_trial_again(cluster, tmp_path):
    """kill -9 of the driver (rise eval) while one cell is delivered and others run on the workers: the job
    folder holds exactly the delivered cell; --resume runs only the others."""
    from rise.commands.eval import job_id_for

    tasks, job = _gated_tasks(tmp_path / "tasks", 3), tmp_path / "job"
    job_id = job_id_for(job)
    driver = subprocess.Popen([sys.executable, "-m", "rise.cli", "eval", "--tasks", str(tasks), "--agent", "oracle",
                               "-r", "1", "--executor", "ray", "--ray-address", cluster.address, "--job-dir", str(job),
                               "--no-progress"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        work = _until(lambda: _waiting(cluster, job_id), "a trial in its agent phase")[0]
        first = work.name
        _open_gate(work)
        _until(lambda: (job / first / "result.json").is_file(), f"{first} delivered")
        _until(lambda: {w.name for w in _waiting(cluster, job_id)} - {first}, "a second trial in its agent phase")
    finally:
        driver.kill()
        driver.wait(30)
    kept = TrialResult.load(job / first / "result.json")
    assert kept.status == "passed"
    assert sorted(p.name for p in job.iterdir() if p.is_dir() and not p.name.startswith(".")) == [first]

    stop = threading.Event()

    def open_all() -> None:
        while not stop.is_set():
            for work in _waiting(cluster, job_id):
                _open_gate(work)
            time.sleep(0.1)

    opener = threading.Thread(target=open_all, daemon=True)
    opener.start()
    try:
        res = asyncio.run(run_job(JobConfig.load(job / "config.json"), job, resume=True, progress=False,
                                  executor=ExecutorConfig(kind="ray", address=cluster.address)))
    finally:
        stop.set()
        opener.join(10)
    assert res.complete and res.metrics["pass_at_1"] == 1.0 and res.trials_run == 2
    assert TrialResult.load(job / first / "result.json").run_id == kept.run_id  # never run twice
    assert not list(job.glob("*.attempt-*"))  # nothing of the killed driver's was in the folder to move aside


class Gatekeeper(threading.Thread):
    """Opens the gate of every trial running on the surviving node; kills node ``victim`` once one of its
    trials is inside its agent phase (its agent.pid exists, so solve.sh is waiting at the gate)."""

    def __init__(self, cluster: LocalRayCluster, job_id: str, victim: str, survivor: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.job_id, self.victim, self.survivor = cluster, job_id, victim, survivor
        self.stop, self.killed, self.caught, self.error = threading.Event(), [], [], None

    def run(self) -> None:
        deadline = time.monotonic() + 240
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                try:
                    for work in self.cluster.scratch(self.survivor).glob(f"{self.job_id}/*/*"):
                        _open_gate(work)
                    if not self.killed:
                        inside = [w.name for w in _waiting(self.cluster, self.job_id, (self.victim,))]
                        if inside:
                            self.caught = inside
                            self.killed = self.cluster.kill_node(self.victim)
                except FileNotFoundError:  # a trial's folder went while it was listed (CI of 2026-12-06): again
                    pass
                time.sleep(0.1)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_kill_9_of_a_worker_node_mid_grid_reruns_its_trials_on_the_other(cluster, tmp_path):
    tasks = _gated_tasks(tmp_path / "tasks", 3)
    keeper = Gatekeeper(cluster, "kill-job", victim="a", survivor="b")
    keeper.start()
    try:
        res = asyncio.run(run_job(_config(tasks, "kill-job"), tmp_path / "job", progress=False,
                                  executor=ExecutorConfig(kind="ray", address=cluster.address)))
    finally:
        keeper.stop.set()
        keeper.join(10)
    assert keeper.error is None and keeper.killed, "node a never ran a trial, or could not be killed"
    job = tmp_path / "job"
    cells = sorted(t.trial_name for t in res.trials)
    assert res.complete and res.metrics["pass_at_1"] == 1.0 and len(cells) == 6
    lost = sorted(job.glob("*.attempt-*"))
    assert lost, "no attempt was lost with node a"
    assert set(keeper.caught) <= {p.name.split(".")[0] for p in lost}  # every trial caught inside was lost
    names = _node_names()  # node a is dead now, but its row (and resources) stay in ray.nodes()
    for attempt in lost:
        first = TrialResult.load(attempt / "result.json")
        assert first.status == "infra" and first.infra_cause == "node_lost"
        final_dir = job / attempt.name.split(".")[0]
        final = TrialResult.load(final_dir / "result.json")
        assert final.status == "passed" and final.run_id != first.run_id
        assert _ran_on(final_dir, names) == "b"  # rerun elsewhere
    # exactly one result per cell in the job folder; nothing half-delivered, nothing counted twice
    assert sorted(p.name for p in job.iterdir() if p.is_dir() and "." not in p.name) == cells
    assert len({TrialResult.load(job / c / "result.json").run_id for c in cells}) == 6
    assert res.metrics["counts"]["cells_passed"] == 6 and res.trials_run == 6
    assert not (job / ".incoming").exists()
