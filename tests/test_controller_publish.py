"""Publication and ⊥ handling without trials (issue 15 items 5 and 6): the grid runner is a stand-in that hands
back prepared outcomes, so the controller's choices are checked exactly."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from evolve.round.controller import CandidateReport, Controller, RoundReport
from tests.test_controller_support import make_experiment


def _outcome(pass_at_1: float, complete: bool = True):
    return SimpleNamespace(complete=complete, metrics=SimpleNamespace(pass_at_1=pass_at_1, missing=[]), results={})


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
    ctl.grid, ctl.publication.adopt = grid, adopt
    ctl.reject = lambda commit, c, why, decision: setattr(c, "status", "rejected") or setattr(c, "reason", why)
    lucky = CandidateReport("lucky", "lucky", "adopt?", "better", decision={"pass_at_1": 0.9})
    steady = CandidateReport("steady", "steady", "adopt?", "better", decision={"pass_at_1": 0.8})
    report = RoundReport(1, "v0", [lucky, steady])
    asyncio.run(ctl.publication.publish(1, "v0", report))
    assert sorted(ran) == ["lucky", "steady"] and adopted == ["steady"] and report.adopted == "v1"
    assert lucky.status == "rejected" and "0.8 on its complete grid against 0.5" in lucky.reason


def test_incomplete_grid_blocks_the_choice(tmp_path):
    ctl = Controller(make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1"))

    async def grid(plan, commit, prefix, stop=None):
        return _outcome(0.5, complete=commit != "b")

    async def adopt(round_no, incumbent, c):
        raise AssertionError("nothing may be adopted while a contender's grid is incomplete")

    ctl.plan = lambda *args, **kw: args
    ctl.grid, ctl.publication.adopt = grid, adopt
    report = RoundReport(1, "v0", [CandidateReport("a", "a", "adopt?", decision={"pass_at_1": 0.9}),
                                   CandidateReport("b", "b", "adopt?", decision={"pass_at_1": 0.8})])
    asyncio.run(ctl.publication.publish(1, "v0", report))
    assert report.blocked and report.adopted is None and "could not be completed" in report.candidates[0].reason


def _result(task: str, rep: int, status: str):
    from trials.results import TrialResult

    return TrialResult(trial_name=f"{task}__r{rep}", run_id="x", task_name=task, repetition=rep, status=status,
                       infra_cause="sandbox" if status == "infra" else None)


def test_candidate_that_breaks_its_own_sandbox_is_charged_after_bounded_attempts(tmp_path):
    """Issue 15 item 5: a cell ⊥ in 3 attempts where the incumbent's task is healthy is the candidate's failure;
    where the incumbent is ⊥ too it stays ⊥ (an infrastructure fault), however often it was tried."""
    from evolve.round.controller import LedgerBook
    from validate.evaluate import outcome_of

    exp = make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1")
    ctl = Controller(exp)
    results = {("hello-file", 1): _result("hello-file", 1, "passed"), ("hello-file", 2): _result("hello-file", 2,
                                                                                                   "passed"),
               ("write-json", 1): _result("write-json", 1, "failed"), ("write-json", 2): _result("write-json", 2,
                                                                                                   "infra")}

    async def grid(plan, commit, prefix, stop=None):  # each run: one more ⊥ attempt of write-json#2, as run_grid
        LedgerBook(ctl.led, exp.root, commit, prefix, plan.purpose).record(results[("write-json", 2)],
                                                                          exp.root / "x")
        return outcome_of(plan, results)

    ctl.grid = grid
    healthy = {"hello-file": [True, True], "write-json": [False, False]}
    for attempt in (1, 2):
        out = asyncio.run(ctl.evaluate(1, "c", "c0ffee", exp.harness_dir, healthy, "v0"))
        assert not out.complete and not ctl.led.done("c0ffee:evaluation"), attempt  # ⊥: blocked, resumable
    out = asyncio.run(ctl.evaluate(1, "c", "c0ffee", exp.harness_dir, healthy, "v0"))
    assert out.complete and out.grid["write-json"] == [False, False]
    (ev,) = ctl.led.find("evaluation", key="c0ffee:evaluation")
    assert ev.complete and ev.metrics["charged_to_candidate"] == ["write-json#2"]

    ctl2 = Controller(exp)
    ctl2.grid = grid
    sick = {"hello-file": [True, True], "write-json": [False, None]}  # the incumbent is ⊥ there too
    for _ in range(4):
        out = asyncio.run(ctl2.evaluate(1, "d", "d00d", exp.harness_dir, sick, "v0"))
        assert not out.complete and not ctl2.led.done("d00d:evaluation")
