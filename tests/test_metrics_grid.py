"""Grid metrics and the paired comparison against hand-computed values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from trials.metrics import compare, compute_metrics, grid_from_results, pass_at_k, wilson

T, F = True, False

# 4 tasks × r=4: a always passes, b never, c 2/4, d 1/4 → 7/16 cells pass.
GRID = {"a": [T, T, T, T], "b": [F, F, F, F], "c": [T, F, T, F], "d": [F, F, F, T]}


def test_complete_grid_metrics():
    m = compute_metrics(GRID, 4)
    assert m.complete and m.missing == [] and m.cells == 16 and m.observed_cells == 16
    assert m.pass_at_1 == pytest.approx(7 / 16)
    assert m.pass_hat_r == pytest.approx(1 / 4)  # only a
    assert m.pass_at_r == pytest.approx(3 / 4)  # a, c, d
    assert m.flip == pytest.approx(2 / 4)  # c, d
    assert m.counts == {"pass": 1, "fail": 1, "flip": 2, "incomplete": 0, "cells_passed": 7,
                        "cells_failed": 9, "cells_unknown": 0}
    # unbiased pass@k: per task 1 - C(n-c,k)/C(n,k), n=4
    assert m.pass_at_k[1] == pytest.approx(7 / 16)
    p2 = (1 + 0 + (1 - math.comb(2, 2) / math.comb(4, 2)) + (1 - math.comb(3, 2) / math.comb(4, 2))) / 4
    assert m.pass_at_k[2] == pytest.approx(p2)  # (1 + 0 + 5/6 + 1/2) / 4
    assert m.pass_at_k[4] == pytest.approx(m.pass_at_r)
    assert {row.task: row.outcome for row in m.tasks} == {"a": "pass", "b": "fail", "c": "flip", "d": "flip"}


def test_pass_at_k_estimator():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 3) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_wilson_interval_hand_value():
    # 7/16 at z=1.96: centre (p + z²/2n)/(1 + z²/n), half-width z·sqrt(p(1-p)/n + z²/4n²)/(1 + z²/n)
    z, n, p = 1.959963984540054, 16, 7 / 16
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    w = wilson(7, 16)
    assert w.low == pytest.approx(centre - half) and w.high == pytest.approx(centre + half)
    assert w.low == pytest.approx(0.2309, abs=1e-3) and w.high == pytest.approx(0.6681, abs=1e-3)
    assert wilson(0, 0) is None


def test_bootstrap_is_deterministic_and_brackets_the_estimate():
    m1, m2 = compute_metrics(GRID, 4), compute_metrics(GRID, 4)
    assert m1.bootstrap == m2.bootstrap
    ci = m1.bootstrap["pass_at_1"]
    assert ci.low <= m1.pass_at_1 <= ci.high and 0 <= ci.low < ci.high <= 1


def test_incomplete_grid_is_flagged_not_dropped():
    grid = {"a": [T, None, T, T], "b": [F, F, F, F], "c": [T, F]}  # c's last 2 cells never ran
    m = compute_metrics(grid, 4, reasons={("a", 2): "infra:sandbox"})
    assert not m.complete
    assert [(c.task, c.repetition, c.reason) for c in m.missing] == [
        ("a", 2, "infra:sandbox"), ("c", 3, "missing"), ("c", 4, "missing")]
    assert m.pass_at_1 == pytest.approx(4 / 9)  # observed cells only
    assert m.pass_hat_r == 0.0 and m.pass_at_r == 0.0  # only b has all 4 cells
    assert m.counts["incomplete"] == 2
    assert m.pass_at_k[3] == pytest.approx(((1.0) + 0.0) / 2)  # a (n=3, c=3) and b; c has only 2 cells


def test_grid_from_results_keeps_infra_reasons():
    res = [SimpleNamespace(task_name="a", repetition=1, status="passed", infra_cause=None),
           SimpleNamespace(task_name="a", repetition=2, status="infra", infra_cause="image_build"),
           SimpleNamespace(task_name="b", repetition=1, status="failed", infra_cause=None),
           SimpleNamespace(task_name="zz", repetition=1, status="passed", infra_cause=None)]
    grid, reasons = grid_from_results(res, ["a", "b"], 2)
    assert grid == {"a": [T, None], "b": [F, None]}
    assert reasons == {("a", 2): "infra:image_build"}


def test_paired_comparison_classes():
    a = {"sp": [T, T], "sf": [F, F], "fx": [F, T], "rg": [T, T], "fl": [F, F], "fl2": [T, F], "inc": [T, T],
         "only_a": [T, T]}
    b = {"sp": [T, T], "sf": [F, F], "fx": [T, T], "rg": [T, F], "fl": [F, T], "fl2": [F, F], "inc": [T, None]}
    c = compare(a, b, 2)
    pairs = {row.task: row.pair for row in c.tasks}
    assert pairs == {"sp": "stable_pass", "sf": "stable_fail", "fx": "fixed", "rg": "regressed", "fl": "flipping",
                     "fl2": "flipping", "inc": "incomplete", "only_a": "unpaired"}
    assert c.counts["flipping"] == 2 and c.counts["fixed"] == 1 and c.counts["regressed"] == 1
    assert not c.complete
    # paired tasks: sp sf fx rg fl fl2 → A 6/12 cells, B 6/12
    assert c.pass_at_1_a == pytest.approx(6 / 12) and c.pass_at_1_b == pytest.approx(6 / 12)
    assert c.improved_tasks == 2 and c.worsened_tasks == 2 and c.sign_test_p == 1.0
    assert {row.task: row.delta for row in c.tasks}["fx"] == pytest.approx(0.5)
