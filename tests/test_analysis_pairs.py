"""Pairs from a reference corpus: flipping tasks, distinct failing runs covered first, caps, the sets kept aside."""

from __future__ import annotations

import json

import pytest

from evolve.roles.analysis.pairs import CorpusError, make_pairs
from tests.test_analysis_support import CraftedTrial


def corpus(tmp_path, grid: dict[str, str]):
    """``grid``: task -> one letter per rep (p passed, f failed, i infra)."""
    root = tmp_path / "reference"
    status = {"p": "passed", "f": "failed", "i": "infra"}
    for task, cells in grid.items():
        for rep, c in enumerate(cells, 1):
            t = CraftedTrial(root, task=task, rep=rep, status=status[c])
            t.episode([("ls\n", 0.1)], observation="x")
            t.write()
    return root


def test_flipping_all_failure_at_risk_and_incomplete(tmp_path):
    ps = make_pairs(corpus(tmp_path, {"a": "pfpf", "b": "ffff", "c": "pppp", "d": "iiii", "e": "pifi"}))
    assert ps.flipping == ["a", "e"] and ps.all_failure == ["b"] and ps.at_risk == ["c"]
    assert ps.incomplete == ["d"]
    assert all(p.success.status == "passed" and p.failure.status == "failed" for p in ps.pairs)
    assert {p.task for p in ps.pairs} == {"a", "e"}


def test_pairs_cover_distinct_failing_runs_first(tmp_path):
    ps = make_pairs(corpus(tmp_path, {"a": "pfff"}), per_task=3)
    assert [p.failure.rep for p in ps.pairs] == [2, 3, 4]
    ps = make_pairs(corpus(tmp_path / "2", {"a": "ppff"}), per_task=4)
    assert [(p.success.rep, p.failure.rep) for p in ps.pairs] == [(1, 3), (2, 4), (2, 3), (1, 4)]
    assert len({p.key for p in ps.pairs}) == 4


def test_total_cap_reaches_every_flipping_task_before_second_pairs(tmp_path):
    ps = make_pairs(corpus(tmp_path, {"a": "pff", "b": "pff", "c": "pff"}), per_task=2, total=4)
    assert [p.task for p in ps.pairs] == ["a", "b", "c", "a"]


def test_bad_corpus_names_the_problem(tmp_path):
    with pytest.raises(CorpusError, match="no such reference corpus"):
        make_pairs(tmp_path / "missing")
    root = corpus(tmp_path, {"a": "pf"})
    (root / "a__r2" / "result.json").unlink()
    with pytest.raises(CorpusError, match=r"a__r2: no result.json"):
        make_pairs(root)
    (root / "a__r2" / "result.json").write_text(json.dumps({"trial_name": "a__r2"}))
    with pytest.raises(CorpusError, match="a__r2.*result.json"):
        make_pairs(root)
