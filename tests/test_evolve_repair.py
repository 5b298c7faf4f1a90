"""The controller's repair hook (evolve.roles.implement.repair_hook): failures reach the implementer in the candidate's
worktree; a worktree it did not make, or a repair call that fails, is no repair (changed: False), never a crash."""

from __future__ import annotations

import pytest

from evolve.roles.implement import repair_hook
from evolve.roles.proposals import ProposalSpec
from evolve.roles.runtime import RoleError
from tests.test_analysis_support import make_experiment


class FailingBackend:
    """A role backend test double whose every call fails the way a dead endpoint does."""

    name = "failing"

    def __init__(self):
        from trials.endpoints.spec import PriceTable

        self.price, self.calls = PriceTable(), 0

    async def run(self, job):
        self.calls += 1
        raise RoleError(job.role.name, "backend", "connection refused")


def test_repair_goes_to_the_implementer_and_a_failed_call_is_no_repair(tmp_path):
    exp = make_experiment(tmp_path, {"alpha": "pf"})
    _, wt = exp.create_candidate(1, "verify")
    backend = FailingBackend()
    calls: list = []
    spec = ProposalSpec(mechanism="verify", summary="verify before a claim", setting="completion.verify")
    repair = repair_hook(exp, lambda name: backend, {"r01-verify": spec}, wt, calls,
                         transcripts=tmp_path / "transcripts")
    out = repair(wt, ["verify: positive case failed"])
    assert out["changed"] is False and out["role_call"]["error"] == "backend"  # the failed call is booked too
    assert backend.calls == 1 and calls == []
    (transcript,) = (tmp_path / "transcripts").glob("implementer-*.jsonl")
    text = transcript.read_text()
    assert "verify: positive case failed" in text and "connection refused" in text

    _, other = exp.create_candidate(1, "by-hand")  # a person's patch: nobody to send it to
    assert repair(other, ["x"])["changed"] is False and backend.calls == 1


def test_a_repair_is_reserved_in_the_budget_before_the_call(tmp_path):
    """``before`` (rise evolve's budget check for one implementer call) runs before the repair call; when it
    refuses, nothing is called and the refusal reaches the loop (a non-final budget stop)."""
    from evolve.experiment.budget import BudgetStop

    exp = make_experiment(tmp_path, {"alpha": "pf"})
    _, wt = exp.create_candidate(1, "verify")
    backend = FailingBackend()
    spec = ProposalSpec(mechanism="verify", summary="verify before a claim", setting="completion.verify")
    asked: list = []

    def before(worktree):
        asked.append(worktree)
        raise BudgetStop("$ budget: $0.9 spent + $0.5 reserved for a repair of r01-verify > max_usd $1.0")

    repair = repair_hook(exp, lambda name: backend, {"r01-verify": spec}, wt, [], before=before,
                         transcripts=tmp_path / "transcripts")
    with pytest.raises(BudgetStop, match="reserved for a repair"):
        repair(wt, ["verify: positive case failed"])
    assert asked == [wt] and backend.calls == 0 and not (tmp_path / "transcripts").exists()
