"""The compute-matched control arm's arithmetic (validate/control_arm.py), on grids with hand-checked numbers.

The incumbent grid: two trials at N = 1, 4 and 6 steps, 1000 prompt and 100 output tokens per step, no verifier:
5 steps per trial, 5500 tokens per trial. At N samples with a verifier making c calls a step, each showing a
actions (context taken to be the generator's prompt, 1000; an action 100; answer 1 token):
5 × (1000 + 100 N + c (1000 + 100 a + 1))."""

from __future__ import annotations

import pytest

from trials.harness_api import CostLedger, Usage
from trials.results import TrialResult
from validate.control_arm import (
    MatchError,
    TokenModel,
    choose,
    tokens_per_trial,
    verifier_calls,
    within,
)


def trial(episodes: int, gen: tuple[int, int, int], ver: tuple[int, int, int] = (0, 0, 0),
          status: str = "passed", rep: int = 1) -> TrialResult:
    """``gen``/``ver``: (calls, input tokens, output tokens)."""
    cost = CostLedger(generator=Usage(calls=gen[0], input_tokens=gen[1], output_tokens=gen[2]),
                      verifier=Usage(calls=ver[0], input_tokens=ver[1], output_tokens=ver[2]))
    return TrialResult(trial_name=f"t__r{rep}", run_id=f"x{rep}", task_name="t", repetition=rep, status=status,
                       episodes=episodes, cost=cost)


INCUMBENT = [trial(4, (4, 4000, 400)), trial(6, (6, 6000, 600), rep=2)]


def test_tokens_per_trial_counts_generator_and_verifier_and_skips_infra():
    grid = [trial(2, (2, 1000, 100), (3, 500, 3)), trial(0, (0, 0, 0), status="infra", rep=2)]
    assert tokens_per_trial(grid) == 1603  # 1000 + 100 + 500 + 3; the ⊥ attempt is no trial
    assert tokens_per_trial(INCUMBENT) == 5500  # (4400 + 6600) / 2
    with pytest.raises(MatchError, match="no trial that ran"):
        tokens_per_trial([trial(0, (0, 0, 0), status="infra")])


def test_verifier_calls_per_step():
    assert [verifier_calls("listwise", u) for u in (1, 2, 8)] == [0, 1, 1]
    assert [verifier_calls("pointwise", u) for u in (1, 2, 8)] == [0, 2, 8]
    assert [verifier_calls("pairwise", u) for u in (2, 3, 8)] == [1, 3, 28]
    # ring u + pivots k = min(4, u // 2) against the rest, less the 2 ring duels that already joined them
    assert [verifier_calls("tournament", u) for u in (2, 3, 4, 8)] == [1, 3, 6, 22]
    with pytest.raises(MatchError, match="unknown verifier 'majority'"):
        verifier_calls("majority", 4)


def test_verifier_calls_agree_with_the_seed_schedules():
    """The counts are those the seed's own pair schedules make (contiguous pivots: the ring's order)."""
    from harness_seed.midharness import tournament as t

    for u in range(2, 11):
        ids = list(range(u))
        assert verifier_calls("pairwise", u) == len(t.round_robin(ids))
        ring = t.ring(ids)
        k = t.effective_pivots(4, u)
        done = {frozenset(p) for p in ring}
        assert verifier_calls("tournament", u) == len(ring) + len(t.pivot_pairs(ids[:k], ids[k:], done)), u


def test_model_from_an_n1_grid():
    m = TokenModel.calibrate(INCUMBENT, 1, "pairwise")
    assert (m.steps, m.gen_in, m.gen_out, m.ver_ctx, m.ver_out, m.resend, m.call_factor) == (
        5, 1000, 100, 1000, 1, 0, 1)
    assert m.tokens_per_trial(1, "pairwise") == 5500  # the grid it came from
    assert m.tokens_per_trial(2, "listwise") == 5 * (1000 + 200 + 1 * (1000 + 200 + 1)) == 12005
    assert m.tokens_per_trial(3, "pointwise") == 5 * (1000 + 300 + 3 * (1000 + 100 + 1)) == 23015
    assert m.tokens_per_trial(4, "pairwise") == 5 * (1000 + 400 + 6 * (1000 + 200 + 1)) == 43030
    assert m.tokens_per_trial(12, "listwise") == 5 * (1000 + 1200 + 1 * (1000 + 1200 + 1)) == 22005


def test_choose_the_closest_setting():
    m = TokenModel.calibrate(INCUMBENT, 1, "pairwise")
    c = choose(m, 12005)
    assert (c.n, c.verifier, c.predicted, c.predicted_ratio) == (2, "listwise", 12005, 1.0)
    # 22000: N = 12 listwise (22005) is closest, but N = 3 pointwise (23015, 4.6 % over) is within half the
    # tolerance with a smaller N; N = 2 pointwise (17010) and N = 3 pairwise (24515) are not
    c = choose(m, 22000)
    assert (c.n, c.verifier, c.predicted) == (3, "pointwise", 23015)
    # pairwise and tournament tie at N = 3 (three duels, 24515): the earlier in the list wins
    assert choose(m, 24515, ["tournament", "pairwise"]).label == "n3-tournament"
    assert choose(m, 24515, ["pairwise", "tournament"]).label == "n3-pairwise"
    # N = 3 pointwise already tried: N = 11 listwise (21005, 4.5 % under) is the smallest N within 5 %
    c = choose(m, 22000, exclude=[(3, "pointwise")])
    assert (c.n, c.verifier, c.predicted) == (11, "listwise", 21005)
    # without the half-tolerance preference it would be the closest: N = 12 listwise (22005)
    c = choose(m, 22000, exclude=[(3, "pointwise")], tolerance=0)
    assert (c.n, c.verifier, c.predicted) == (12, "listwise", 22005)
    # a candidate cheaper than the incumbent: N = 1 (the incumbent itself) is the closest there is
    c = choose(m, 4900)
    assert (c.n, c.predicted) == (1, 5500) and not within(c.predicted, 4900)  # 12 % over
    assert choose(m, 22000, max_n=2).label == "n2-pointwise"  # 17010, 23 % under: the closest there is
    with pytest.raises(MatchError, match="positive"):
        choose(m, 0)
    with pytest.raises(MatchError, match="unknown verifier"):
        choose(m, 1000, ["best-of"])


def test_model_from_an_arm_grid_where_the_server_ignores_n():
    """An arm at N = 3 pointwise: 3 requests a step (the prompt paid 3 times), 2 verifier calls a step (a
    duplicate merged: 2/3 of the calls 3 unique candidates would need), 800 prompt tokens per verifier call of
    which one action (100): a context of 700."""
    arm = [trial(5, (15, 15000, 1500), (10, 8000, 10))]
    m = TokenModel.calibrate(arm, 3, "pointwise")
    assert (m.steps, m.gen_in, m.gen_out, m.ver_ctx, m.ver_out, m.resend) == (5, 1000, 100, 700, 1, 1)
    assert m.call_factor == pytest.approx(2 / 3)
    assert m.tokens_per_trial(3, "pointwise") == pytest.approx(tokens_per_trial(arm)) == pytest.approx(24510)
    # at N = 2 listwise: 2 requests (2000) + 200 out + 2/3 × 1 call × (700 + 2 actions + 1)
    assert m.tokens_per_trial(2, "listwise") == pytest.approx(5 * (2000 + 200 + (700 + 200 + 1) * 2 / 3))


def test_n1_grid_takes_the_verifier_from_a_prior():
    prior = TokenModel(5, 1000, 100, 800, 1, resend=1.0, call_factor=0.5)
    m = TokenModel.calibrate(INCUMBENT, 1, "pairwise", prior=prior)
    assert (m.ver_ctx, m.ver_out, m.call_factor, m.resend) == (800, 1, 0.5, 1.0)
    with pytest.raises(MatchError, match="at least one step"):
        TokenModel.calibrate([trial(0, (0, 0, 0))], 1, "pairwise")


def test_within_ten_percent():
    assert within(11, 10) and within(9, 10) and not within(11.01, 10) and not within(8.99, 10)


CONFIG = '''name = "x"
[endpoint]
base_url = "http://127.0.0.1:9/v1"
model = "m"
[tasks]
dir = "."
[adoption]
'''


def test_config_options_and_their_errors(tmp_path):
    from evolve.experiment.config import ExperimentConfig

    path = tmp_path / "experiment.toml"
    path.write_text(CONFIG)
    ad = ExperimentConfig.load(path).adoption
    assert (ad.control, ad.require_beat_control_arm, ad.control_attempts) == ("none", False, 3)
    path.write_text(CONFIG + 'control = "midharness"\nrequire_beat_control_arm = true\ncontrol_verifiers = ["listwise"]\n')
    ad = ExperimentConfig.load(path).adoption
    assert (ad.control, ad.require_beat_control_arm, ad.control_verifiers) == ("midharness", True, ["listwise"])
    for bad, where in (('control = "midharnes"', "control"), ('control_verifiers = ["majority"]', "control_verifiers"),
                       ("control_attempts = 0", "control_attempts")):
        path.write_text(CONFIG + bad + "\n")
        with pytest.raises(ValueError, match=rf"experiment.toml.*{where}"):
            ExperimentConfig.load(path)


def test_incumbent_without_midharness_is_refused(tmp_path):
    from evolve.round.control_arm import midharness_settings
    from evolve.round.model import ControllerError

    with pytest.raises(ControllerError, match="needs the seed's Mid-Harness package"):
        midharness_settings(tmp_path)
    (tmp_path / "midharness").mkdir()
    (tmp_path / "midharness" / "verifiers.py").write_text("")
    (tmp_path / "settings.toml").write_text('[midharness]\nn = 2\nverifier = "listwise"\n')
    assert midharness_settings(tmp_path) == {"n": 2, "verifier": "listwise", "pivots": 4}


def test_arm_lines_say_what_was_and_was_not_compared():
    from evolve.round.control_arm import arm_lines

    assert arm_lines(None) == []
    lines = arm_lines({"n": 3, "verifier": "pointwise", "target_tokens_per_trial": 1000.0,
                       "measured_tokens_per_trial": 1150.0, "ratio": 1.15, "matched": False, "tolerance": 0.1,
                       "incumbent_tokens_per_trial": 400.0, "status": "compared", "beats": True, "pass_at_1": 0.5,
                       "p_value": 0.01, "decision": {"candidate_pass1": 0.75}, "required": True,
                       "comparison": {"fixed": 1, "stable_pass": 1, "regressed": 0},
                       "attempts": [{"n": 3, "verifier": "pointwise", "predicted_tokens_per_trial": 1010.0,
                                     "measured_tokens_per_trial": 1150.0, "ratio": 1.15}],
                       "note": "no arm within 10%"})
    assert "N = 3 samples per step, pointwise verifier" in lines[0] and "ratio 1.150, NOT within 10%" in lines[0]
    assert lines[1] == ("candidate against the control arm: Pass@1 0.750 vs 0.500, p = 0.0100 — beats it "
                        "(required for adoption); fixed 1, stable pass 1")
    assert lines[2] == "arm attempts: 3×pointwise predicted 1010.0, measured 1150.0 (ratio 1.150)"
    assert lines[3] == "note: no arm within 10%"
    lines = arm_lines({"status": "not run", "reason": "control arm not planned: no trial", "required": False})
    assert lines == [("candidate against the control arm: not compared — control arm not planned: no trial "
                      "(reported only, not required for adoption)")]
