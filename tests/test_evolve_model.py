"""The proposer and the implementer on the real bundled model (llama.cpp server, real HTTP, the openai backend),
in a real experiment store and a real candidate worktree.

Asserted is what the runtime and the loop's units must do whatever the small model answers: the proposer's
answer is a validated ProposalSpec (predictions restricted to development tasks) checked by the overfitting
guard, or a RoleError naming its kind and fields, with a transcript either way; the implementer either leaves a
commit on ``cand/r01-<slug>`` whose changes stay inside the worktree, or fails with the worktree reset to the
incumbent (nothing half-made is left for the controller)."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from evolve.roles.analysis.roles import with_limits
from evolve.roles.implement import IMPLEMENTER, implement
from evolve.roles.proposals import PROPOSER, OverfitGuard, ProposalSpec, ProposerInputs, propose
from evolve.roles.runtime import RoleError, make_backend, read_transcript
from tests.fakes.bundled import big_model_skip_reason, bundled_server
from tests.test_controller_support import STARTER

pytestmark = [pytest.mark.model]
MODEL = "qwen2.5-coder-1.5b"
DEV = ["hello-file", "write-json"]


@pytest.mark.timeout(720)  # two role calls of at most 240 s each, plus the server's start
def test_proposer_and_implementer_on_the_bundled_model(tmp_path):
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment

    cfg = ExperimentConfig.model_validate({
        "name": "real", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": MODEL},
        "tasks": {"dir": str(STARTER), "development": DEV}, "r": 2, "env": "local"})
    exp = init_experiment("real", cfg, runs_dir=tmp_path / "runs")
    base = exp.commit_of("v0")
    _, workspace = exp.create_candidate(0, "read", base=base)
    transcripts = tmp_path / "transcripts"
    inputs = ProposerInputs(group={"name": "claims before checking", "wish": "check the result before accepting a "
                                   "completion claim (when the model claims without having run any check)",
                                   "tasks": ["write-json"], "behaviours": ["completion.handshake"]},
                            dev_tasks=DEV, stable_tasks=["hello-file"])
    if (reason := big_model_skip_reason(MODEL)):  # CI assembles only the 0.5B, which cannot drive these roles
        pytest.skip(f"optional: {reason} (run with the 1.5B assembled: rise serve bundled -m {MODEL})")
    with bundled_server("evolve", ctx=16384, parallel=1, model=MODEL) as (_, spec):
        backend = make_backend("openai", spec)
        proposer = with_limits(PROPOSER, max_turns=4, max_output_tokens=700, deadline_s=240)
        try:
            made, verdict, res = propose(inputs, workspace, backend, OverfitGuard(STARTER, DEV), role=proposer,
                                         transcripts=transcripts, harness=workspace)
        except RoleError as exc:
            assert exc.kind in ("invalid_output", "limit", "timeout", "backend") and exc.transcript
            made = ProposalSpec(mechanism="verify-completion", summary="withhold the first claim once",
                                behaviour_change="the first claim is withheld; the model verifies",
                                setting="completion.verify_before_complete", predicted_fixes=["write-json"])
        else:
            assert isinstance(made, ProposalSpec) and set(made.predicted_fixes) <= set(DEV)
            assert verdict.guard.what == "proposal" and res.transcript.is_file()  # the guard's report (tiers: Verdict)
        implementer = with_limits(IMPLEMENTER, max_turns=6, max_output_tokens=900, deadline_s=240,
                                  run_timeout_s=60)
        try:
            branch, commit, _ = implement(exp, 1, made, backend, slug="real", incumbent_dir=workspace,
                                          role=implementer, transcripts=transcripts)
        except RoleError as exc:
            wt = exp.root / "worktrees" / "r01-real" / "harness"
            repo = git.Repo(wt)
            assert repo.head.commit.hexsha == base and not repo.is_dirty(untracked_files=True)
            assert exc.transcript and Path(exc.transcript).is_file()
        else:
            assert branch == "cand/r01-real" and exp.repo.is_ancestor(base, commit)
            changed = exp.repo.git.diff("--name-only", base, commit).split()
            assert all(not p.startswith(("..", "/")) for p in changed)
    rows = [r for p in transcripts.glob("*.jsonl") for r in read_transcript(p)]
    assert {r["role"] for r in rows if r["kind"] == "start"} == {"proposer", "implementer"}
    assert all(any(r["kind"] == "end" for r in read_transcript(p)) for p in transcripts.glob("*.jsonl"))
