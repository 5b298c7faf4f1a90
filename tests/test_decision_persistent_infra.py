"""Issue 43 item 1 with real parts (experiment repo, local sandbox with tmux, the scripted model over real HTTP): a
candidate whose own evaluation cell stays ⊥ (a persistent sandbox fault on that cell only, the incumbent healthy)
ends its round within two resumes with a named outcome: after its bounded ⊥ attempts it is rejected as
unpublishable, the reason naming the cell, and the round's other candidate goes on to adoption. The same rule
holds whether the cell goes ⊥ in the evaluation (decision) or while publication completes a curtailed grid.

Two candidates from the same patch: ``verify`` (its ``write-json#2`` evaluation cell always fails to start its
sandbox) and ``verify2`` (healthy). The seed passes hello-file only (Pass@1 0.5); with its ⊥ cell counted as a
failure ``verify`` still beats it (0.75 under ``paper``), which is the case that blocked its round forever."""

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
FAULTY, CELL = "verify", "write-json__r2"


@pytest.fixture
def server():
    yield from scripted_server(early_claimer)


def _faulty_factory(trial_dir_seen: list[str]):
    from trials.environments.factory import make_environment

    def factory(kind, task, trial_dir, job_id):
        if trial_dir.name == CELL and trial_dir.parent.name == "evaluation" and trial_dir.parent.parent.name == FAULTY:
            trial_dir_seen.append(trial_dir.name)
            raise SandboxError("injected: this candidate's sandbox never starts on this cell")
        return make_environment(kind, task, trial_dir, job_id)

    return factory


def _until_ended(exp, cands, factory, invocations: int = 3):
    """Run the round, then resume it while it is blocked: at most ``invocations`` in all (two resumes). Each
    invocation says the round's measured power before its first evaluation trial (issue 43 item 2)."""
    reports = []
    for _ in range(invocations):
        said: list[str] = []
        reports.append(run_round(exp, 1, cands, checks=standin_checks(), env_factory=factory, say=said.append))
        assert said[0].startswith("round 1: power, measured (M = 2 candidates a round, 3 rounds a night): paper")
        assert "reference corpus of v0: hello-file 2/2 write-json 0/2" in said[0]
        assert said[1].startswith("round 1: beside it, power, the prior's (M = 2 candidates a round")
        if not reports[-1].blocked:
            break
    events = exp.ledger.events
    first_eval = min(i for i, e in enumerate(events) if e.kind == "trial_done" and e.purpose == "evaluation")
    (power,) = [i for i, e in enumerate(events) if e.kind == "power"]
    assert power < first_eval  # booked before the round's first evaluation
    return reports


def _assert_named_end(exp, reports):
    last = reports[-1]
    by = {c.slug: c for c in last.candidates}
    assert not last.blocked, [(c.slug, c.status, c.reason) for c in last.candidates]
    assert len(reports) <= 3  # the first invocation and at most two resumes
    (end,) = exp.ledger.find("round_end", key="r01:end")
    assert end.adopted == "v1" and last.adopted == "v1"
    assert by["verify2"].status == "adopted" and by[FAULTY].status == "rejected"
    assert "cannot be published" in by[FAULTY].reason and "write-json#2" in by[FAULTY].reason
    (rej,) = exp.ledger.find("rejection", key=f"{by[FAULTY].commit}:decision")
    assert rej.decision["unpublishable"] == ["write-json#2"] and rej.decision["final"] is True
    infra = [e for e in exp.ledger.find("trial_done", commit=by[FAULTY].commit) if e.status == "infra"]
    assert 3 <= len(infra) <= 4  # the ⊥ attempts are bounded: infra_limit 3, two per invocation
    assert exp.commit_of("v1") == by["verify2"].commit
    return by


def test_a_persistent_bottom_cell_at_decision_ends_the_round(tmp_path, server):
    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[])
    cands = [CandidateInput(slug, str(GOOD), Proposal.model_validate(GOOD_PROPOSAL)) for slug in (FAULTY, "verify2")]
    seen: list[str] = []
    reports = _until_ended(exp, cands, _faulty_factory(seen))
    assert reports[0].blocked  # 2 ⊥ attempts in the first invocation: below the limit, a resume reruns the cell
    by = _assert_named_end(exp, reports)
    assert len(reports) == 2 and len(seen) == 4
    assert not exp.ledger.find("evaluation", key=f"{by[FAULTY].commit}:evaluation")[0].metrics.get("curtailed")


def test_a_persistent_bottom_cell_at_publication_ends_the_round(tmp_path, server):
    """Curtailment decides both after 3 of 4 cells; publication completes the grids to choose between them, and
    the faulty candidate's skipped cell goes ⊥ there: the same rule rejects it, the other is adopted."""
    exp = make_experiment(tmp_path / "runs", server.base_url, heldout=[], sequential=True)
    cands = [CandidateInput(slug, str(GOOD), Proposal.model_validate(GOOD_PROPOSAL)) for slug in (FAULTY, "verify2")]
    seen: list[str] = []
    reports = _until_ended(exp, cands, _faulty_factory(seen))
    by = _assert_named_end(exp, reports)
    ev = exp.ledger.find("evaluation", key=f"{by[FAULTY].commit}:evaluation")[0]
    assert ev.metrics["curtailed"] and ev.metrics["observed_cells"] == 3
    assert len(seen) == 4 and len(reports) == 2
    # issue 43 item 3, measured: the adopted grid was completed (nothing saved), the rejected one kept its cut
    from evolve.views.power import trials_saved

    adopted, rejected = trials_saved(exp, by["verify2"].commit), trials_saved(exp, by[FAULTY].commit)
    assert (adopted.at_decision, adopted.run, adopted.saved) == (3, 4, 0)
    assert (rejected.at_decision, rejected.run, rejected.infra, rejected.saved) == (3, 3, 4, 1)
