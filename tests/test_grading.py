"""Prediction grading against paired per-task outcomes (evolve.round.grading): each grade, ⊥ cells, unexplained
regressions, the line the next proposer sees."""

from __future__ import annotations

from evolve.round.grading import grade

BASE = {"a": [False, False], "b": [True, False], "c": [True, True], "d": [True, True]}


def test_effective_when_every_predicted_fix_improves_and_one_is_fixed():
    g = grade("m", "adopted", ["a", "b"], ["c"], BASE, {"a": [True, True], "b": [True, False], "c": [True, True],
                                                          "d": [True, True]})
    assert g.grade == "partly effective"  # b did not move
    g = grade("m", "adopted", ["a", "b"], ["c"], BASE, {"a": [True, True], "b": [True, True], "c": [True, True],
                                                          "d": [True, True]})
    assert g.grade == "effective" and [d.verdict for d in g.fixes] == ["fixed", "fixed"]
    assert g.at_risk[0].verdict == "held" and g.unexplained_regressions == []


def test_improved_but_not_fixed_is_partly_effective():
    g = grade("m", "rejected", ["a"], [], BASE, {**BASE, "a": [True, False]})
    assert g.grade == "partly effective" and g.fixes[0].verdict == "improved"


def test_ineffective_when_no_prediction_moves():
    g = grade("m", "rejected", ["a"], [], BASE, dict(BASE))
    assert g.grade == "ineffective" and g.fixes[0].verdict == "unchanged"
    assert grade("m", "rejected", [], [], BASE, dict(BASE)).grade == "ineffective"


def test_harmful_with_an_unexplained_regression_listed():
    cand = {"a": [True, False], "b": [False, False], "c": [True, True], "d": [False, False]}
    g = grade("trim", "rejected", ["a"], ["c"], BASE, cand)
    assert g.grade == "harmful"
    assert [d.task for d in g.unexplained_regressions] == ["b", "d"]
    line = g.line()
    assert line.startswith("trim (rejected): harmful") and "unexplained regressions: b, d" in line
    assert "a improved" in line and "c held" in line


def test_a_regression_with_a_better_pass_rate_overall_is_not_harmful():
    cand = {"a": [True, True], "b": [True, True], "c": [True, False], "d": [True, True]}
    g = grade("m", "adopted", ["a"], ["c"], BASE, cand)
    assert g.at_risk[0].verdict == "regressed" and g.grade == "effective"


def test_infra_cells_count_as_neither_pass_nor_fail():
    g = grade("m", "adopted", ["a"], [], {"a": [None, False]}, {"a": [True, None]})
    assert g.fixes[0].baseline == 0.0 and g.fixes[0].candidate == 1.0 and g.fixes[0].verdict == "fixed"
    g = grade("m", "adopted", ["a"], [], {"a": [None, None]}, {"a": [True, True]})
    assert g.fixes[0].verdict == "unknown"


def test_a_grading_baseline_with_fewer_runs_than_r_still_grades():
    # [adoption] grading_r: 2 fresh incumbent runs of a named task against a complete candidate grid at r = 4
    fresh = {"a": [False, True], "c": [True, True]}
    cand = {"a": [True, True, True, True], "c": [True, True, True, True]}
    g = grade("m", "adopted", ["a"], ["c"], fresh, cand, r=4)
    assert g.fixes[0].verdict == "fixed" and g.at_risk[0].verdict == "held" and g.grade == "effective"
    # a candidate short of r runs is still incomplete, whatever the baseline holds
    g = grade("m", "rejected", ["a"], [], fresh, {"a": [True, True, True]}, r=4)
    assert g.fixes[0].verdict == "incomplete" and g.grade == "incomplete"


def test_fresh_grading_runs_only_for_tasks_an_evaluation_ran_in_full():
    from evolve.round.grading_runs import tasks_needing_fresh_runs

    # the night of 2026-12-07: curtailment stopped the evaluation at 127 of 4 × 34; the one named task
    # (hello-file) had 32 runs, so it grades "incomplete" whatever fresh runs would say: none are needed
    cut = {"hello-file": [True] * 32, "write-json": [False] * 34}
    assert tasks_needing_fresh_runs([(["hello-file"], cut)], 34) == set()
    # a complete grid (⊥ cells count as run: they are rerun before a decision) needs its named tasks' runs
    full = {"hello-file": [True] * 33 + [None], "write-json": [False] * 34}
    assert tasks_needing_fresh_runs([(["hello-file", "write-json"], full)], 34) == {"hello-file", "write-json"}
    # two candidates: the union of what each ran in full; a candidate never evaluated ({}) adds nothing
    assert tasks_needing_fresh_runs([(["hello-file"], cut), (["write-json"], full), (["count-lines"], {})],
                                    34) == {"write-json"}
    # the grade of the curtailed candidate against the corpus alone is still "incomplete" on that task
    g = grade("verify-completion", "rejected", ["hello-file"], [], {"hello-file": [True] * 25 + [False] * 9}, cut, 34)
    assert g.grade == "incomplete" and g.fixes[0].verdict == "incomplete"
