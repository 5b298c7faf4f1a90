"""Publication and ⊥ handling without trials (issue 15 items 5 and 6): the grid runner is a stand-in that hands
back prepared outcomes, so the controller's choices are checked exactly."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from evolve.controller import CandidateReport, Controller, RoundReport
from tests.test_controller_support import make_experiment


def _outcome(pass_at_1: float, complete: bool = True):
    return SimpleNamespace(complete=complete, metrics=SimpleNamespace(pass_at_1=pass_at_1, missing=[]))


def test_winner_is_chosen_on_complete_grids(tmp_path):
    """A curtailed grid's Pass@1 (0.9 after a lucky start) must not beat a complete 0.8: both grids are
    completed first and the winner is chosen on those."""
    ctl = Controller(make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1"))
    complete = {"lucky": 0.5, "steady": 0.8}
    ran, adopted = [], []

    async def grid(plan, commit, prefix, stop=None):
        ran.append(commit)
        return _outcome(complete[commit])

    async def adopt(round_no, incumbent, c):
        adopted.append(c.slug)
        c.status, c.version = "adopted", "v1"

    ctl.plan = lambda *args, **kw: args
    ctl.grid, ctl.adopt = grid, adopt
    ctl.reject = lambda commit, c, why, decision: setattr(c, "status", "rejected") or setattr(c, "reason", why)
    lucky = CandidateReport("lucky", "lucky", "adopt?", "better", decision={"pass_at_1": 0.9})
    steady = CandidateReport("steady", "steady", "adopt?", "better", decision={"pass_at_1": 0.8})
    report = RoundReport(1, "v0", [lucky, steady])
    asyncio.run(ctl.publish(1, "v0", report))
    assert sorted(ran) == ["lucky", "steady"] and adopted == ["steady"] and report.adopted == "v1"
    assert lucky.status == "rejected" and "0.8 on its complete grid against 0.5" in lucky.reason


def test_incomplete_grid_blocks_the_choice(tmp_path):
    ctl = Controller(make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1"))

    async def grid(plan, commit, prefix, stop=None):
        return _outcome(0.5, complete=commit != "b")

    async def adopt(round_no, incumbent, c):
        raise AssertionError("nothing may be adopted while a contender's grid is incomplete")

    ctl.plan = lambda *args, **kw: args
    ctl.grid, ctl.adopt = grid, adopt
    report = RoundReport(1, "v0", [CandidateReport("a", "a", "adopt?", decision={"pass_at_1": 0.9}),
                                   CandidateReport("b", "b", "adopt?", decision={"pass_at_1": 0.8})])
    asyncio.run(ctl.publish(1, "v0", report))
    assert report.blocked and report.adopted is None and "could not be completed" in report.candidates[0].reason
