"""The arm stage's attempt loop (evolve/round/control_arm.py) against grids with hand-made token counts: the controller
around it is a double whose grids are made of ``TrialResult`` objects, so every number can be checked by hand.

The world: the incumbent (2 tasks × r = 2 at N = 1) takes 5 steps a trial, 1000 prompt and 100 output tokens a
step: 5500 a trial. Its verifier's context is really 500 tokens (the model's prior says 1000, the generator's
prompt), an action 100, the answer 1: at N samples with c calls of a actions, a trial costs
5 × (1000 + 100 N + c (500 + 100 a + 1)). The candidate costs 12005 a trial.

- attempt 1: the prior predicts N = 2 listwise at 5 × (1000 + 200 + 1201) = 12005, exactly the target; the arm
  measures 5 × (1200 + 701) = 9505: ratio 0.7918, a miss;
- attempt 2: recalibrated on that grid (context 701 − 200 = 500), N = 2 pointwise predicts and measures
  5 × (1200 + 2 × 601) = 12010: ratio 1.0004, matched."""

from __future__ import annotations

from pathlib import Path

import pytest

import evolve.round.control_arm as arm_mod
from evolve.experiment.config import ExperimentConfig
from evolve.round.control_arm import ControlArmStage
from trials.agents import AgentSpec
from trials.harness_api import CostLedger, Usage
from trials.results import TrialResult
from validate.adoption import decide
from validate.control_arm import actions_per_call, verifier_calls
from validate.evaluate import GridPlan, outcome_of

TASKS = ["a", "b"]


def result(task: str, rep: int, passed: bool, n: int = 1, verifier: str = "listwise", gen_out: int = 100,
           infra: bool = False) -> TrialResult:
    calls = verifier_calls(verifier, n)
    cost = CostLedger(generator=Usage(calls=5, input_tokens=5000, output_tokens=5 * gen_out * n),
                      verifier=Usage(calls=5 * calls, input_tokens=5 * calls * (500 + 100 * actions_per_call(
                          verifier, n)), output_tokens=5 * calls))
    status = "infra" if infra else "passed" if passed else "failed"
    return TrialResult(trial_name=f"{task}__r{rep}", run_id=f"{task}{rep}{n}{verifier}", task_name=task,
                       repetition=rep, status=status, episodes=5, cost=cost)


def grid(passed: dict[str, list[bool]], **kw) -> dict[tuple[str, int], TrialResult]:
    return {(t, k + 1): result(t, k + 1, p, **kw) for t, outs in passed.items() for k, p in enumerate(outs)}


class FakeController:
    """What the stage uses of the controller: its grids come from ``arm_world``, nothing runs."""

    def __init__(self, root: Path, adoption: dict, arm_world):
        self.cfg = ExperimentConfig.model_validate({
            "name": "x", "endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "tasks": {"dir": str(root), "development": TASKS}, "r": 2,
            "adoption": {"policy": "paper", "control": "midharness", **adoption}})
        self.exp = type("Exp", (), {"root": root, "commit_of": staticmethod(lambda tag: "c0" * 20)})()
        self.led = type("Led", (), {"done": staticmethod(lambda key: False)})()
        self.baseline_dir = root / "versions" / "v0" / "reference"
        self.harness = root / "harness"
        (self.harness / "midharness").mkdir(parents=True)
        (self.harness / "midharness" / "verifiers.py").write_text("")
        (self.harness / "settings.toml").write_text('[midharness]\nn = 1\nverifier = "pairwise"\n')
        self.arm_world, self.ran, self.events = arm_world, [], []
        self.arm = ControlArmStage(self)

    def dev_tasks(self) -> list[str]:
        return list(TASKS)

    def version_dir(self, tag: str) -> Path:
        return self.harness

    def plan(self, purpose, harness, tasks, r, job_dir) -> GridPlan:
        agent = AgentSpec(kind="process", name="h", argv=["h"], harness_version="h-1")
        return GridPlan(purpose=purpose, agent=agent, tasks_dir=self.exp.root, task_names=tasks, r=r,
                        job_dir=job_dir, endpoint=None)

    async def grid(self, plan, commit, prefix, stop=None):
        mh = plan.settings["midharness"]
        self.ran.append((prefix, mh["n"], mh["verifier"]))
        return outcome_of(plan, self.arm_world(mh["n"], mh["verifier"]))

    def _evaluation_event(self, key, commit, out, purpose, **extra):
        self.events.append((key, purpose, extra))


INCUMBENT = grid({"a": [True, True], "b": [False, False]})
CANDIDATE = grid({"a": [True, True], "b": [True, True]}, gen_out=1401)  # 5 × (1000 + 1401) = 12005


@pytest.fixture
def baseline(monkeypatch):
    monkeypatch.setattr(arm_mod, "load_job", lambda job: (None, list(INCUMBENT.values()), None))


def _run(ctl, d):
    import asyncio

    plan = ctl.plan("evaluation", ctl.harness, TASKS, 2, ctl.exp.root / "eval")
    cand = outcome_of(plan, CANDIDATE)
    return asyncio.run(ctl.arm.control_arm(1, "v0", cand, d))


def _decision():
    base = {"a": [True, True], "b": [False, False]}
    return decide({"a": [True, True], "b": [True, True]}, base, TASKS, 2, "paper")


def test_a_miss_is_recorded_then_adjusted(tmp_path, baseline):
    ctl = FakeController(tmp_path, {}, lambda n, v: grid({"a": [True, True], "b": [False, True]}, n=n, verifier=v))
    d, rec = _run(ctl, _decision())
    assert [(n, v) for _, n, v in ctl.ran] == [(2, "listwise"), (2, "pointwise")]
    first, second = rec["attempts"]
    assert (first["predicted_tokens_per_trial"], first["measured_tokens_per_trial"]) == (12005.0, 9505.0)
    assert first["ratio"] == round(9505 / 12005, 4) and not first["matched"]
    assert (second["predicted_tokens_per_trial"], second["measured_tokens_per_trial"]) == (12010.0, 12010.0)
    assert second["matched"] and rec["matched"] and rec["ratio"] == round(12010 / 12005, 4)
    assert (rec["n"], rec["verifier"], rec["target_tokens_per_trial"], rec["incumbent_tokens_per_trial"]) == (
        2, "pointwise", 12005.0, 5500.0)
    assert rec["grid"] == "rounds/r01/control-arm/n2-pointwise"
    assert ctl.ran[1][0] == "c0" * 20 + ":control_arm:r01:n2-pointwise"
    assert [e[2]["tokens_per_trial"] for e in ctl.events] == [9505.0, 12010.0]
    assert first["model"]["ver_ctx"] == 1000 and second["model"]["ver_ctx"] == 500  # the prior, then measured
    # the arm passes 3 of 4, the candidate 4 of 4: it beats the arm too; the decision is unchanged
    assert rec["beats"] and rec["pass_at_1"] == 0.75 and d.adopt and "note" not in rec


def test_no_match_within_the_attempts_is_said(tmp_path, baseline):
    ctl = FakeController(tmp_path, {"control_attempts": 1}, lambda n, v: grid({"a": [True] * 2, "b": [True] * 2},
                                                                               n=n, verifier=v))
    d, rec = _run(ctl, _decision())
    assert len(ctl.ran) == 1 and not rec["matched"] and rec["ratio"] == round(9505 / 12005, 4)
    assert "no arm within 10%" in rec["note"] and "ratio 0.7918" in rec["note"]
    assert rec["beats"] is False and d.adopt  # reported only: the decision against the incumbent stands


def test_required_arm_not_beaten_rejects(tmp_path, baseline):
    ctl = FakeController(tmp_path, {"require_beat_control_arm": True},
                         lambda n, v: grid({"a": [True] * 2, "b": [True] * 2}, n=n, verifier=v))
    d, rec = _run(ctl, _decision())
    assert rec["matched"] and rec["beats"] is False and rec["required"]
    assert d.decided and not d.adopt and "not the compute-matched control arm (N = 2, pointwise)" in d.reason


def test_infra_in_the_arm_is_never_evidence(tmp_path, baseline):
    def world(n, v):
        cells = grid({"a": [True, True], "b": [False, False]}, n=n, verifier=v)
        cells[("b", 2)] = result("b", 2, False, n=n, verifier=v, infra=True)
        return cells

    ctl = FakeController(tmp_path, {}, world)
    d, rec = _run(ctl, _decision())
    assert len(ctl.ran) == 1 and not ctl.events  # an incomplete grid is no booked Evaluation
    assert rec["status"] == "incomplete" and "b#2" in rec["reason"] and d.adopt and d.decided
    ctl = FakeController(tmp_path / "req", {"require_beat_control_arm": True}, world)
    d, rec = _run(ctl, _decision())
    assert not d.decided and not d.adopt and "control arm incomplete" in d.reason  # blocked, not rejected


def test_an_arm_that_cannot_be_planned_is_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(arm_mod, "load_job", lambda job: (None, [], None))
    ctl = FakeController(tmp_path, {}, lambda n, v: {})
    d, rec = _run(ctl, _decision())
    assert rec["status"] == "not run" and "no trial" in rec["reason"] and d.adopt and not ctl.ran
