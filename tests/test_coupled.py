"""The paired test on coupled pairs (validate/coupled.py, policy "coupled"): exact size at most alpha whatever the
number of discordant pairs, nothing adopted between identical arms, a real gain found, a load shift shared by
interleaved arms cancelled while the reference corpus is fooled by it, and the decision plumbing (config, reason,
power, curtailment)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.stats import binom

from evolve.experiment.config import AdoptionPolicy
from validate.adoption import decide
from validate.adoption_sim import adoption_rate, rate_basis
from validate.adoption_stats import decide_many
from validate.coupled import (
    agreement_lines,
    coupled_p_many,
    coupling_estimate,
    coupling_of,
    discordant,
    draw_cells,
    pair_counts,
    pair_rows,
    pair_totals,
)
from validate.coupled_sim import DESIGNS, night_false_adoption, power_by_r, trials_needed
from validate.power import Baseline, grid_power

TASKS = ["a", "b", "c"]
DESIGN = {d.name: d for d in DESIGNS}
INTERLEAVED = DESIGN["interleaved, coupled"]
REFERENCE = DESIGN["reference corpus, stratified (today's default)"]


def test_discordant_pairs_and_p_value_by_hand():
    cand = {"a": [True, True, False, None], "b": [True, False, True, True], "c": [False] * 4}
    base = {"a": [False, True, True, False], "b": [False, False, False, True], "c": [True, False, False, False]}
    assert discordant(cand, base, TASKS, 4) == ([1, 2, 0], [1, 0, 1])  # ⊥ (a#4) counts as not passed
    p = coupled_p_many(np.array([[1, 2, 0]]), np.array([[1, 0, 1]]))[0]
    assert p == pytest.approx(binom.sf(2, 5, 0.5))  # P(Bin(5, 1/2) >= 3) = 1/2
    assert coupled_p_many(np.array([[5, 0]]), np.array([[0, 0]]))[0] == pytest.approx(1 / 32)
    assert coupled_p_many(np.array([[0]]), np.array([[0]]))[0] == 1.0  # no discordant pair: no evidence


def test_exact_size_is_at_most_alpha_for_every_number_of_discordant_pairs():
    """Given D discordant pairs the null puts N10 at most Binomial(D, 1/2): summing the exact probability of every
    N10 whose p-value is <= alpha bounds the test's size, whatever the tasks' rates and the arms' agreement."""
    for alpha in (0.05, 0.0125):
        for d in range(120):
            wins = np.arange(d + 1)
            p = coupled_p_many(wins[:, None], (d - wins)[:, None])
            assert binom.pmf(wins, d, 0.5)[p <= alpha].sum() <= alpha + 1e-12, (alpha, d)


def test_null_false_adoption_at_high_agreement_and_independent_arms_is_at_most_alpha():
    for agree in (0.95, 0.5):
        for model in ("half", "beta"):
            rate = night_false_adoption(INTERLEAVED, 4, 34, 1, 0.05, agree, 0.0, 3000, seed=1, model=model)
            assert rate <= 0.05, (agree, model, rate)
    assert adoption_rate("coupled", 20, 4, 0.05, 0.0, 3000, seed=2) <= 0.05  # the recorded figure's model


def test_identical_arms_in_full_agreement_adopt_nothing():
    rng = np.random.default_rng(0)
    p = rng.beta(0.7, 0.7, size=(500, 4))
    cand, inc = draw_cells([p, p], 34, coupling_of(1.0), rng)
    assert (cand == inc).all()
    c, b, n10, n01 = pair_counts(cand, inc)
    assert not decide_many(c, [34] * 4, b, [34] * 4, "coupled", 0.5, (n10, n01))[0].any()
    assert night_false_adoption(INTERLEAVED, 4, 34, 4, 0.05, 1.0, 0.05, 500, seed=3) == 0.0
    same = {"a": [True, False] * 5, "b": [True] * 10, "c": [False] * 10}
    d = decide(same, same, TASKS, 10, policy="coupled")
    assert d.decided and not d.adopt and d.p_value == 1.0


def test_a_real_gain_of_0_3_is_adopted_with_high_probability():
    for agree in (0.5, 0.85):
        power = power_by_r("coupled", [0.3, 0.5, 0.4, 0.6], [20], 0.3, agree, 0.05, 2000, seed=4)[20]
        assert power >= 0.95, (agree, power)


def test_agreement_sharpens_the_test_and_lowers_the_trials_needed():
    rates = [0.375, 0.667, 0.5, 0.3]
    low = power_by_r("coupled", rates, [34], 0.15, 0.5, 0.05, 2000, seed=5)[34]
    high = power_by_r("coupled", rates, [34], 0.15, 0.95, 0.05, 2000, seed=5)[34]
    assert high > low + 0.1
    r_low = trials_needed(rates, 0.8, 0.15, 0.5, 0.05, 2000, 5, 68)
    r_high = trials_needed(rates, 0.8, 0.15, 0.95, 0.05, 2000, 5, 68)
    assert r_low is not None and r_high is not None and r_high < r_low


def test_a_load_shift_fools_the_reference_corpus_not_the_interleaved_pairs():
    """+0.05 for the candidate's trials only (the corpus ran under another load) against +0.05 on both arms of
    every block (interleaved): the shift cancels only where both arms share it."""
    for m in (1, 4):
        ref = night_false_adoption(REFERENCE, 4, 34, m, 0.05, 0.5, 0.05, 2000, seed=6)
        inter = night_false_adoption(INTERLEAVED, 4, 34, m, 0.05, 0.5, 0.05, 2000, seed=6)
        assert ref > 0.15 and inter <= 0.05, (m, ref, inter)


def test_pairs_decide_where_counts_alone_do_not():
    """Task a: the candidate passes every pair the incumbent passes and five more. Counts 15 vs 10 of 20 are not
    enough for the unpaired rule at alpha 0.05 (p 0.095); five discordant pairs all one way are (p = 1/32). Tasks
    b (always passed) and c (never) say nothing to either."""
    base = {"a": [True] * 10 + [False] * 10, "b": [True] * 20, "c": [False] * 20}
    cand = {"a": [True] * 15 + [False] * 5, "b": [True] * 20, "c": [False] * 20}
    coupled = decide(cand, base, TASKS, 20, policy="coupled")
    assert coupled.adopt and coupled.p_value == pytest.approx(1 / 32)
    assert "discordant pairs) 5 vs 0" in coupled.reason
    stratified = decide(cand, base, TASKS, 20, policy="stratified")
    assert not stratified.adopt and stratified.p_value > 0.05
    assert coupled.false_adoption_basis == rate_basis(3, 20, "coupled")
    assert "cells independent" in coupled.false_adoption_basis


def test_the_rule_needs_the_pairs():
    with pytest.raises(ValueError, match="decides on pairs"):
        decide_many(np.array([[1]]), [1], np.array([[0]]), [1], "coupled", 0.05)


def test_config_takes_coupled_only_with_interleaved_arms():
    assert AdoptionPolicy(policy="coupled").baseline == "interleaved"
    with pytest.raises(ValidationError, match="needs adoption.baseline = 'interleaved'"):
        AdoptionPolicy(policy="coupled", baseline="reference")


def test_power_before_the_night_for_the_coupled_policy():
    base = Baseline((0.5, 1.0, 8 / 34, 8 / 34), (17, 34, 8, 8), (34,) * 4)
    out = grid_power(["a", "b", "c", "d"], 34, "coupled", 0.05, base, "corpus")
    assert out.adoptable and out.perfect_p == pytest.approx(0.5 ** 69)  # 17 + 0 + 26 + 26 wins, no loss
    assert 0.5 < out.power < 1 and out.false_adoption <= 0.05 and "simulated" in out.method


def test_coupling_estimate_recovers_the_models_rho_from_simulated_pairs():
    """ρ̂ from measured pairs (``rise pair``'s table) is the model's ρ: drawn at ρ 0, 0.4 and 0.8 over tasks of
    different pass rates, it comes back within 0.03; full agreement at a task with room is 1; no room: None."""
    rng = np.random.default_rng(5)
    rates = np.array([[0.2, 0.5, 0.7, 0.9]])
    for rho in (0.0, 0.4, 0.8):
        cand, inc = draw_cells([np.repeat(rates, 1, axis=0)] * 2, 20000, rho, rng)
        rows = [(20000, int((cand[0, t] == inc[0, t]).sum()), int(cand[0, t].sum() + inc[0, t].sum()))
                for t in range(4)]
        assert coupling_estimate(rows) == pytest.approx(rho, abs=0.03), rho
    assert coupling_estimate([(8, 8, 8)]) == 1.0  # 4 pairs both passed, 4 both failed
    assert coupling_estimate([(8, 8, 0), (8, 8, 16)]) is None  # never / always solved: agreement says nothing
    assert coupling_estimate([(8, 0, 8)]) == 0.0  # every pair discordant: less than chance, clipped
    assert coupling_estimate([(8, 0, 8)], clip=False) == pytest.approx(-1.0)  # as measured: c = 0.5, 0 of 8 agree
    # the json-schema comparison's pairs (2026-12-07): fewer agreements than chance; the record keeps both
    rows = [{"task": t, "pairs": 4, "agree": a, "both_pass": b, "n10": n10, "n01": n01}
            for t, a, b, n10, n01 in (("count-lines", 2, 2, 1, 1), ("hello-file", 1, 1, 1, 2),
                                      ("project-skeleton", 2, 1, 0, 2), ("write-json", 2, 1, 2, 0))]
    tot = pair_totals(rows)
    assert tot["coupling"] == 0.0 and tot["coupling_unclipped"] == pytest.approx(-0.22, abs=0.005)
    assert "(unclipped -0.22)" in agreement_lines({"all": {**tot}, "tasks": rows})[0]
    assert coupling_estimate([]) is None


def test_pair_rows_and_totals_count_the_pairs_of_two_grids_and_skip_infra():
    cand = {"a": [True, False, True, None], "b": [False, False]}
    inc = {"a": [True, True, False, True], "b": [False, True]}
    rows = pair_rows(cand, inc, ["a", "b"], 4)
    assert rows[0] == {"task": "a", "pairs": 3, "agree": 1, "both_pass": 1, "n10": 1, "n01": 1}
    assert rows[1] == {"task": "b", "pairs": 2, "agree": 1, "both_pass": 0, "n10": 0, "n01": 1}
    tot = pair_totals(rows)
    assert (tot["pairs"], tot["agree"], tot["agreement"]) == (5, 2, 0.4) and tot["coupling"] == 0.0
    (line,) = agreement_lines({"tasks": rows, "all": tot})
    assert "agreement 2/5 = 0.400 (a 1/3, b 1/2); coupling ρ̂ 0.00" in line
    assert agreement_lines(None) == [] and agreement_lines({"tasks": [], "all": {"pairs": 0}}) == []
