"""Issue 30 item 3 with real parts (experiment repo, local sandbox with tmux, the scripted model over real HTTP):
a ⊥ cell in the round's control grid is an infrastructure fault, not evidence against the candidate. The round is
blocked (no final rejection, no control booked as the baseline); a resume with the sandbox healthy reruns only
that cell, completes the control and decides the candidate against it."""

from __future__ import annotations

import pytest

from evolve.round.controller import CandidateInput, Proposal, run_round
from tests.test_controller_support import (
    GOOD,
    GOOD_PROPOSAL,
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


def test_a_bottom_cell_in_the_control_grid_blocks_the_round_and_a_resume_completes_it(tmp_path, server):
    from trials.environments.factory import make_environment

    exp = make_experiment(tmp_path / "runs", server.base_url, baseline="control", heldout=[])
    broken = {"on": True}

    def factory(kind, task, trial_dir, job_id):
        if broken["on"] and trial_dir.parent.name == "control" and trial_dir.name == "write-json__r1":
            raise SandboxError("injected: the sandbox could not start")
        return make_environment(kind, task, trial_dir, job_id)

    cand = [CandidateInput("verify", str(GOOD), Proposal.model_validate(GOOD_PROPOSAL))]
    report = run_round(exp, 1, cand, checks=standin_checks(), env_factory=factory)
    (c,) = report.candidates
    assert report.blocked and report.adopted is None and c.status == "blocked"
    assert "control grid of round 1 is incomplete" in c.reason and "write-json#1" in c.reason
    led = exp.ledger
    assert not led.find("rejection") and not led.find("evaluation") and not led.find("round_end")
    v0 = exp.commit_of("v0")
    infra = [e.key for e in led.find("trial_done") if e.status == "infra"]
    assert infra == [f"{v0}:control:r01:write-json:1:infra1", f"{v0}:control:r01:write-json:1:infra2"]

    broken["on"] = False
    before = {e.key for e in led.find("trial_done") if e.status != "infra"}
    report = run_round(exp, 1, cand, checks=standin_checks(), env_factory=factory)  # no candidate was created yet
    assert report.adopted == "v1"
    led = exp.ledger
    new_control = [e.key for e in led.find("trial_done", purpose="control") if e.status != "infra"
                   and e.key not in before]
    assert new_control == [f"{v0}:control:r01:write-json:1"]  # only the ⊥ cell was rerun
    (control,) = [e for e in led.find("evaluation") if e.purpose == "control"]
    assert control.complete
    (adoption,) = led.find("adoption")
    assert adoption.decision["family_size"] == 1 and not led.find("rejection")
