"""A night that outlives its stops: the summary ``rise evolve`` prints before it resumes (round, stage, the grid in
progress with trials done and left, time spent, time left at the measured rate), a frozen config that differs from
the file it came from, an unreadable experiment, and ``scripts/run.sh`` honouring ``RISE_RUNS_DIR`` (a stub
checkout: the real main job takes hours)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from evolve.experiment.ledger import Ledger, RoundStart, TrialDone
from evolve.views.resume import config_differences, render_summary, resume_summary
from rise.cli import app
from tests.test_controller_support import DEV, make_experiment
from trials.agents import AgentSpec
from trials.job import trial_name
from trials.results import JobConfig, TrialResult

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 12, 5, 20, 0, tzinfo=UTC)


def _at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def _grid(job: Path, r: int, finished: list[tuple[str, int, str, float]], concurrency: int = 2) -> None:
    """A job folder as the runner leaves it: config.json and a result.json per finished (task, k, status,
    minutes) cell."""
    job.mkdir(parents=True)
    agent = AgentSpec(kind="process", name="seed", argv=["x"], harness_version="h")
    JobConfig(job_id="j", tasks_dir="/tasks", task_names=DEV, agent=agent, r=r,
              concurrency=concurrency).write(job / "config.json")
    for task, k, status, minutes in finished:
        (job / trial_name(task, k)).mkdir()
        TrialResult(trial_name=trial_name(task, k), run_id=f"{task}{k}", task_name=task, repetition=k,
                    status=status, started_at=_at(0), finished_at=_at(minutes)).write(job / trial_name(task, k))


def test_the_summary_of_a_night_cut_off_in_its_evaluation(tmp_path: Path) -> None:
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1", r=3)
    commit = exp.commit_of("v0")
    led = Ledger(exp.root / "ledger.jsonl")
    # the reference corpus (2 tasks x 3, 4 min a trial), the round's start, then 2 of 6 evaluation trials and one ⊥
    _grid(exp.root / "versions" / "v0" / "reference", 3, [(t, k, "passed", 4.0) for t in DEV for k in (1, 2, 3)])
    for i, (t, k) in enumerate((t, k) for t in DEV for k in (1, 2, 3)):
        led.append(TrialDone(key=f"{commit}:reference:{t}:{k}", ts=_at(4 * i), commit=commit, purpose="reference",
                             task=t, rep=k, status="passed", trial_dir="x"))
    led.append(RoundStart(key="r01:start", ts=_at(30), round=1, incumbent="v0"))
    _grid(exp.root / "rounds" / "r01" / "verify" / "evaluation", 3,
          [("hello-file", 1, "passed", 10.0), ("write-json", 1, "failed", 10.0), ("hello-file", 2, "infra", 1.0)])
    for t in ("hello-file", "write-json"):
        led.append(TrialDone(key=f"c:evaluation:{t}:1", ts=_at(60), commit="c", purpose="evaluation", task=t,
                             rep=1, status="passed", trial_dir="x"))
    s = resume_summary(exp)
    assert (s.round, s.round_state, s.stage) == (1, "in progress", "evaluation")
    assert s.grid is not None and s.grid.job_dir == "rounds/r01/verify/evaluation"
    assert (s.grid.total, s.grid.done, s.grid.left, s.grid.infra) == (6, 2, 4, 1)
    assert s.trials == 8 and abs(s.mean_trial_s - (6 * 4 + 2 * 10) * 60 / 8) < 1e-6
    # the grid's own rate (10 min: candidates run at their own speed), 4 left, 2 at a time
    assert s.left_s == 4 * 600 / 2
    text = "\n".join(render_summary(s, resuming=True))
    assert "resuming the night in progress: round 1 in progress, stage: evaluation" in text
    assert "2 of 6 trials done, 4 left (1 ⊥, to run again)" in text
    assert "time spent: 1.0 h from the first event" in text and "8 trials booked" in text
    assert "time left in this grid: about 20 min (4 trials x 10.0 min ÷ 2 at a time)" in text


def test_the_reference_corpus_comes_before_the_round_starts(tmp_path: Path) -> None:
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    s = resume_summary(exp)
    assert s.events == 0 and render_summary(s) == [f"{exp.root}: nothing recorded yet"]
    _grid(exp.root / "versions" / "v0" / "reference", 2, [("hello-file", 1, "passed", 3.0)])
    led = Ledger(exp.root / "ledger.jsonl")
    led.append(TrialDone(key="c:reference:hello-file:1", commit="c", purpose="reference", task="hello-file", rep=1,
                         status="passed", trial_dir="x"))
    s = resume_summary(exp)
    assert (s.round, s.round_state, s.stage) == (1, "starting", "reference")
    assert s.grid is not None and (s.grid.done, s.grid.left) == (1, 3) and s.left_s == 3 * 180 / 2


def test_a_frozen_config_that_differs_is_named_field_by_field(tmp_path: Path) -> None:
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1", r=2)
    same = tmp_path / "same.toml"
    same.write_text(exp.config_path.read_text())
    assert config_differences(exp, same) == []
    other = tmp_path / "other.toml"
    other.write_text(re.sub(r"(?m)^r = 2$", "r = 34", exp.config_path.read_text()))
    assert config_differences(exp, other) == [f"r: 2 frozen, 34 in {other}"]
    # said before anything runs (--rounds 0 is refused right after: nothing runs here)
    res = CliRunner().invoke(app, ["evolve", "exp", "--runs-dir", str(tmp_path / "runs"), "--config", str(other),
                                   "--rounds", "0"])
    assert "differs from" in res.stderr and "r: 2 frozen, 34 in" in res.stderr, res.output
    assert "nothing recorded yet: a new night starts" in res.stdout and "tasks folder" not in res.stderr
    # made in a checkout that is gone: its tasks folder is named
    exp.config_path.write_text(exp.config_path.read_text().replace(exp.config.tasks.dir, str(tmp_path / "gone")))
    res = CliRunner().invoke(app, ["evolve", "exp", "--runs-dir", str(tmp_path / "runs"), "--rounds", "0"])
    assert f"the tasks folder {tmp_path / 'gone'} of" in res.stderr and "does not exist" in res.stderr


def test_an_unreadable_experiment_is_named_and_left_alone(tmp_path: Path) -> None:
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    ledger = exp.root / "ledger.jsonl"
    ledger.write_text('{"kind": "round_start"}\nnot json\n{"kind": "x"}\n')
    before = ledger.read_bytes()
    res = CliRunner().invoke(app, ["evolve", "exp", "--resume"], env={"RISE_RUNS_DIR": str(tmp_path / "runs")})
    assert res.exit_code == 1
    assert "the experiment exists but cannot be read (nothing was changed)" in res.stderr
    assert "ledger.jsonl" in res.stderr and ledger.read_bytes() == before


def _stub_checkout(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """scripts/run.sh in a copy of the checkout's scripts/ with a set-up that does nothing and a ``rise`` on PATH
    that logs its arguments: what the main job would run, without running it."""
    co = tmp_path / "checkout"
    (co / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "run.sh", co / "scripts" / "run.sh")
    shutil.copy(REPO / "scripts" / "demo-experiment.toml", co / "scripts" / "demo-experiment.toml")
    (co / "scripts" / "setup.sh").write_text("exit 0\n")
    bin_dir, log = tmp_path / "bin", tmp_path / "rise.log"
    bin_dir.mkdir()
    (bin_dir / "rise").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "rise").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return co, log, env


def test_run_sh_keeps_the_experiment_where_rise_runs_dir_says(tmp_path: Path) -> None:
    co, log, env = _stub_checkout(tmp_path)
    runs = tmp_path / "elsewhere"
    out = subprocess.run(["bash", str(co / "scripts" / "run.sh"), "--max-hours", "2"], env={
        **env, "RISE_RUNS_DIR": str(runs)}, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    calls = [line.split() for line in log.read_text().splitlines() if not line.startswith("serve ")]
    assert calls[0][:2] == ["init", "demo"] and calls[0][calls[0].index("--runs-dir") + 1] == str(runs)
    evolve = calls[1]
    assert evolve[:2] == ["evolve", "demo"] and evolve[evolve.index("--runs-dir") + 1] == str(runs)
    assert evolve[evolve.index("--config") + 1] == "scripts/demo-experiment.toml" and evolve[-2:] == ["--max-hours",
                                                                                                     "2"]
    assert f"no experiment at {runs}/demo: a new one is made" in out.stderr
    # an experiment already there (its frozen config) is resumed, not made again; without the variable: runs/
    (runs / "demo").mkdir(parents=True)
    (runs / "demo" / "experiment.toml").write_text("")
    log.unlink()
    subprocess.run(["bash", str(co / "scripts" / "run.sh")], env={**env, "RISE_RUNS_DIR": str(runs)}, check=True,
                   capture_output=True, timeout=120)
    assert [c.split()[0] for c in log.read_text().splitlines() if not c.startswith("serve ")] == ["evolve"]
    log.unlink()
    subprocess.run(["bash", str(co / "scripts" / "run.sh")], env=env, check=True, capture_output=True, timeout=120)
    init = next(c.split() for c in log.read_text().splitlines() if c.startswith("init "))
    assert init[init.index("--runs-dir") + 1] == str(co / "runs")


def test_run_sh_status_prints_the_summary_of_the_experiment_elsewhere(tmp_path: Path) -> None:
    """``bash scripts/run.sh --status``: the real CLI, no set-up, no model server."""
    runs = tmp_path / "elsewhere"
    exp = make_experiment(runs, "http://127.0.0.1:9/v1", name="demo")
    _grid(exp.root / "versions" / "v0" / "reference", 2, [("hello-file", 1, "passed", 3.0)])
    Ledger(exp.root / "ledger.jsonl").append(TrialDone(key="c:reference:hello-file:1", commit="c",
                                                       purpose="reference", task="hello-file", rep=1,
                                                       status="passed", trial_dir="x"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rise").write_text(f'#!/bin/sh\nexec {sys.executable} -m rise "$@"\n')  # this checkout's CLI
    (bin_dir / "rise").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RISE_RUNS_DIR": str(runs)}
    out = subprocess.run(["bash", str(REPO / "scripts" / "run.sh"), "--status"], env=env, capture_output=True, check=False,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "the night so far: round 1 starting, stage: reference" in out.stdout and "1 of 4 trials done, 3 left" in out.stdout


def test_a_night_still_running_is_named_with_its_pid(tmp_path: Path) -> None:
    from evolve.experiment.lock import experiment_lock

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    Ledger(exp.root / "ledger.jsonl").append(RoundStart(key="r01:start", round=1, incumbent="v0"))
    assert resume_summary(exp).running is None
    with experiment_lock(exp.root):
        s = resume_summary(exp)
    assert s.running == os.getpid()
    assert f"held right now by pid {os.getpid()}" in "\n".join(render_summary(s))


def test_a_moved_aside_attempt_is_no_grid(tmp_path: Path) -> None:
    """A trial a kill cut off is moved to ``<trial>.attempt-N`` with its trial config.json; the summary (and
    rise status, rise record) must not read that as a grid's config (it raised FormatError on the real night)."""
    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    ref = exp.root / "versions" / "v0" / "reference"
    _grid(ref, 2, [("hello-file", 1, "passed", 3.0)])
    cut = ref / f"{trial_name('hello-file', 2)}.attempt-1"
    cut.mkdir()
    (cut / "config.json").write_text(json.dumps({"trial_name": trial_name("hello-file", 2), "repetition": 2}))
    led = Ledger(exp.root / "ledger.jsonl")
    led.append(TrialDone(key="c:reference:hello-file:1", commit="c", purpose="reference", task="hello-file", rep=1,
                         status="passed", trial_dir="x"))
    s = resume_summary(exp)
    assert s.grid is not None and (s.grid.done, s.grid.left) == (1, 3)


def test_run_sh_restore_unpacks_a_snapshot_first_and_never_over_an_experiment(tmp_path: Path) -> None:
    co, log, env = _stub_checkout(tmp_path)
    runs = tmp_path / "elsewhere"
    snap = co / "docs" / "nights" / "d" / "snapshot.tar.xz"
    snap.parent.mkdir(parents=True)
    snap.write_bytes(b"x")
    env = {**env, "RISE_RUNS_DIR": str(runs)}
    # no experiment: a new one is made, and the snapshot it could have resumed is named, never restored unasked
    out = subprocess.run(["bash", str(co / "scripts" / "run.sh")], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert "docs/nights/d/snapshot.tar.xz" in out.stderr and "--restore" in out.stderr
    assert not any(c.startswith("restore ") for c in log.read_text().splitlines())
    log.unlink()
    out = subprocess.run(["bash", str(co / "scripts" / "run.sh"), "--restore", str(snap), "--max-hours", "1"],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    calls = [c.split() for c in log.read_text().splitlines() if not c.startswith("serve ")]
    assert calls[0] == ["restore", str(snap), "--runs-dir", str(runs)]
    assert calls[-1][:2] == ["evolve", "demo"] and calls[-1][-2:] == ["--max-hours", "1"]
    # an experiment there: refused before any set-up or call; a missing file: refused
    (runs / "demo").mkdir(parents=True)
    log.unlink()
    out = subprocess.run(["bash", str(co / "scripts" / "run.sh"), "--restore", str(snap)], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "never replaces an experiment" in out.stderr and not log.exists()
    out = subprocess.run(["bash", str(co / "scripts" / "run.sh"), "--restore", str(tmp_path / "no.tar.xz")], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "no file" in out.stderr and not log.exists()
