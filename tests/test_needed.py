"""What a rejected candidate would have needed (validate.needed): the greedy count of more passes that adopt,
checked against the decision rule itself and, on small grids, against every way of adding passes."""

from __future__ import annotations

import itertools

from validate.adoption_stats import decide_counts
from validate.needed import passes_needed


def grid(counts, r):
    return {t: [True] * p + [False] * (r - p) for t, p in counts.items()}


def test_paper_needs_the_first_count_above_the_baseline():
    n = passes_needed(grid({"a": 2, "b": 3}, 4), grid({"a": 3, "b": 3}, 4), ["a", "b"], "paper", 0.05)
    assert (n.passes, n.runs, n.more) == (5, 8, 2)  # 7 of 8 is the first Pass@1 above 6 of 8
    assert "adoption under paper needed 2 more (Pass@1 0.875 against the baseline's 0.750" in n.line("paper")


def test_nothing_adopts_against_a_baseline_that_always_passed():
    n = passes_needed(grid({"a": 1}, 4), grid({"a": 4}, 4), ["a"], "stratified", 0.05)
    assert n.more is None and "not even every run passing would have been adopted" in n.line("stratified")
    assert passes_needed(grid({"a": 1}, 4), grid({"a": 2}, 4), ["a"], "coupled", 0.05) is None


def test_stratified_greedy_adopts_and_is_never_below_the_true_fewest():
    tasks = ["a", "b", "c"]
    r = 6
    for cand, base in (({"a": 2, "b": 1, "c": 3}, {"a": 2, "b": 2, "c": 3}),
                       ({"a": 0, "b": 0, "c": 1}, {"a": 1, "b": 0, "c": 2}),
                       ({"a": 3, "b": 2, "c": 2}, {"a": 3, "b": 2, "c": 2})):
        n = passes_needed(grid(cand, r), grid(base, r), tasks, "stratified", 0.05)
        assert n is not None and n.more is not None
        after = [cand[t] + n.added[t] for t in tasks]
        assert sum(n.added.values()) == n.more
        assert decide_counts(after, [r] * 3, [base[t] for t in tasks], [r] * 3, "stratified", 0.05)[0]
        fewest = min(sum(add) for add in itertools.product(*[range(r - cand[t] + 1) for t in tasks])
                     if decide_counts([cand[t] + k for t, k in zip(tasks, add)], [r] * 3,
                                      [base[t] for t in tasks], [r] * 3, "stratified", 0.05)[0])
        assert fewest <= n.more <= fewest + 1, (cand, base, fewest, n.more)
