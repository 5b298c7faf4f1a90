"""Adoption policies, ⊥ handling and curtailment (validate/adoption.py)."""

import itertools

from validate.adoption import decide, sign_test_p, stable_pass_regressions

TASKS = ["a", "b", "c"]
BASE = {"a": [True] * 4, "b": [False] * 4, "c": [True, False, True, False]}


def test_paper_policy_adopts_only_strictly_above():
    better = {"a": [True] * 4, "b": [True, False, False, False], "c": [True, False, True, False]}
    same = {t: list(v) for t, v in BASE.items()}
    assert decide(better, BASE, TASKS, 4, policy="paper").adopt
    d = decide(same, BASE, TASKS, 4, policy="paper")
    assert d.decided and not d.adopt and "reject" in d.reason


def test_infra_cell_blocks_adoption_and_is_named():
    cand = {"a": [True] * 4, "b": [True, None, True, True], "c": [True] * 4}
    d = decide(cand, BASE, TASKS, 4, curtail=True)
    assert not d.adopt and not d.decided
    assert d.missing == ["b#2"] and "⊥" in d.reason


def test_regressions_of_stable_passes_always_listed():
    cand = {"a": [True, False, True, True], "b": [True] * 4, "c": [True] * 4}
    d = decide(cand, BASE, TASKS, 4, policy="paper")
    assert d.adopt and d.regressions == ["a"]
    assert stable_pass_regressions(cand, BASE) == ["a"]


def test_sign_test_values():
    assert sign_test_p(0, 0) == 1.0
    assert abs(sign_test_p(5, 0) - 1 / 32) < 1e-12
    assert abs(sign_test_p(4, 1) - 6 / 32) < 1e-12


def test_paired_policy_needs_significance():
    tasks = [f"t{i}" for i in range(6)]
    base = {t: [False] * 4 for t in tasks}
    cand = {t: [True, False, False, False] for t in tasks}  # 6 wins, p = 1/64
    assert decide(cand, base, tasks, 4, policy="paired").adopt
    few = dict(base, t0=[True, False, False, False])  # 1 win, p = 0.5
    d = decide(few, base, tasks, 4, policy="paired")
    assert not d.adopt and d.p_value == 0.5


def test_curtailment_never_changes_the_decision():
    """Exhaustive over a small grid: whenever curtailment decides early, every completion agrees."""
    tasks = ["a", "b"]
    base = {"a": [True, False], "b": [False, False]}
    for policy in ("paper", "paired", "stratified", "coupled"):
        for full_bits in itertools.product([True, False], repeat=4):
            full = {"a": list(full_bits[:2]), "b": list(full_bits[2:])}
            final = decide(full, base, tasks, 2, policy=policy).adopt
            for cut in range(4):  # evaluate in waves: a0 b0 a1 b1
                order = [("a", 0), ("b", 0), ("a", 1), ("b", 1)][:cut]
                partial = {t: [full[t][k] for (tt, k) in order if tt == t] for t in tasks}
                d = decide(partial, base, tasks, 2, policy=policy, curtail=True)
                if d.decided:
                    assert d.adopt == final, (policy, full, cut)
