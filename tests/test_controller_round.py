"""A whole round with real parts: the seed in an experiment repo, candidate patches on branches, the local
sandbox with tmux, the real smoke check and contracts, the scripted model that claims completion too early over real HTTP.

The good candidate beats the baseline on a complete grid and is adopted as v1 (tag, versions/v1/, Adoption);
the harmful one is rejected with its regression listed; a ⊥ cell blocks adoption and the reason says so."""

from __future__ import annotations

import json

import pytest

from evolve.round.controller import CandidateInput, Proposal, run_round
from tests.test_controller_support import (
    GOOD,
    GOOD_PROPOSAL,
    HARMFUL,
    HARMFUL_PROPOSAL,
    early_claimer,
    make_experiment,
    scripted_server,
    standin_checks,
)
from trials.errors import SandboxError

pytestmark = [pytest.mark.tmux, pytest.mark.sandbox]


@pytest.fixture
def server():
    yield from scripted_server(early_claimer)


def test_good_adopted_harmful_rejected(tmp_path, server):
    exp = make_experiment(tmp_path / "runs", server.base_url)
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL)),
                                CandidateInput("skip", str(HARMFUL), Proposal.model_validate(HARMFUL_PROPOSAL))])
    by = {c.slug: c for c in report.candidates}
    assert report.adopted == "v1" and by["verify"].status == "adopted" and by["verify"].version == "v1"
    assert by["skip"].status == "rejected" and by["skip"].regressions == ["hello-file"]
    assert "regressions of stable passes: hello-file" in by["skip"].reason

    led = exp.ledger
    (adoption,) = led.find("adoption")
    assert adoption.version == "v1" and adoption.parent == "v0" and adoption.commit == by["verify"].commit
    assert adoption.decision["candidate_pass1"] == 1.0 and adoption.decision["baseline_pass1"] == 0.5
    (rej,) = led.find("rejection")
    assert rej.commit == by["skip"].commit and rej.decision["regressions"] == ["hello-file"]
    assert exp.versions() == ["v0", "v1"] and exp.commit_of("v1") == by["verify"].commit
    # every evaluation trial is booked under <commit>:<task>:<rep>
    c = by["verify"].commit
    assert {e.key for e in led.find("trial_done", commit=c, purpose="evaluation")} == {
        f"{c}:{t}:{k}" for t in ("hello-file", "write-json") for k in (1, 2)}
    # the screening saw the mechanism's spans; the held-out split ran for v0 and v1 and decided nothing
    (scr,) = led.find("screening", commit=c)
    assert scr.mechanism_ran and scr.details["spans"]["completion:VerificationGate.review"] > 0
    # both passed the real smoke check and their contracts in three configurations
    checks = {(e.commit, e.stage): e for e in led.find("check_result")}
    for cand in by.values():
        assert checks[(cand.commit, "smoke")].passed and checks[(cand.commit, "contracts")].passed
    assert checks[(c, "contracts")].details["mechanisms"] == ["verify-completion"]
    held = [e for e in led.find("evaluation") if e.metrics.get("purpose") == "heldout"]
    assert [e.commit for e in held] == [exp.commit_of("v0"), c]
    # the decided round is booked as ended: a later `rise evolve` on this experiment starts round 2 (it had taken
    # round 1 for open, run its analysis as round 1's and booked r01:end over this decision)
    (end,) = led.find("round_end")
    assert end.key == "r01:end" and end.adopted == "v1" and end.reason == "rise round: adopted v1"
    from evolve.loop import Evolution, EvolveOptions
    assert Evolution(exp, EvolveOptions(rounds=2, resume=False), None)._next_round() == 2
    # versions/v1 is the new reference corpus: its evaluation
    v1 = exp.root / "versions" / "v1"
    meta = json.loads((v1 / "version.json").read_text())
    assert meta["commit"] == c and meta["parent"] == "v0"
    assert (v1 / "reference" / "job_result.json").is_file()
    assert (v1 / "reference").resolve() == (exp.root / "rounds" / "r01" / "verify" / "evaluation").resolve()
    assert (v1 / "heldout" / "job_result.json").is_file()

    # running the round again does nothing new
    n = len(led.events)
    again = run_round(exp, 1, [])
    assert again.adopted == "v1" and len(exp.ledger.events) == n


def test_infra_cell_blocks_adoption(tmp_path, server):
    """A ⊥ trial in the candidate's evaluation: no adoption, the decision's reason names the cell; a resume
    with the sandbox healthy again reruns only that cell and then adopts."""
    from trials.environments.factory import make_environment

    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[])
    broken = {"on": True}

    def factory(kind, task, trial_dir, job_id):
        if broken["on"] and "evaluation" in str(trial_dir) and trial_dir.name == "write-json__r2":
            raise SandboxError("injected: the sandbox could not start")
        return make_environment(kind, task, trial_dir, job_id)

    cand = [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))]
    report = run_round(exp, 1, cand, checks=standin_checks(), env_factory=factory)
    (c,) = report.candidates
    assert report.blocked and report.adopted is None and c.status == "blocked"
    assert "cannot adopt: 1 ⊥" in c.reason and "write-json#2" in c.reason
    (blocked,) = exp.ledger.find("rejection")
    assert blocked.key == f"{c.commit}:blocked:1" and blocked.decision["blocked"] is True
    assert blocked.decision["cells"] == ["write-json#2 (infra:sandbox)"]
    assert "⊥" in blocked.reason and exp.versions() == ["v0"]
    infra = [e for e in exp.ledger.find("trial_done") if e.status == "infra"]
    assert [e.key for e in infra] == [f"{c.commit}:write-json:2:infra1", f"{c.commit}:write-json:2:infra2"]

    broken["on"] = False
    done_before = {e.key for e in exp.ledger.find("trial_done") if e.status != "infra"}
    report = run_round(exp, 1, [], checks=standin_checks(), env_factory=factory)
    assert report.adopted == "v1"
    new = [e.key for e in exp.ledger.find("trial_done") if e.status != "infra" and e.key not in done_before]
    assert new == [f"{c.commit}:write-json:2"]


def test_sequential_stopping_decides_early_and_completes_the_adopted_grid(tmp_path, server):
    """With curtailment the harmful candidate is rejected after 2 of its 4 evaluation trials; the good one is
    decided after 3 and its grid completed at publication, since it becomes v1's reference corpus."""
    exp = make_experiment(tmp_path / "runs", server.base_url, sequential=True, heldout=[])
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL)),
                                CandidateInput("skip", str(HARMFUL), Proposal.model_validate(HARMFUL_PROPOSAL))],
                       checks=standin_checks())
    by = {c.slug: c for c in report.candidates}
    assert report.adopted == "v1" and by["skip"].status == "rejected"
    assert "curtailment" in by["skip"].reason
    led = exp.ledger
    evals = {e.key: e for e in led.find("evaluation")}
    good, bad = by["verify"].commit, by["skip"].commit
    assert evals[f"{bad}:evaluation"].metrics["curtailed"] and not evals[f"{bad}:evaluation"].complete
    assert len(led.find("trial_done", commit=bad, purpose="evaluation")) == 2
    assert evals[f"{good}:evaluation"].metrics["curtailed"] and evals[f"{good}:evaluation"].metrics[
        "observed_cells"] == 3
    assert evals[f"{good}:reference"].complete and evals[f"{good}:reference"].metrics["pass_at_1"] == 1.0
    assert len(led.find("trial_done", commit=good, purpose="evaluation")) == 4


def test_fresh_control_baseline(tmp_path, server):
    """adoption.baseline = "control": the incumbent runs afresh in the round (no v0 reference corpus) and the
    candidate is decided against that grid."""
    exp = make_experiment(tmp_path / "runs", server.base_url, baseline="control", heldout=[])
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))],
                       checks=standin_checks())
    assert report.adopted == "v1"
    led = exp.ledger
    v0 = exp.commit_of("v0")
    (control,) = [e for e in led.find("evaluation") if e.metrics.get("purpose") == "control"]
    assert control.key == f"{v0}:control:r01" and control.complete and control.metrics["pass_at_1"] == 0.5
    assert not led.done(f"{v0}:reference") and (exp.root / "rounds" / "r01" / "control" / "job_result.json").is_file()
    (adoption,) = led.find("adoption")
    assert adoption.decision["baseline_pass1"] == 0.5


def test_repair_commits_and_checks_the_repaired_commit(tmp_path, server):
    """A failed contracts check goes to the repair hook (the controller's unit, not the contracts' loop): the
    repaired code is committed, booked as ``C:repair``, smoke-checked again and carried on under the new commit;
    a proposal naming a boundary that never runs fails screening."""
    from evolve.round.controller import Checks
    from tests.test_controller_support import pass_smoke

    async def contracts(candidate, incumbent, frozen, repair, max_repairs, out_dir):
        assert repair is None and max_repairs == 0  # each repair is the controller's booked unit
        ok = (candidate / "REPAIRED.md").is_file()
        return ok, {"summary": "stand-in contracts", "failures": [] if ok else ["case x failed"]}

    def repair(candidate, failures):
        (candidate / "REPAIRED.md").write_text("fixed: " + "; ".join(failures) + "\n")
        return True

    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[])
    prop = Proposal(tasks=["write-json"], boundaries=["completion:NoSuch.thing"])
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), prop)], checks=Checks(pass_smoke, contracts),
                       repair=repair)
    (c,) = report.candidates
    assert c.status == "rejected" and "screening: the mechanism did not run" in c.reason
    led = exp.ledger
    (created,) = led.find("candidate_created")
    first, second = created.commit, c.commit
    assert first != second and exp.repo.commit(second).parents[0].hexsha == first
    assert "REPAIRED.md" in [b.path for b in exp.repo.commit(second).tree.blobs]
    keys = [e.key for e in led.events if e.kind in ("check_result", "repair", "screening", "rejection")]
    assert keys == [f"{first}:smoke", f"{first}:contracts", f"{first}:repair", f"{second}:smoke",
                    f"{second}:contracts", f"{second}:screening", f"{second}:decision"]
    (rep,) = led.find("repair")
    assert rep.repaired_to == second and rep.candidate == "r01:verify" and rep.number == 1
    assert rep.stage == "contracts" and rep.failures == ["case x failed"]
    n = len(led.events)
    assert run_round(exp, 1, [], checks=Checks(pass_smoke, contracts), repair=repair).candidates[0].commit == second
    assert len(exp.ledger.events) == n


def test_a_failed_smoke_check_goes_to_the_repair_hook_and_the_repaired_commit_is_checked(tmp_path, server):
    """Smoke failures reach the implementer like contract failures (issue 14 item 2): the repaired worktree is
    committed and smoke-checked again; a resume goes straight to the repaired commit; without a hook it is a
    rejection naming the smoke check."""
    from evolve.round.controller import Checks
    from tests.test_controller_support import pass_contracts

    async def smoke(harness_dir, out_dir):
        ok = (harness_dir / "FIXED.md").is_file()
        return ok, {"summary": "stand-in smoke: FIXED.md " + ("present" if ok else "missing"),
                    "failures": [] if ok else ["the harness crashed at start"]}

    seen: list = []

    def repair(candidate, failures):
        seen.append(list(failures))
        (candidate / "FIXED.md").write_text("fixed\n")
        return True

    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[])
    prop = Proposal(tasks=["write-json"], boundaries=["completion:NoSuch.thing"])
    report = run_round(exp, 1, [CandidateInput("verify", str(GOOD), prop)], checks=Checks(smoke, pass_contracts),
                       repair=repair)
    (c,) = report.candidates
    assert seen and "the harness crashed at start" in seen[0][0] and "smoke" in seen[0][0]
    led = exp.ledger
    (created,) = led.find("candidate_created")
    first, second = created.commit, c.commit
    assert first != second and exp.repo.commit(second).parents[0].hexsha == first
    assert led.find("repair", key=f"{first}:repair")[0].repaired_to == second
    assert led.find("check_result", key=f"{second}:smoke")[0].passed
    assert "screening: the mechanism did not run" in c.reason  # it went on past the checks
    n = len(led.events)
    assert run_round(exp, 1, [], checks=Checks(smoke, pass_contracts), repair=repair).candidates[0].commit == second
    assert len(exp.ledger.events) == n and len(seen) == 1

    exp2 = make_experiment(tmp_path / "runs2", server.base_url, heldout=[])
    (c2,) = run_round(exp2, 1, [CandidateInput("verify", str(GOOD), prop)],
                      checks=Checks(smoke, pass_contracts)).candidates
    assert c2.status == "rejected" and "smoke check failed" in c2.reason


def test_spent_trial_budget_stops_before_the_next_grid_and_resume_continues(tmp_path, server):
    """budgets.max_trials is checked before each grid: the reference runs spend it, the candidate's next grid is
    refused with a message naming the budget; raising it and resuming finishes the round, nothing rerun."""
    from evolve.experiment.config import ExperimentConfig
    from evolve.round.controller import ControllerError

    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[])

    def set_budget(n):
        cfg = ExperimentConfig.load(exp.config_path)
        exp.config_path.write_text(cfg.model_copy(update={"budgets": cfg.budgets.model_copy(
            update={"max_trials": n})}).to_toml())

    set_budget(1)
    cand = [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))]
    with pytest.raises(ControllerError, match=r"budget spent: \d+ trials run, budgets.max_trials = 1"):
        run_round(exp, 1, cand, checks=standin_checks())
    spent = {e.key for e in exp.ledger.find("trial_done")}
    assert spent and exp.versions() == ["v0"]
    set_budget(1000)
    report = run_round(exp, 1, [], checks=standin_checks())
    assert report.adopted == "v1"
    keys = [e.key for e in exp.ledger.find("trial_done")]
    assert len(keys) == len(set(keys)) and spent <= set(keys)
