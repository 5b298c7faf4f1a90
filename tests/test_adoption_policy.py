"""The default adoption policy adopts a no-better candidate at most 5% of the time (measured), finds a real gain
more often than the sign test, states its policy and measured rate with every decision, and curtails soundly."""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict

import numpy as np
import pytest

from evolve.experiment.config import AdoptionPolicy
from validate.adoption import DEFAULT_POLICY, decide
from validate.adoption_sim import adoption_rate, draw_counts, false_adoption_rate, policy_note
from validate.adoption_stats import decide_many, stratified_p_many, stratified_p_range


def _null_grids(n_grids: int, n_tasks: int, r: int, seed: int):
    """Grids where the candidate is exactly as good as the baseline (task pass rates ~ Beta(0.7, 0.7), the
    model of benchmarks/sequential_stopping.py), from the standard library's RNG, independent of numpy's."""
    rng = random.Random(seed)
    tasks = [f"t{i}" for i in range(n_tasks)]
    for _ in range(n_grids):
        rates = [rng.betavariate(0.7, 0.7) for _ in tasks]
        base = {t: [rng.random() < p for _ in range(r)] for t, p in zip(tasks, rates)}
        cand = {t: [rng.random() < p for _ in range(r)] for t, p in zip(tasks, rates)}
        yield tasks, cand, base


def test_default_decide_rarely_adopts_a_no_better_candidate():
    """Through the public decide() with its default policy, 20 tasks × r=4: the default `paper` adopted ~47%."""
    adopted = sum(decide(cand, base, tasks, 4).adopt for tasks, cand, base in _null_grids(500, 20, 4, seed=11))
    assert adopted / 500 <= 0.05, f"default policy adopted {adopted} of 500 no-better candidates"


def test_measured_false_adoption_and_power_of_the_default():
    assert AdoptionPolicy().policy == DEFAULT_POLICY == "stratified"
    assert false_adoption_rate(DEFAULT_POLICY, 20, 4) <= 0.05
    power = adoption_rate(DEFAULT_POLICY, 20, 4, 0.05, 0.15, 2000, seed=5)
    sign = adoption_rate("paired", 20, 4, 0.05, 0.15, 2000, seed=5)
    assert power >= 0.65 and power > sign + 0.08, (power, sign)
    assert false_adoption_rate("paper", 20, 4) > 0.4  # kept, for reproducing the published method


def test_decision_states_policy_and_measured_rate():
    tasks = [f"t{i}" for i in range(6)]
    base = {t: [False] * 4 for t in tasks}
    cand = {t: [True, False, False, False] for t in tasks}
    d = decide(cand, base, tasks, 4)
    rate = false_adoption_rate(DEFAULT_POLICY, 6, 4, 0.05)
    assert d.adopt and d.policy == DEFAULT_POLICY and d.false_adoption == rate and (d.n_tasks, d.r) == (6, 4)
    record = asdict(d)  # what the controller writes into the ledger's Adoption / Rejection
    assert record["policy"] == "stratified" and record["false_adoption"] == rate and record["alpha"] == 0.05
    note = policy_note(record, "paper", 0.5, 99, 9)  # the record's own figures win over the fallbacks
    assert note == f"policy stratified at α 0.05: measured false adoption {rate:.1%} at 6 tasks × r=4"
    assert note in d.reason
    paper = decide(cand, base, tasks, 4, policy="paper")
    assert paper.alpha is None and f"policy paper: measured false adoption {paper.false_adoption:.1%}" in paper.reason


def test_old_records_get_the_rate_measured_now():
    note = policy_note({"adopt": True, "reason": "adopt — paper: …"}, "paper", 0.05, 20, 4)
    assert note.startswith(f"policy paper: measured false adoption {false_adoption_rate('paper', 20, 4):.1%}")
    assert "measured now" in note
    assert "unknown" in policy_note({}, "paired", 0.05, 0, 4)


def test_unknown_policy_is_named():
    with pytest.raises(ValueError, match="unknown adoption policy 'bayes'"):
        decide({"a": [True]}, {"a": [False]}, ["a"], 1, policy="bayes")


def test_batch_and_single_grid_p_values_agree():
    rng = np.random.default_rng(3)
    cand, base = draw_counts(7, 3, 0.1, 200, rng)
    many = stratified_p_many(cand, [3] * 7, base, [3] * 7)
    one = [stratified_p_range([(c, c, 3, b, 3) for c, b in zip(cr, br)]) for cr, br in zip(cand, base)]
    assert all(lo == hi for lo, hi in one)
    assert np.allclose(many, [lo for lo, _ in one], rtol=0, atol=1e-12)
    adopt, _ = decide_many(cand, [3] * 7, base, [3] * 7, "stratified", 0.05)
    grids = [({f"t{i}": [k < c for k in range(3)] for i, c in enumerate(cr)},
              {f"t{i}": [k < b for k in range(3)] for i, b in enumerate(br)}) for cr, br in zip(cand, base)]
    tasks = [f"t{i}" for i in range(7)]
    assert [decide(c, b, tasks, 3).adopt for c, b in grids] == adopt.tolist()


@pytest.mark.parametrize(("n_tasks", "r", "seed"), [(3, 2, 1), (2, 3, 2), (3, 2, 3)])
def test_stratified_curtailment_never_changes_the_decision(n_tasks, r, seed):
    """Exhaustive over every candidate grid and every wave-order prefix of it, against a random baseline: when
    curtailment decides early, every completion of the grid reaches that decision. (The weighted statistic is
    not monotone in one cell, so the two extreme completions would not prove it.)"""
    rng = random.Random(seed)
    tasks = [f"t{i}" for i in range(n_tasks)]
    base = {t: [rng.random() < 0.5 for _ in range(r)] for t in tasks}
    order = [(t, k) for k in range(r) for t in tasks]
    final = {}
    for bits in itertools.product([True, False], repeat=len(order)):
        full = {t: [bits[order.index((t, k))] for k in range(r)] for t in tasks}
        final[bits] = decide(full, base, tasks, r).adopt
    early = 0
    for cut in range(len(order)):
        for prefix in itertools.product([True, False], repeat=cut):
            partial = {t: [] for t in tasks}
            for (t, _k), v in zip(order, prefix):
                partial[t].append(v)
            d = decide(partial, base, tasks, r, curtail=True)
            if d.decided:
                early += 1
                assert {final[b] for b in final if b[:cut] == prefix} == {d.adopt}, (base, partial)
    assert early  # the check ran on some early decisions
