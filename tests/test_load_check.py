"""The load check of a decision (validate.load_check) and the lockstep of two arms (validate.interleave)."""

from __future__ import annotations

import asyncio

from trials.endpoints.timings import InferenceSummary
from trials.load import MachineLoad
from trials.results import TrialResult
from validate.interleave import Lockstep
from validate.load_check import MAX_LOAD_GAP, blocks_side_by_side, check_load, load_lines


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
        # paired arms: the load gap is a reason, the decode speeds (8 vs 20 tok/s) only a note
        assert d.adopt is adopted and not load.comparable and len(load.reasons) == 1 and load.paired
        assert "mean load per CPU" in load.reasons[0] and "decode speed" in load.notes[0]
        assert ("not comparable, the arms ran under different load" in d.reason) is not adopted


def _timed(k: int, start: int, end: int, tok_s: float, task: str = "t") -> TrialResult:
    res = _trial(k, 0.5, tok_s).model_copy(update={"task_name": task, "trial_name": f"{task}__r{k}"})
    return res.model_copy(update={"started_at": f"2026-12-07T14:00:{start:02d}+00:00",
                                  "finished_at": f"2026-12-07T14:{end // 60:02d}:{end % 60:02d}+00:00"})


def test_paired_arms_are_judged_by_their_blocks_overlap_not_by_their_speeds():
    """In lockstep the shorter trial leaves the server to its partner: a candidate that ends every block first
    decodes slower on average than the incumbent it ran beside. Unpaired, that speed gap refuses; paired, it is a
    note, and so is a block that did not run side by side."""
    cand = [_timed(k, 0, 50, 4.0) for k in (1, 2, 3)]  # ends first in every block
    inc = [_timed(k, 0, 300, 7.0) for k in (1, 2, 3)]
    unpaired = check_load(cand, inc, "refuse")
    assert not unpaired.comparable and "decode speed" in unpaired.reasons[0]
    paired = check_load(cand, inc, "refuse", paired=True)
    assert paired.comparable and paired.blocks == 3 and paired.side_by_side == 3 and "decode speed" in paired.notes[0]
    lines = load_lines(paired.model_dump())
    assert "paired arms: 3 of 3 blocks ran side by side" in lines[1] and lines[-1] == "load: comparable"
    # one arm's cells run alone (a resume that finished them later): not side by side, refused
    apart = [_timed(k, 0, 50, 4.0) for k in (1, 2)] + [_timed(3, 0, 50, 4.0).model_copy(
        update={"started_at": "2026-12-07T15:00:00+00:00", "finished_at": "2026-12-07T15:00:50+00:00"})]
    late = check_load(apart, inc, "refuse", paired=True)  # noted, not refused (validate.load_check's doc)
    assert late.comparable and late.side_by_side == 2 and "only 2 of 3 blocks ran side by side" in late.notes[-1]


def test_side_by_side_skips_blocks_without_times_or_with_infra():
    cand = [_timed(1, 0, 60, 5.0), _trial(2, 0.5, 5.0), _timed(3, 0, 60, 5.0).model_copy(update={
        "status": "infra", "infra_cause": "sandbox"})]
    inc = [_timed(k, 30, 90, 5.0) for k in (1, 2, 3)]
    assert blocks_side_by_side(cand, inc) == (1, 0)  # block 1 overlapped 30 of 60 s, under 90 %
    assert blocks_side_by_side([_timed(1, 0, 60, 5.0)], [_timed(1, 3, 60, 5.0)]) == (1, 1)
