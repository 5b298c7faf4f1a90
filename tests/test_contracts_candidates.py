"""Candidates as git branches of an experiment's harness repository: the verify-completion patch and the
harmful keystroke-trim patch are applied in candidate worktrees (evolve.experiment.store), then smoke-checked and run
through their contracts in the three configurations (incumbent v0, candidate off, candidate on) with real
tmux, the local bwrap sandbox, the real runner and a scripted model over HTTP."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from evolve.experiment.config import ExperimentConfig, TaskSplit
from evolve.experiment.store import init_experiment
from trials.endpoints.spec import EndpointSpec
from validate.contracts import FrozenStore, changed_contracts, mechanism_spans, run_contracts
from validate.smoke import smoke_check

REPO = Path(__file__).resolve().parents[1]
CANDIDATES = REPO / "tests" / "data" / "candidates"
pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


def parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap/nsenter are not available for the local sandbox"
    return None


def make_candidate(tmp_path: Path, slug: str):
    cfg = ExperimentConfig(name="x", endpoint=EndpointSpec(base_url="http://127.0.0.1:9/v1", model="scripted"),
                           tasks=TaskSplit(dir=str(REPO / "data" / "starter")))
    exp = init_experiment("exp", cfg, runs_dir=tmp_path / "runs")
    branch, worktree = exp.create_candidate(1, slug)
    subprocess.run(["git", "apply", str(CANDIDATES / f"{slug}.patch")], cwd=worktree, check=True)
    exp.commit_worktree(worktree, f"candidate {slug}")
    return exp, branch, worktree


def test_patches_apply_to_the_current_seed(tmp_path):
    """A patch that no longer applies means the seed moved: run tests/data/candidates/build.py."""
    seed_copy = tmp_path / "harness"
    shutil.copytree(REPO / "harness_seed", seed_copy, ignore=shutil.ignore_patterns("__pycache__"))
    for patch in sorted(CANDIDATES.glob("*.patch")):
        proc = subprocess.run(["git", "apply", "--check", str(patch)], cwd=seed_copy, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, f"{patch.name} no longer applies ({proc.stderr.strip()}); run " \
                                     "python tests/data/candidates/build.py"


def test_verify_completion_candidate_passes_smoke_and_contract(tmp_path):
    if (why := parts_missing()):
        pytest.skip(why)
    exp, branch, worktree = make_candidate(tmp_path, "verify-completion")
    assert branch == "cand/r01-verify-completion" and worktree.name == "harness"

    smoke = smoke_check(worktree, tmp_path / "smoke")
    assert smoke.passed, smoke.summary()
    assert [s.name for s in smoke.steps] == ["import", "handbook", "recording", "trial"]

    assert changed_contracts(worktree, exp.harness_dir) == ["verify-completion"]
    assert mechanism_spans(worktree, ["verify-completion"]) == {
        "verify-completion": ["completion:VerificationGate.review"]}
    frozen = tmp_path / "frozen.json"
    report = run_contracts(worktree, exp.harness_dir, frozen, out_dir=tmp_path / "contracts")
    assert report.passed, report.summary()
    assert report.mechanisms == ["verify-completion"]
    seen = {(r.case, r.config) for r in report.runs}
    assert seen == {(c, cfg) for c in ("early-claim-is-withheld", "no-claim-nothing-withheld",
                                       "ignored-request-withholds-once") for cfg in ("incumbent", "off", "on")}
    # the outcome really changes: the early claim fails the task without the mechanism, passes with it
    by = {(r.case, r.config): r for r in report.runs}
    assert by[("early-claim-is-withheld", "incumbent")].status == "failed"
    assert by[("early-claim-is-withheld", "off")].status == "failed"
    assert by[("early-claim-is-withheld", "on")].status == "passed"
    steps = json.loads((Path(by[("early-claim-is-withheld", "on")].trial_dir) / "agent" /
                        "trajectory.json").read_text())["steps"]
    assert [s.get("extra", {}).get("completion") for s in steps if s["source"] == "agent"] == \
        ["verify", "continue", "confirm", "done"]

    # incumbent values were frozen; a second round checks against them (and freezes nothing new)
    store = FrozenStore(frozen)
    assert "verify-completion/early-claim-is-withheld/reward-without@reward" in store
    assert store.get("verify-completion/early-claim-is-withheld/reward-without@reward") == [0.0]
    again = run_contracts(worktree, exp.harness_dir, frozen, out_dir=tmp_path / "contracts2",
                          configs=("incumbent", "off"))
    assert again.passed and again.frozen_added == [], again.summary()


def test_harmful_candidate_passes_its_contract_but_cannot_run_commands(tmp_path):
    """keystroke-trim does what its contract says (and so reaches evaluation, where it loses)."""
    if (why := parts_missing()):
        pytest.skip(why)
    exp, _, worktree = make_candidate(tmp_path, "keystroke-trim")
    smoke = smoke_check(worktree, tmp_path / "smoke")
    assert smoke.passed, smoke.summary()
    assert smoke.step("trial").data["reward"] == 0.0  # a valid trial, but the command was never run
    report = run_contracts(worktree, exp.harness_dir, tmp_path / "frozen.json", out_dir=tmp_path / "c")
    assert report.passed, report.summary()
    by = {(r.case, r.config): r for r in report.runs}
    assert by[("trailing-newline-trimmed", "on")].status == "failed"
    assert by[("trailing-newline-trimmed", "incumbent")].status == "passed"
