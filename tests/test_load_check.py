"""The load check of a decision (validate.load_check) and the lockstep of two arms (validate.interleave)."""

from __future__ import annotations

import asyncio

from trials.endpoints.timings import InferenceSummary
from trials.load import MachineLoad
from trials.results import TrialResult
from validate.interleave import Lockstep
from validate.load_check import MAX_LOAD_GAP, check_load, load_lines


def _trial(k: int, load: float | None, tok_s: float | None, status: str = "passed") -> TrialResult:
    return TrialResult(trial_name=f"t__r{k}", run_id=f"run{k}", task_name="t", repetition=k, status=status,
                       failure_class=None if status != "failed" else "incorrect",
                       infra_cause="sandbox" if status == "infra" else None,
                       machine_load=None if load is None else MachineLoad(cpus=2, loadavg_end=[2 * load, 0, 0],
                                                                          busy=min(load, 1.0)),
                       inference=None if tok_s is None else InferenceSummary(decode_sec=10.0,
                                                                             split_predicted_n=int(10 * tok_s)))


def test_same_load_is_comparable_and_a_gap_is_not():
    same = check_load([_trial(1, 0.5, 20), _trial(2, 0.7, 22)], [_trial(1, 0.6, 21)], "refuse")
    assert same.comparable and not same.refused and same.candidate.load_per_cpu == 0.6
    busy = check_load([_trial(1, 0.5, 20)], [_trial(1, 0.5 + MAX_LOAD_GAP + 0.1, 20)], "refuse")
    assert not busy.comparable and busy.refused and "mean load per CPU" in busy.reasons[0]
    slow = check_load([_trial(1, 0.5, 30)], [_trial(1, 0.5, 20)], "flag")
    assert not slow.comparable and not slow.refused and "decode speed" in slow.reasons[0]
    assert "flagged" in load_lines(slow.model_dump())[-1] and "refused" in load_lines(busy.model_dump())[-1]


def test_missing_measures_and_infra_trials_are_not_compared():
    check = check_load([_trial(1, None, None), _trial(2, 3.0, 5, "infra")], [_trial(1, 0.2, 20)], "refuse")
    assert check.comparable and check.candidate.trials == 1 and check.candidate.load_per_cpu is None
    assert "—" in load_lines(check.model_dump())[0]


def test_lockstep_starts_each_cell_in_both_arms_before_either_moves_on():
    cells = [("a", 1), ("a", 2), ("b", 1)]

    async def arm(step: Lockstep, i: int, delay: float, order: list) -> None:
        gate = step.gate(i)
        for cell in cells:
            await gate(cell)
            order.append((i, cell))
            await asyncio.sleep(delay)
        step.finished(i)

    async def main() -> list:
        step, order = Lockstep([set(cells), set(cells[1:])]), []  # arm 1 finished ("a", 1) before: resumed
        await asyncio.gather(arm(step, 0, 0.0, order), arm(step, 1, 0.05, order))
        return order

    order = asyncio.run(main())
    # the fast arm never runs ahead: it waits at each cell the slow arm still has to run
    starts = [c for _, c in order]
    assert starts.index(("a", 2)) < starts.index(("b", 1)) and order.count((0, ("b", 1))) == 1
    fast_b = order.index((0, ("b", 1)))
    assert order.index((1, ("a", 2))) < fast_b


def test_a_refused_check_turns_an_adoption_into_a_rejection_and_a_flag_does_not():
    from types import SimpleNamespace

    from evolve.experiment.config import AdoptionPolicy
    from evolve.round.interleave import InterleavedStage
    from validate.adoption import Decision

    busy = SimpleNamespace(results={("t", 1): _trial(1, 2.5, 8)})
    idle = SimpleNamespace(results={("t", 1): _trial(1, 0.3, 20)})
    for policy, adopted in ((AdoptionPolicy(), False), (AdoptionPolicy(load_check="flag"), True)):
        stage = InterleavedStage(SimpleNamespace(cfg=SimpleNamespace(adoption=policy), baseline_dir=None))
        stage.arms["x"] = busy  # the incumbent arm ran on a busy machine, the candidate on an idle one
        d, load = stage.check("x", idle, Decision(adopt=True, decided=True, reason="better"))
        assert d.adopt is adopted and not load.comparable and len(load.reasons) == 2
        assert ("not comparable, the arms ran under different load" in d.reason) is not adopted
