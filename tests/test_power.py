"""Power before the night (validate.power): exact small grids checked by hand, the simulation against the
enumeration, and the decision record.

The stratified test in these hand computations (validate/adoption_stats.py): per task with k passes among the
M = nc + nb runs of both grids, weight w = round(1 / (q (1 - q))), q = k / M (w = 0 when k = 0 or k = M); under the
null the candidate's passes X are hypergeometric (M, k, nc); p = P(sum of w (X - c) >= 0). Adopt when p <= α and
the candidate's Pass@1 is above the baseline's.
"""

from __future__ import annotations

import math

import pytest

from validate import power as pw
from validate.adoption import decide
from validate.adoption_sim import policy_note
from validate.power import Baseline, grid_power, perfect_probability, power_curve, smallest_raise


def test_two_tasks_failed_twice_in_the_corpus_adopt_only_a_perfect_candidate():
    """Reference corpus 0/2 and 0/2, r = 2, α 0.05. Enumerating the candidate's counts (c1, c2):
    - a task with c = 2: k = 2, M = 4, w = 4, P(X = 2) = C(2,2) / C(4,2) = 1/6; the term 4 (X - 2) is 0 only then;
    - a task with c = 1: k = 1, w = round(1 / (1/4 · 3/4)) = 5, P(X = 1) = 2/4 = 1/2;
    - a task with c = 0: w = 0, no term.
    So p(2,2) = 1/36 = 0.0278 (adopt), p(2,1) = 1/12, p(1,1) = 1/4, p(2,0) = 1/6, ... (reject): only (2,2) adopts.
    With candidate rate q per task, P(adopt) = q^4. The incumbent's rates are the observed 0: false adoption
    0^4 = 0; power at +0.15 = 0.15^4 = 0.00050625; power 0.8 first at q^4 >= 0.8, q >= 0.8^(1/4) = 0.9457, so
    +0.95 on the 0.01 grid (0.94^4 = 0.7807, 0.95^4 = 0.8145)."""
    base = Baseline((0.0, 0.0), counts=(0, 0), runs=(2, 2))
    curve = power_curve(base, 2, "stratified", 0.05, gain=0.15)
    assert curve.method == "exact over 9 grid outcomes"
    assert curve.false_adoption == 0.0
    assert curve.power == pytest.approx(0.15 ** 4, abs=1e-12)
    assert curve.detectable_gain == 0.95
    assert curve.perfect == 1.0
    account = grid_power(["a", "b"], 2, "stratified", 0.05, base, "test corpus")
    assert account.adoptable and account.perfect_p == pytest.approx(1 / 36)
    assert account.raise_r is None and "CANNOT" not in account.line()


def test_the_morning_corpus_cannot_adopt_a_perfect_candidate():
    """Issue 28's grid: corpus 1/2, 1/2, 1/2, 2/2, r = 2. A perfect candidate (2/2 each): on a 1/2 task k = 3,
    M = 4, w = round(1 / (3/4 · 1/4)) = 5, P(X = 2) = C(3,2) C(1,0) / C(4,2) = 3/6; on the 2/2 task k = 4 = M,
    w = 0. p = (1/2)^3 = 0.125 > 0.05: never adopted, so no smaller candidate is either: power 0 at every gain."""
    base = Baseline((0.5, 0.5, 0.5, 1.0), counts=(1, 1, 1, 2), runs=(2, 2, 2, 2))
    account = grid_power(["count-lines", "hello-file", "project-skeleton", "write-json"], 2, "stratified", 0.05,
                         base, "reference corpus of v0")
    assert account.perfect == 0.0 and account.perfect_p == pytest.approx(0.125)
    assert account.power == 0.0 and account.detectable_gain is None and not account.adoptable
    line = account.line()
    assert "a perfect candidate CANNOT be adopted (p = 0.125)" in line and "raise r to" in line


def test_the_morning_rates_as_a_prior_adopt_a_perfect_candidate_a_third_of_the_time():
    """The same rates as a prior: the corpus is drawn too. Per 0.5 task the corpus gives b = 0 (1/4): k = 2, w = 4,
    P(X = 2) = 1/6; b = 1 (1/2): P(X = 2) = 1/2; b = 2 (1/4): w = 0, factor 1; the 1.0 task is always 2/2, factor 1.
    A perfect candidate's p is the product of the three factors; p <= 0.05 needs two factors 1/6 (1/36), or one
    1/6 and two 1/2 (1/24); one 1/6 and a 1/2 (1/12) or three 1/2 (1/8) are too large.
    P(at least two b = 0) = 3 (1/4)^2 (3/4) + (1/4)^3 = 10/64; P(one b = 0, two b = 1) = 3 (1/4)(1/2)^2 = 12/64;
    so 22/64 = 0.34375 < 0.8: the grid cannot adopt a perfect candidate reliably."""
    base = Baseline((0.5, 0.5, 0.5, 1.0))
    assert perfect_probability(base, 2, "stratified", 0.05) == pytest.approx(22 / 64, abs=1e-12)


def test_the_smallest_number_of_tasks_at_the_same_rates_is_seven():
    """Tasks added at the same rates (0.5, 0.5, 0.5, 1.0 repeated). With m tasks at 0.5, let a tasks draw b = 0
    (probability 1/4 each) and s draw b = 1 (1/2): p = 6^-a 2^-s <= 1/20 needs a >= 2; or a = 1, s >= 2
    (ln 20 - ln 6 = 1.20 > ln 2); or a = 0, s >= 5 (ln 20 / ln 2 = 4.32). Given a task is not b = 0, it is b = 1
    with probability 2/3.
    - 6 tasks (5 at 0.5): P(a >= 2) = 1 - (3/4)^5 - 5 (1/4)(3/4)^4 = 0.36719; P(a = 1, s >= 2) =
      5 (1/4)(3/4)^4 · (1 - (1/3)^4 - 4 (2/3)(1/3)^3) = 0.39551 · 0.88889 = 0.35156; P(a = 0, s = 5) =
      (3/4)^5 (2/3)^5 = 0.03125; total 0.75 < 0.8.
    - 7 tasks (6 at 0.5): P(a >= 2) = 1 - (3/4)^6 - 6 (1/4)(3/4)^5 = 0.46606; P(a = 1, s >= 2) = 6 (1/4)(3/4)^5 ·
      (1 - (1/3)^5 - 5 (2/3)(1/3)^4) = 0.33985; P(a = 0, s >= 5) = (3/4)^6 (6 (2/3)^5 (1/3) + (2/3)^6) = 0.06250;
      total 0.86841 >= 0.8."""
    rates = (0.5, 0.5, 0.5, 1.0)
    six = perfect_probability(Baseline(pw.cycle_rates(rates, 6)), 2, "stratified", 0.05)
    seven = perfect_probability(Baseline(pw.cycle_rates(rates, 7)), 2, "stratified", 0.05)
    assert six == pytest.approx(0.75, abs=1e-4) and seven == pytest.approx(0.86841, abs=1e-4)
    r_up, n_up = smallest_raise(rates, 2, "stratified", 0.05)
    assert n_up == 7
    assert perfect_probability(Baseline(rates), r_up, "stratified", 0.05) >= pw.POWER
    assert perfect_probability(Baseline(rates), r_up - 1, "stratified", 0.05) < pw.POWER


def test_one_run_each_both_drawn_at_alpha_one_half():
    """One task, r = 1, prior 0.5, α 0.5. Adoption needs c = 1 > b = 0: then k = 1, M = 2, w = 4, P(X = 1) = 1/2,
    p = 0.5 <= 0.5: adopt. So P(adopt) = q · 1/2 for candidate rate q: false adoption 0.25, power at +0.3 = 0.4,
    a perfect candidate 0.5, and no gain reaches 0.8."""
    curve = power_curve(Baseline((0.5,)), 1, "stratified", 0.5, gain=0.3)
    assert curve.method == "exact over 4 grid outcomes"
    assert (curve.false_adoption, curve.power, curve.perfect) == pytest.approx((0.25, 0.4, 0.5))
    assert curve.detectable_gain is None
    paper = power_curve(Baseline((0.5,)), 1, "paper", 0.5, gain=0.3)  # paper adopts on c > b alone: the same
    assert (paper.false_adoption, paper.power) == pytest.approx((0.25, 0.4))


def test_the_simulation_agrees_with_the_enumeration(monkeypatch):
    base = Baseline((0.25, 0.5, 0.75), counts=(1, 2, 3), runs=(4, 4, 4))
    exact = power_curve(base, 4, "stratified", 0.05, gain=0.3)
    monkeypatch.setattr(pw, "EXACT_LIMIT", 10)
    sim = power_curve(base, 4, "stratified", 0.05, gain=0.3)
    assert exact.method.startswith("exact") and sim.method.startswith("simulated")
    se = math.sqrt(0.25 / pw.SIMS)  # at most 0.0079 per estimate
    assert abs(sim.power - exact.power) < 4 * se and abs(sim.false_adoption - exact.false_adoption) < 4 * se
    assert exact.detectable_gain is not None and abs(sim.detectable_gain - exact.detectable_gain) <= 0.03


def test_a_decision_records_its_power_beside_its_false_adoption():
    """The first grid above, through decide(): the perfect candidate is adopted with p = 1/36, and the decision
    records power 0.15^4 at +0.15 and +0.95 for power 0.8, in its fields and in its reason."""
    base = {"a": [False, False], "b": [False, False]}
    cand = {"a": [True, True], "b": [True, True]}
    d = decide(cand, base, ["a", "b"], 2, power_gain=0.15)
    assert d.adopt and d.p_value == pytest.approx(1 / 36)
    assert d.power == pytest.approx(0.15 ** 4) and d.power_gain == 0.15 and d.detectable_gain == 0.95
    assert d.false_adoption is not None and "power 0.1% at +0.15 against this baseline, 80% at +0.95" in d.reason
    assert decide(cand, base, ["a", "b"], 2).power is None  # not asked for: nothing computed
    old = {"policy": "stratified", "alpha": 0.05, "false_adoption": 0.01, "n_tasks": 2, "r": 2}
    assert "power" not in policy_note(old, "stratified", 0.05, 2, 2)  # an older record reads as before


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown adoption policy"):
        power_curve(Baseline((0.5,)), 2, "bayes", 0.05)
    with pytest.raises(ValueError, match="2 tasks but 1 rates"):
        grid_power(["a", "b"], 2, "stratified", 0.05, Baseline((0.5,)), "x")
