"""A scripted-model round with ``[adoption] control = "midharness"``: real sandbox, tmux, git, HTTP and the seed's
own Mid-Harness (sampling, merging, one-token verifier prompts); stand-in smoke and contract checks.

The incumbent (v0) passes hello-file only; the verify-completion candidate passes everything, but in more steps,
so it spends about 1.8 times the incumbent's tokens per trial: the matched arm needs N > 1 and a verifier. The
arm (the incumbent sampling N actions per step, a verifier choosing) also passes everything, because one of its
samples does the work and the scripted verifier prefers it: the candidate beats the incumbent but not the arm.
Every figure checked here is recomputed from the trials' ``result.json`` files, not read back from the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.experiment.audit import audit
from evolve.round.controller import CandidateInput, Proposal, run_round
from evolve.views.report import write_report
from evolve.views.show import render_text, version_view
from tests.control_arm_support import sampling_claimer
from tests.test_controller_support import (
    GOOD,
    GOOD_PROPOSAL,
    make_experiment,
    scripted_server,
    standin_checks,
)
from trials.job import load_job
from validate.control_arm import trial_tokens

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


@pytest.fixture
def server():
    yield from scripted_server(sampling_claimer)


def _round(exp):
    return run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))],
                     checks=standin_checks())


def _mean_tokens(job: Path) -> float:
    _, results, _ = load_job(job)
    assert results and not any(r.is_infra for r in results)
    return sum(trial_tokens(r) for r in results) / len(results)


def test_arm_matched_and_both_comparisons_reported(tmp_path, server):
    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[], adoption={"control": "midharness"})
    report = _round(exp)
    (cand,) = report.candidates
    assert report.adopted == "v1" and cand.status == "adopted"  # the arm is reported only (the default)
    (adoption,) = exp.ledger.find("adoption")
    d = adoption.decision
    # comparison 1, as today: the candidate against the incumbent's reference runs
    assert d["adopt"] and d["candidate_pass1"] == 1.0 and d["baseline_pass1"] == 0.5
    arm = d["control_arm"]

    # the matching, recomputed from the grids on disk
    target = _mean_tokens(exp.root / "rounds" / "r01" / "verify" / "evaluation")
    incumbent = _mean_tokens(exp.root / "versions" / "v0" / "reference")
    measured = _mean_tokens(exp.root / arm["grid"])
    assert target > 1.5 * incumbent  # the candidate pays for its extra steps: N = 1 cannot match it
    assert arm["target_tokens_per_trial"] == pytest.approx(target, abs=0.1)
    assert arm["measured_tokens_per_trial"] == pytest.approx(measured, abs=0.1)
    assert 0.9 <= measured / target <= 1.1 and arm["matched"] is True
    assert arm["ratio"] == pytest.approx(measured / target, abs=1e-4)
    assert arm["n"] > 1 and arm["verifier"] in ("listwise", "pointwise", "pairwise", "tournament")
    # every attempt is recorded with its measured ratio; the last one is the match (a miss is said, then adjusted)
    for a in arm["attempts"]:
        assert a["ratio"] == pytest.approx(_mean_tokens(exp.root / a["grid"]) / target, abs=1e-4)
    assert arm["attempts"][-1]["grid"] == arm["grid"]
    assert all(not a["matched"] for a in arm["attempts"][:-1])

    # the arm is the incumbent's tree with the Mid-Harness settings, and its verifier really ran
    config, results, _ = load_job(exp.root / arm["grid"])
    assert config.settings == {"midharness": {"n": arm["n"], "verifier": arm["verifier"]}}
    assert config.agent.harness_dir.endswith("worktrees/v0/harness")
    assert sum(r.cost.verifier.calls for r in results) > 0

    # comparison 2, same statistic: the candidate does not beat the arm (both pass everything)
    assert arm["status"] == "compared" and arm["beats"] is False and arm["pass_at_1"] == 1.0
    assert arm["decision"]["policy"] == "paper" and arm["decision"]["baseline_pass1"] == 1.0
    assert arm["comparison"]["stable_pass"] == 2 and arm["required"] is False

    # ledger: the arm's trials and grids are booked units
    v0 = exp.commit_of("v0")
    grids = [e for e in exp.ledger.find("evaluation") if e.purpose == "control_arm"]
    assert [e.key for e in grids] == [f"{v0}:control_arm:r01:n{a['n']}-{a['verifier']}" for a in arm["attempts"]]
    assert grids[-1].metrics["tokens_per_trial"] == pytest.approx(measured, abs=0.1)
    trials = exp.ledger.find("trial_done", purpose="control_arm")
    assert len(trials) == 4 * len(arm["attempts"])  # 2 tasks × r = 2 per attempt

    # rise show and rise report show both comparisons
    text = render_text(version_view(exp, "v1"), code=False)
    assert "candidate Pass@1 1.000 vs baseline 0.500" in text
    assert f"the incumbent at N = {arm['n']} samples per step, {arm['verifier']} verifier" in text
    assert f"ratio {arm['ratio']:.3f}, within 10%" in text and "does not beat it (reported only" in text
    html = write_report(exp).read_text()
    assert "Against the compute-matched control arm" in html and "does not beat it" in html
    assert "against baseline" in html and f"ratio {arm['ratio']:.3f}" in html

    # a rerun (--resume) of the decided round reads everything back: nothing runs, nothing is booked twice
    before = len(exp.ledger.events)
    _round(exp)
    assert len(exp.ledger.events) == before
    assert audit(exp).problems == []


def test_beating_the_arm_can_be_required(tmp_path, server):
    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[],
                          adoption={"control": "midharness", "require_beat_control_arm": True,
                                    "control_verifiers": ["pointwise", "pairwise"]})
    report = _round(exp)
    (cand,) = report.candidates
    assert report.adopted is None and cand.status == "rejected"
    assert "beats the incumbent" in cand.reason and "not the compute-matched control arm" in cand.reason
    (rej,) = exp.ledger.find("rejection")
    arm = rej.decision["control_arm"]
    assert rej.decision["final"] and arm["required"] and arm["beats"] is False and arm["matched"]
    assert arm["verifier"] in ("pointwise", "pairwise")
    assert json.loads((exp.root / arm["grid"] / "config.json").read_text())["settings"]["midharness"]["n"] > 1


def test_arm_resumes_after_kill(tmp_path, server):
    """kill -9 after the arm's 2nd trial, then after the arm (at the decision): each resume runs only what is
    missing; no arm cell runs twice, and the round ends with the matched arm in its decision."""
    import os
    import subprocess
    import sys

    from tests.test_controller_support import REPO

    runs = tmp_path / "runs"
    exp = make_experiment(runs, server.base_url, heldout=[], adoption={"control": "midharness"})

    def run(kill_at: str | None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "RISE_TEST_KILL_AT"}
        env["PYTHONPATH"] = str(REPO)
        if kill_at:
            env["RISE_TEST_KILL_AT"] = kill_at
        return subprocess.run([sys.executable, "-m", "tests.control_arm_support", str(runs), exp.root.name],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)

    def arm_trials() -> list:
        return exp.ledger.find("trial_done", purpose="control_arm")

    killed = run("control_arm:trial@2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert len(arm_trials()) == 2 and not exp.ledger.find("adoption")
    killed = run("decision")
    assert killed.returncode == -9, killed.stderr[-2000:]
    booked = len(arm_trials())
    assert booked % 4 == 0 and booked >= 4  # every attempt's grid finished before the decision
    done = run(None)
    assert done.returncode == 0 and json.loads(done.stdout.strip().splitlines()[-1]) == {"verify": "adopted"}
    assert len(arm_trials()) == booked  # the resume after the arm ran none of it again
    (adoption,) = exp.ledger.find("adoption")
    arm = adoption.decision["control_arm"]
    assert arm["matched"] and len(arm_trials()) == 4 * len(arm["attempts"])
    assert audit(exp).problems == []
    # one folder per cell in each arm grid: the killed cell's first attempt was not left as a finished trial
    for a in arm["attempts"]:
        assert len(list((exp.root / a["grid"]).glob("*__r[0-9]"))) == 4
