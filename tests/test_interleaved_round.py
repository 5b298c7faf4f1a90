"""Comparisons a busy machine cannot fool (issue 38): arms run side by side, load on the record.

With real parts (the seed, local sandboxes with tmux, a scripted model over real HTTP):

- ``baseline = "interleaved"``: each evaluation cell runs in lockstep with the incumbent's same cell (both
  trials overlap in time), the decision compares with that arm and records both arms' load;
- a busy corpus: the model server spends fixed CPU time per reply, so its wall time grows with the machine's
  load, and a task passes only when the agent gets its turns before a short agent timeout. The reference corpus
  runs under a CPU hog, the round does not. Today's comparison (candidate vs corpus) favours a no-better
  candidate; the interleaved one does not, and the load check flags the corpus comparison as not comparable.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from evolve.round.controller import CandidateInput, Proposal, run_reference, run_round
from tests.test_controller_support import (
    DEV,
    GOOD,
    GOOD_PROPOSAL,
    MARK,
    SOLVE,
    STARTER,
    _reply,
    early_claimer,
    make_experiment,
    scripted_server,
    standin_checks,
)
from trials.job import load_job
from validate.adoption import decide
from validate.evaluate import grid_of_job
from validate.load_check import check_load

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


@pytest.fixture
def server():
    yield from scripted_server(early_claimer)


def _span(tdir: Path) -> tuple[dt.datetime, dt.datetime]:
    res = json.loads((tdir / "result.json").read_text())
    return dt.datetime.fromisoformat(res["started_at"]), dt.datetime.fromisoformat(res["finished_at"])


def test_interleaved_arms_run_side_by_side(tmp_path, server):
    exp = make_experiment(tmp_path / "runs", server.base_url, baseline="interleaved", heldout=[])
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))],
                       checks=standin_checks())
    assert report.adopted == "v1"
    led, v0 = exp.ledger, exp.commit_of("v0")
    (arm,) = [e for e in led.find("evaluation") if e.key == f"{v0}:control:r01:verify"]
    assert arm.complete and arm.metrics["paired_with"] == report.candidates[0].commit
    assert led.done(f"{v0}:reference")  # the corpus is still run: analysis reads it
    (adoption,) = led.find("adoption")
    assert adoption.decision["baseline"] == "interleaved" and adoption.decision["baseline_pass1"] == 0.5
    load = adoption.decision["load"]
    assert load["comparable"] and load["candidate"]["trials"] == load["incumbent"]["trials"] == 4
    from evolve.views.show import render_text, version_view

    shown = render_text(version_view(exp, "v1"), code=False)
    assert "v0 run beside verify (r01)" in shown and "load (candidate | incumbent): load/CPU" in shown
    assert "load: comparable" in shown and "pairs with the incumbent arm: agreement" in shown
    # lockstep: each cell of the candidate overlaps in time with the incumbent's same cell
    rdir = exp.root / "rounds" / "r01" / "verify"
    for t in DEV:
        for k in (1, 2):
            (c0, c1), (i0, i1) = _span(rdir / "evaluation" / f"{t}__r{k}"), _span(rdir / "incumbent" / f"{t}__r{k}")
            assert c0 < i1 and i0 < c1, (t, k)


def test_coupled_policy_decides_on_the_pairs_of_the_interleaved_arms(tmp_path, server):
    """``policy = "coupled"`` through a real round: the decision is the exact test on the discordant pairs of the
    candidate's evaluation and its own incumbent arm, cell (task, k) against cell (task, k)."""
    from trials.grid import cell_seed
    from validate.coupled import coupled_p_many, discordant

    exp = make_experiment(tmp_path / "runs", server.base_url, baseline="interleaved", heldout=[],
                          adoption={"policy": "coupled", "night_rounds": 1})
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))],
                       checks=standin_checks())
    (cand,) = report.candidates
    d = cand.decision
    rdir = exp.root / "rounds" / "r01" / "verify"
    evaluation, _ = grid_of_job(rdir / "evaluation")
    arm, _ = grid_of_job(rdir / "incumbent")
    n10, n01 = discordant(evaluation, arm, DEV, 2)
    assert d["policy"] == "coupled" and d["baseline"] == "interleaved"
    assert f"discordant pairs) {sum(n10)} vs {sum(n01)}" in d["reason"]
    assert d["p_value"] == coupled_p_many([n10], [n01])[0]
    # every interleaved decision records how often the pairs agreed (the coupling the coupled test's power needs)
    agree = d["agreement"]["all"]
    assert agree["pairs"] == len(DEV) * 2 and (agree["n10"], agree["n01"]) == (sum(n10), sum(n01))
    assert agree["agree"] == agree["pairs"] - sum(n10) - sum(n01)
    assert "cells independent" in d["false_adoption_basis"] and d["power"] is not None
    # coupled arms: every trial of cell (task, k) sampled with that cell's seed, in both arms alike
    seeds = {arm_name: {(c["task_name"], c["repetition"]): c["settings"]["model"]["seed"]
                        for c in (json.loads(f.read_text()) for f in (rdir / arm_name).glob("*__r*/config.json"))}
             for arm_name in ("evaluation", "incumbent")}
    assert seeds["evaluation"] == seeds["incumbent"] == {cell: cell_seed(*cell) for cell in seeds["evaluation"]}
    assert len(seeds["evaluation"]) == len(DEV) * 2 and len(set(seeds["evaluation"].values())) == len(DEV) * 2


# ----------------------------------------------------------------------------------------------- busy corpus
TURNS = 3  # replies before the one that does the work
CPU_PER_REPLY = 0.6  # seconds of this thread's CPU time per reply: wall time grows with the machine's load
# Unloaded, a trial of five looking-around turns took 20-26 s here with the box's load at 11-14 (six helpers);
# three turns take about two fifths less. Under the hog a reply takes ~15 s, so a trial needs ~60 s: the corpus
# runs out of its 30 s whatever the machine, and the round's trials finish well inside it.
AGENT_TIMEOUT = 30


HOG_CPU = 0  # the hog and the replies share this one CPU: another test worker keeps the rest of the machine


def _on_hog_cpu(pid: int = 0) -> None:
    """Pin ``pid`` (0: the calling thread, on Linux) to the hog's CPU, where the machine has more than one."""
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(pid, {HOG_CPU})


def slow_solver(body: dict) -> str:
    """Burns fixed CPU time on the hog's CPU, then: looks around for TURNS replies, then solves and claims
    completion."""
    _on_hog_cpu()
    end = time.thread_time() + CPU_PER_REPLY
    while time.thread_time() < end:
        pass
    msgs = body.get("messages", [])
    first = next((m.get("content") or "" for m in msgs if m.get("role") == "user"), "")
    task = next((t for t, mark in MARK.items() if mark in first), None)
    if task is None:
        return "Nothing to summarise."
    said = [m.get("content") or "" for m in msgs if m.get("role") == "assistant"]
    if any(f"SOLVE {task}" in s for s in said):
        return _reply("Done and checked.", None, True)
    if len(said) < TURNS:
        return _reply(f"Looking around ({len(said) + 1}).", "ls /app\n", False)
    return _reply(f"SOLVE {task}: doing the work.", SOLVE[task].rstrip("\n") + f"; cat {MARK[task]}\n", False)


@contextmanager
def cpu_hog(procs: int = 24):
    """Real load: ``procs`` busy processes for the duration (killed by their own ids afterwards), pinned to one
    CPU with the model's replies (:func:`slow_solver`). 24 on that CPU stretch a 0.6 s reply to ~15 s, so the
    corpus runs out of its 30 s on a quiet machine too, not only beside other work. (Until 2026-12-07 48 hogs
    spread over both cores starved the other test worker for the corpus's minute as well.)"""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(procs)]
    for p in hogs:
        _on_hog_cpu(p.pid)
    try:
        yield
    finally:
        for p in hogs:
            p.kill()
            p.wait()


def _short_tasks(dest: Path) -> Path:
    for t in DEV:
        shutil.copytree(STARTER / t, dest / t)
        toml = dest / t / "task.toml"
        toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 300", f"[agent]\ntimeout_sec = {AGENT_TIMEOUT}"))
        assert f"timeout_sec = {AGENT_TIMEOUT}" in toml.read_text()
    return dest


@pytest.fixture
def slow_server():
    yield from scripted_server(slow_solver)


def test_busy_corpus_favours_a_no_better_candidate_only_in_the_old_comparison(tmp_path, slow_server):
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment

    cfg = ExperimentConfig.model_validate({
        "name": "busy", "endpoint": {"base_url": slow_server.base_url, "model": "scripted", "timeout_sec": 60},
        "tasks": {"dir": str(_short_tasks(tmp_path / "tasks")), "development": DEV, "heldout": []},
        "r": 2, "env": "local", "concurrency": 2, "adoption": {"policy": "paper"}})  # the default: interleaved
    exp = init_experiment("busy", cfg, runs_dir=tmp_path / "runs")
    # The corpus runs on a busy machine: its trials run out of time. Two at a time: each runs to its 30 s
    # timeout however many share the hog (replies of 15-30 s, none past the endpoint's 60 s: the agent is cut off
    # first), so the hog, which starves the other test worker too, runs half as long.
    with cpu_hog():
        ref = run_reference(exp)
    # the round one trial (one lockstep pair) at a time, as before: its trials must finish inside their 30 s
    exp.config_path.write_text(exp.config.model_copy(update={"concurrency": 1}).to_toml())
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))],
                       checks=standin_checks())
    (cand,) = report.candidates
    corpus, _ = grid_of_job(ref)
    evaluation, _ = grid_of_job(exp.root / "rounds" / "r01" / "verify" / "evaluation")
    arm, _ = grid_of_job(exp.root / "rounds" / "r01" / "verify" / "incumbent")
    # today's comparison: the candidate (no better: the same model, one more verification turn) against the corpus
    old = decide(evaluation, corpus, DEV, 2, "paper")
    assert old.adopt and old.baseline_pass1 < old.candidate_pass1, (corpus, evaluation)
    # the load check sees it: the corpus ran under a clearly higher load
    _, corpus_trials, _ = load_job(ref)
    _, cand_trials, _ = load_job(exp.root / "rounds" / "r01" / "verify" / "evaluation")
    assert not check_load(cand_trials, corpus_trials).comparable
    # the interleaved comparison: the incumbent run beside it passes as often, nothing is adopted
    assert cand.status == "rejected" and report.adopted is None, (cand.reason, arm, evaluation)
    d = cand.decision  # both arms saw the same load: whatever it cost them, it cost both
    assert abs(d["candidate_pass1"] - d["baseline_pass1"]) < old.candidate_pass1 - old.baseline_pass1, d
    assert d["load"]["comparable"], d["load"]


# ------------------------------------------------------------------------------------ kill -9 inside the pair
def test_kill9_inside_the_paired_grid_then_resume_loses_nothing(tmp_path, server):
    """``rise round`` with interleaved arms, SIGKILLed after the incumbent arm's 2nd booked trial, resumed and
    SIGKILLed again after the candidate's next booked trial, then resumed: the round decides as an uninterrupted
    one (the first test's figures), no finished trial of either arm ran twice, and an attempt moved aside is only
    ever a cell that had not finished (the other arm's trial of the block the kill cut off)."""
    from evolve.experiment.store import open_experiment
    from tests.test_controller_support import REPO

    # The load check flags here rather than refuses: a kill leaves the block it cut off apart, so on a busy test
    # machine the arms' mean loads can differ by more than its gap (a CI run: 5.08 vs 4.46 per CPU, refused); what
    # this test proves is that nothing is lost or run twice, and the check's verdict is still recorded.
    exp = make_experiment(tmp_path / "runs", server.base_url, baseline="interleaved", heldout=[],
                          adoption={"load_check": "flag"})
    run_reference(exp)
    prop = tmp_path / "verify.json"
    prop.write_text(json.dumps(GOOD_PROPOSAL))
    cmd = [sys.executable, "-m", "rise.cli", "round", exp.root.name, "--runs-dir", str(exp.root.parent), "--resume",
           "--no-progress", "--candidate", f"verify={GOOD}", "--proposal", f"verify={prop}"]
    base_env = {k: v for k, v in os.environ.items() if k != "RISE_TEST_KILL_AT"}
    for stage in ("control:trial@2", "evaluation:trial@1"):
        res = subprocess.run(cmd, cwd=REPO, env={**base_env, "RISE_TEST_KILL_AT": stage}, capture_output=True,
                             text=True, timeout=900, check=False)
        assert res.returncode == -9, f"{stage}: rc {res.returncode}\n{res.stdout}\n{res.stderr}"
    final = subprocess.run(cmd, cwd=REPO, env=base_env, capture_output=True, text=True, timeout=900, check=False)
    assert final.returncode == 0, final.stdout + final.stderr

    led = open_experiment(str(exp.root)).ledger
    v0 = exp.commit_of("v0")
    (adoption,) = led.find("adoption")
    assert adoption.version == "v1" and adoption.decision["baseline"] == "interleaved"
    assert adoption.decision["baseline_pass1"] == 0.5 and adoption.decision["candidate_pass1"] == 1.0
    load = adoption.decision["load"]
    assert load["candidate"]["trials"] == load["incumbent"]["trials"] == 4 and load["action"] == "flag"
    (arm,) = [e for e in led.find("evaluation") if e.key == f"{v0}:control:r01:verify"]
    assert arm.complete and arm.metrics["paired_with"] == adoption.commit
    done = [e.key for e in led.find("trial_done")]
    assert len(done) == len(set(done)), "a finished trial was booked twice"
    rdir = exp.root / "rounds" / "r01" / "verify"
    for job in ("evaluation", "incumbent"):
        finals = sorted(p.name for p in (rdir / job).glob("*__r?") if (p / "result.json").is_file())
        assert finals == [f"{t}__r{k}" for t in sorted(DEV) for k in (1, 2)], (job, finals)
        for attempt in (rdir / job).glob("*.attempt-*"):  # cut off, never finished
            assert not (attempt / "result.json").is_file(), attempt
