"""Decisions a reviewer would sign (issue 30 items 1-3), without trials: the family-wise level of a round's
candidates and of a night's rounds, grades on runs that did not choose the tasks (and "incomplete" on a
curtailed grid), and an incomplete baseline that blocks instead of rejecting. Simulations use the project's own
decision rule (validate.adoption_stats.decide_many) and grade function. The new modules are imported inside the
tests that need them, so that on a checkout without them each test fails on its own behaviour."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from evolve.round.controller import CandidateInput, Controller
from evolve.round.grading import grade
from evolve.round.model import Stop
from tests.test_controller_support import make_experiment
from validate.adoption import decide
from validate.load_check import check_load

SIMS, SEED = 4000, 30


# ------------------------------------------------------------------------------------------ item 1: multiplicity
@pytest.mark.parametrize("size", [2, 4])
def test_family_wise_false_adoption_of_a_round_and_a_night_is_within_alpha(size):
    """M no-better candidates against one baseline, each at the family's level: some candidate is adopted in at
    most 5 % of rounds (and of nights of 3 rounds); at the unadjusted level the same rounds exceed 5 %."""
    from validate.adoption_sim import family_adoption_rate
    from validate.multiplicity import Family

    for model in ("beta", "half"):
        per_round = Family(0.05, 1, 1, size).alpha_candidate
        assert family_adoption_rate("stratified", 20, 4, per_round, size, 1, SIMS, SEED, model) <= 0.05
        per_night = Family(0.05, 3, 1, size).alpha_candidate
        assert family_adoption_rate("stratified", 20, 4, per_night, size, 3, SIMS, SEED, model) <= 0.05
    unadjusted = family_adoption_rate("stratified", 20, 4, 0.05, size, 1, SIMS, SEED, "half")
    assert unadjusted > 0.05 + 3 * (0.05 * 0.95 / SIMS) ** 0.5  # so the check above can fail


def test_the_family_level_splits_the_night_over_rounds_and_candidates():
    from validate.multiplicity import Family

    fam = Family(0.05, 3, 4, 2)
    assert fam.night == 2 and fam.alpha_round == pytest.approx(0.05 / 3)
    assert fam.alpha_candidate == pytest.approx(0.05 / 6)
    with pytest.raises(ValueError, match="size"):
        Family(0.05, 3, 1, 0)


# 8 tasks × r=4: stratified p = 0.0198 for LUCKY (adopted at 0.05, not at 0.05/6), 0.00014 for STRONG
TASKS = [f"t{i}" for i in range(8)]
BASE = {t: [True, False, False, False] for t in TASKS}
LUCKY = {t: ([True] * 4 if i < 3 else [True, False, False, False]) for i, t in enumerate(TASKS)}
STRONG = {t: ([True] * 4 if i < 5 else [True, False, False, False]) for i, t in enumerate(TASKS)}


def _controller(tmp_path, candidates: dict[str, dict]) -> Controller:
    """A controller whose stages before the decision are stand-ins handing back ``candidates``' grids."""
    ctl = Controller(make_experiment(tmp_path / "runs", "http://127.0.0.1:9/v1", r=4))
    ctl.cfg.adoption.policy = "stratified"
    ctl._dev = TASKS
    ctl.creation.create = lambda n, inc, cand: (cand.slug, tmp_path)
    ctl.creation.branch_base = lambda inc, cand: None

    async def checks(inc, commit, wt):
        return commit, wt

    async def screening(*args):
        return None

    async def evaluate(n, slug, commit, wt, baseline, incumbent):
        return SimpleNamespace(grid=candidates[slug], results={}, metrics=SimpleNamespace(pass_at_1=0.0))

    ctl.checking.run_checks, ctl.checking.run_screening, ctl.evaluate = checks, screening, evaluate
    ctl.paired.check = lambda slug, out, d: (d, check_load([], []))  # the stand-in grids ran nowhere: no load
    return ctl


def test_each_candidate_of_a_round_is_decided_at_the_family_level(tmp_path, monkeypatch):
    """Two candidates in round 1 of a 3-round night: each is tested at 0.05 / 6, so the lucky one (p 0.02) is
    rejected, the strong one (p 0.0001) adopted, and both decisions record the family and its measured rates."""
    ctl = _controller(tmp_path, {"lucky": LUCKY, "strong": STRONG})

    async def reference(tag):
        return tmp_path

    async def publish(*args):
        return None

    ctl.ensure_reference, ctl.publication.publish = reference, publish
    monkeypatch.setattr("evolve.round.controller.grid_of_job", lambda path: (BASE, None))
    report = asyncio.run(ctl.round(1, [CandidateInput("lucky", "cand/lucky"), CandidateInput("strong", "cand/strong")]))
    by = {c.slug: c for c in report.candidates}
    assert by["lucky"].status == "rejected" and by["strong"].status == "adopt?"
    for c in by.values():
        d = c.decision
        assert d["alpha"] == pytest.approx(0.05 / 6) and d["family_size"] == 2 and d["night_rounds"] == 3
        assert d["alpha_round"] == pytest.approx(0.05 / 3) and d["alpha_night"] == 0.05
        assert 0 < d["false_adoption"] <= d["false_adoption_round"] <= d["false_adoption_night"] <= 0.05
    assert "per round of 2 candidate(s)" in by["strong"].reason and "per night of 3 round(s)" in by["strong"].reason
    (rej,) = ctl.led.find("rejection")
    assert rej.decision["family_size"] == 2 and rej.decision["false_adoption_night"] <= 0.05


# ------------------------------------------------------------------------------------------ item 2: grades
def test_a_no_effect_candidate_is_graded_effective_at_the_chance_rate():
    """Tasks flip 1/2 in a reference corpus (r = 2) and are predicted fixed; the candidate changes nothing.
    Graded against fresh runs of the incumbent it is "effective" as often as the fresh runs beat it the same way
    (exchangeability): E[p²(1 - p²)] with p ~ Beta(1.7, 1.7), the pass rate of a task seen flipping once
    (Beta(0.7, 0.7) prior). Graded against the corpus that chose the task it is "effective" whenever it passes
    2/2, E[p²]: twice as often."""
    rng = np.random.default_rng(SEED)
    p = rng.beta(0.7, 0.7, size=40000)
    corpus = rng.binomial(2, p)
    p = p[corpus == 1][:SIMS]  # the tasks the analysis picks: they flipped in the corpus
    cand, fresh = rng.binomial(2, p), rng.binomial(2, p)

    def grid(k: int) -> dict[str, list[bool | None]]:
        return {"t": [i < k for i in range(2)]}

    def rate(base: np.ndarray) -> float:
        return float(np.mean([grade("m", "rejected", ["t"], [], grid(b), grid(c), 2).grade == "effective"
                              for b, c in zip(base, cand)]))

    e2 = 1.7 * 2.7 / (3.4 * 4.4)  # E[p²], E[p⁴] of Beta(1.7, 1.7)
    e4 = e2 * 3.7 * 4.7 / (5.4 * 6.4)
    chance, se = e2 - e4, ((e2 - e4) * (1 - e2 + e4) / len(p)) ** 0.5
    fresh_rate = rate(fresh)
    mirror = float(np.mean((fresh == 2) & (cand < 2)))  # the same event with the two sides swapped
    assert abs(fresh_rate - chance) < 4 * se and abs(fresh_rate - mirror) < 6 * se
    assert rate(np.ones_like(cand)) == pytest.approx(e2, abs=4 * se) and e2 > 1.8 * chance  # the old, biased way


def test_a_curtailed_grid_is_graded_incomplete_and_says_so():
    base = {"a": [False, True], "b": [True, True]}
    cut = {"a": [True], "b": [True, True]}  # curtailment stopped after 3 of 4 runs
    g = grade("m", "rejected", ["a"], ["b"], base, cut)  # r: the most runs any task has
    assert g.grade == "incomplete" and g.fixes[0].verdict == "incomplete" and g.at_risk[0].verdict == "held"
    assert "incomplete (evaluation curtailed: 3 of 4 runs; not graded)" in g.line()
    assert grade("m", "rejected", ["a"], ["b"], base, cut, 2, "fresh runs").baseline_source == "fresh runs"
    assert grade("m", "adopted", ["a"], ["b"], base, {"a": [True, True], "b": [True, True]}, 2).grade == "effective"


# ------------------------------------------------------------------------------------------ item 3: infra faults
def test_an_incomplete_baseline_blocks_the_decision_instead_of_rejecting():
    base = {**BASE, "t7": [True, None, False, False]}
    d = decide(STRONG, base, TASKS, 4)
    assert not d.decided and not d.adopt and "baseline grid is incomplete" in d.reason and d.missing == ["t7#2"]
    short = {**BASE, "t7": [True, False]}
    assert not decide(STRONG, short, TASKS, 4, curtail=True).decided
    assert decide(STRONG, BASE, TASKS, 4).adopt


def test_an_incomplete_control_grid_blocks_the_round_and_books_no_control(tmp_path):
    ctl = _controller(tmp_path, {"c": STRONG})
    ctl.cfg.adoption.baseline = "control"
    ctl.version_dir = lambda tag: tmp_path
    cell = SimpleNamespace(task="t3", repetition=2, reason="infra:sandbox")

    async def grid(plan, commit, prefix, stop=None):
        return SimpleNamespace(complete=False, plan=plan, metrics=SimpleNamespace(missing=[cell]))

    ctl.plan = lambda *args, **kw: SimpleNamespace(job_dir=tmp_path / "control")
    ctl.grid = grid
    report = asyncio.run(ctl.round(1, [CandidateInput("c", "cand/c")]))
    assert report.blocked and [c.status for c in report.candidates] == ["blocked"]
    assert "control grid of round 1 is incomplete (t3#2 (infra:sandbox))" in report.candidates[0].reason
    assert not ctl.led.find("evaluation") and not ctl.led.find("rejection")
    with pytest.raises(Stop, match="no candidate is decided against it"):
        asyncio.run(ctl.control(1, "v0"))
