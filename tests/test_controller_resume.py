"""kill -9 of `rise round` at every stage, then --resume: the same ledger as an uninterrupted run.

Both runs start from copies of one experiment whose v0 reference corpus is already there. The interrupted run is
killed (SIGKILL, via the RISE_TEST_KILL_AT hook) after candidate creation, during the checks (after smoke, after
contracts), during screening (after its trial is booked), during evaluation (after the 2nd trial, after the
Evaluation event, at the decision), once from outside while a trial is in flight (its agent orphaned), and
during publication (held-out trial, after the tag, after versions/v1, after the Adoption event); each time it is
resumed. At the end the ledgers match event for event (commits named by order of appearance, since candidate
commits carry timestamps), the same tree is tagged v1, no finished trial ran twice (only the trial that was cut
off has an earlier attempt folder) and the orphaned agent is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import git
import pytest

from evolve.experiment.store import open_experiment
from evolve.round.controller import run_reference
from tests.fakes.openai_server import ScriptedServer
from tests.test_controller_support import (
    GOOD,
    GOOD_PROPOSAL,
    HARMFUL,
    HARMFUL_PROPOSAL,
    REPO,
    early_claimer,
    ledger_shape,
    make_experiment,
    parts_missing,
)

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]
KILLS_BEFORE = ["created", "smoke", "contracts", "screening:trial", "evaluation:trial@2", "evaluation", "decision"]
KILLS_AFTER = ["heldout:trial", "publication:tag", "publication:versions", "publication"]


def _copy(base: Path, runs: Path) -> Path:
    """A copy of an experiment without its worktrees (their git links point into the original)."""
    dest = runs / base.name
    shutil.copytree(base, dest, symlinks=True, ignore=shutil.ignore_patterns("worktrees"))
    shutil.rmtree(dest / "harness" / ".git" / "worktrees", ignore_errors=True)
    return dest


def _cmd(runs: Path, tmp: Path) -> list[str]:
    props = {}
    tmp.mkdir(parents=True, exist_ok=True)
    for slug, prop in (("verify", GOOD_PROPOSAL), ("skip", HARMFUL_PROPOSAL)):
        props[slug] = tmp / f"{slug}.json"
        props[slug].write_text(json.dumps(prop))
    return [sys.executable, "-m", "rise.cli", "round", "exp", "--runs-dir", str(runs), "--resume",
            "--no-progress", "--candidate", f"verify={GOOD}", "--candidate", f"skip={HARMFUL}",
            "--proposal", f"verify={props['verify']}", "--proposal", f"skip={props['skip']}"]


def _run(cmd: list[str], kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RISE_TEST_KILL_AT"}
    if kill_at:
        env["RISE_TEST_KILL_AT"] = kill_at
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)


def _kill_mid_trial(cmd: list[str], job: Path, srv: ScriptedServer) -> Path:
    """Start the round and SIGKILL it while a trial of ``job`` is running; returns that trial's folder.

    Once ``job`` exists the scripted model answers after a delay, so a trial is certainly still running a
    second after its agent started: on a fast machine with warm launchers a whole trial took under a second, and
    the round ended with no trial caught (a CI failure)."""
    env = {k: v for k, v in os.environ.items() if k != "RISE_TEST_KILL_AT"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if job.exists():
                srv.delay = 3.0
            running = [p.parent.parent for p in job.glob("*__r*/agent/agent.pid")
                       if not (p.parent.parent / "result.json").exists() and ".attempt-" not in str(p)]
            if running:
                time.sleep(1.0)  # well inside the agent's run
                if not (running[0] / "result.json").exists():
                    proc.kill()
                    proc.wait()
                    return running[0]
            time.sleep(0.1)
    finally:
        srv.delay = 0.0
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    raise AssertionError(f"no trial of {job} was caught running (rc {proc.returncode})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_kill9_at_every_stage_then_resume_matches_an_uninterrupted_run(tmp_path):
    if (why := parts_missing()):
        pytest.skip(why)
    with ScriptedServer(early_claimer, model="scripted") as srv:
        base = make_experiment(tmp_path / "base", srv.base_url)
        run_reference(base)
        a, b = _copy(base.root, tmp_path / "a"), _copy(base.root, tmp_path / "b")

        # the uninterrupted run goes on beside the interrupted one (its own copy; the scripted model is stateless
        # and the runs are one trial at a time each, so neither's ledger depends on the other's timing)
        env = {k: v for k, v in os.environ.items() if k != "RISE_TEST_KILL_AT"}
        a_log = (tmp_path / "uninterrupted.log").open("w")
        uninterrupted = subprocess.Popen(_cmd(a.parent, tmp_path / "props-a"), cwd=REPO, env=env, stdout=a_log,
                                         stderr=subprocess.STDOUT)

        try:
            cmd = _cmd(b.parent, tmp_path / "props-b")
            for stage in KILLS_BEFORE:
                res = _run(cmd, stage)
                assert res.returncode == -9, f"{stage}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
            cut = _kill_mid_trial(cmd, b / "rounds" / "r01" / "skip" / "evaluation", srv)
            orphan = int((cut / "agent" / "agent.pid").read_text())
            for stage in KILLS_AFTER:
                res = _run(cmd, stage)
                assert res.returncode == -9, f"{stage}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
            final = _run(cmd)
            assert final.returncode == 0, final.stdout + final.stderr
            uninterrupted.wait(timeout=900)
            a_log.close()
            assert uninterrupted.returncode == 0, (tmp_path / "uninterrupted.log").read_text()[-5000:]
        finally:
            if uninterrupted.poll() is None:  # a failure above: leave nothing running
                uninterrupted.kill()
                uninterrupted.wait()
            a_log.close()

    assert ledger_shape(b) == ledger_shape(a)
    ea, eb = open_experiment(str(a)), open_experiment(str(b))
    assert ea.versions() == eb.versions() == ["v0", "v1"]
    assert git.Repo(b / "harness").commit("v1").tree.hexsha == git.Repo(a / "harness").commit("v1").tree.hexsha
    (adoption,) = eb.ledger.find("adoption")
    (rejection,) = eb.ledger.find("rejection")
    assert "hello-file" in rejection.reason and adoption.version == "v1"
    # nothing finished ran twice: the only earlier attempt is the trial that was cut off
    attempts = sorted(p.relative_to(b) for p in b.rglob("*.attempt-*") if p.is_dir())
    assert attempts == [Path(f"{cut.relative_to(b)}.attempt-1")]
    assert not _alive(orphan), "the agent orphaned by the kill is still running"
    trial_done = [e.key for e in eb.ledger.find("trial_done")]
    assert len(trial_done) == len(set(trial_done))
    assert (b / "versions" / "v1" / "version.json").is_file()
