"""Resume helpers shared by a job and a full evaluation: which cells are finished, and the orphaned agent a
killed runner leaves behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trials.agents import AgentSpec
from trials.job import kill_orphan_agent, scan_cells
from trials.results import JobConfig, TrialResult


def _agent(trial_dir: Path, *, spec_in_argv: bool = True) -> subprocess.Popen:
    """A stand-in agent in its own session, with the pid file the runner writes."""
    (trial_dir / "agent").mkdir(parents=True)
    spec = str(trial_dir / "agent" / "trial_spec.json") if spec_in_argv else "unrelated"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--spec", spec],
                            start_new_session=True)
    (trial_dir / "agent" / "agent.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 10  # under load the exec may not have set the command line yet
    while time.monotonic() < deadline and spec not in psutil.Process(proc.pid).cmdline():
        time.sleep(0.02)
    return proc


def test_orphaned_agent_is_killed(tmp_path):
    proc = _agent(tmp_path / "t__r1")
    try:
        assert kill_orphan_agent(tmp_path / "t__r1")
        assert proc.wait(timeout=10) == -9
    finally:
        proc.kill()


def test_a_reused_pid_is_left_alone(tmp_path):
    proc = _agent(tmp_path / "t__r1", spec_in_argv=False)
    try:
        assert not kill_orphan_agent(tmp_path / "t__r1")
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("pid_text", [None, "not-a-pid", "999999999"])
def test_no_agent_to_kill(tmp_path, pid_text):
    if pid_text is not None:
        (tmp_path / "agent").mkdir()
        (tmp_path / "agent" / "agent.pid").write_text(pid_text)
    assert not kill_orphan_agent(tmp_path)


# ------------------------------------------------------------------ which cells are finished (both grids use it)
def _result(task: str, k: int, status: str) -> TrialResult:
    return TrialResult(trial_name=f"{task}__r{k}", run_id=f"{task}{k}", task_name=task, repetition=k,
                       status=status, infra_cause="sandbox" if status == "infra" else None)


def test_scan_cells_keeps_finished_and_reruns_infra_cut_off_and_new(tmp_path):
    config = JobConfig(job_id="j", tasks_dir=str(tmp_path), task_names=["a", "b", "c"], r=2,
                       agent=AgentSpec(kind="oracle", name="oracle", argv=[], harness_version="h"))
    for task, k, status in [("a", 1, "passed"), ("b", 1, "failed"), ("c", 1, "infra")]:
        (tmp_path / f"{task}__r{k}").mkdir()
        _result(task, k, status).write(tmp_path / f"{task}__r{k}")
    (tmp_path / "a__r2").mkdir()  # cut off: a folder without result.json
    (tmp_path / "b__r2").mkdir()
    (tmp_path / "b__r2" / "result.json").write_text("{not json")  # torn by a kill
    scan = scan_cells(config, tmp_path)  # c__r2 was never started
    assert sorted(scan.finished) == [("a", 1), ("b", 1)] and list(scan.infra) == [("c", 1)]
    assert scan.todo == [("c", 1), ("a", 2), ("b", 2), ("c", 2)]  # repetition-major, as cells() orders them
    assert scan.folders_to_move(tmp_path) == [tmp_path / "c__r1", tmp_path / "a__r2", tmp_path / "b__r2"]


def test_job_and_full_evaluation_share_the_rule():
    """Issue 15 item 14: one function decides which cells are finished; neither grid carries its own copy.
    Issue 31: both grids are one runner (``trials.grid.run_cells``), which reads the folder through that rule."""
    import inspect

    from trials import grid
    from validate import evaluate

    assert "scan_cells(config, job_dir)" in inspect.getsource(grid)
    for source in (inspect.getsource(grid.run_job), inspect.getsource(evaluate.run_grid)):
        assert "run_cells(" in source and "scan_cells(" not in source and "read_result(" not in source
    assert "read_result(" not in inspect.getsource(grid)
