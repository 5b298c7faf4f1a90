"""The compute-matched control arm: how many tokens a trial costs, and which Mid-Harness action scaling of the
incumbent (N samples per step, a verifier) spends as many as a candidate does.

A candidate that adds steps, checks or longer prompts spends more tokens per trial than the incumbent. The
question a reviewer asks is whether the same tokens spent on test-time scaling of the incumbent (the seed's
Mid-Harness: N sampled actions per step, a verifier chooses) would have done as well. This module is pure:

- :func:`trial_tokens` / :func:`tokens_per_trial`: a trial's tokens are its generator and verifier input and
  output tokens (``result.json`` ``cost``, :class:`trials.harness_api.CostLedger`); ⊥ trials are left out.
- :func:`verifier_calls`: verifier calls per step for U unique parseable candidates, as
  ``harness_seed/midharness/verifiers.py`` and ``tournament.py`` issue them (none below two candidates).
- :class:`TokenModel`: tokens per trial as a function of (N, verifier), calibrated from a grid run at known
  settings (:meth:`TokenModel.calibrate`): steps per trial, the generator's prompt and per-sample output per
  step, the share of the prompt re-sent per extra sample (a server that ignores ``n`` gets N requests), and the
  verifier's tokens per call: a context (task and history) plus the actions it shows (all N for listwise, two
  for a duel, one for pointwise; an action is taken to cost a sample's output). A grid at N = 1 says nothing
  about the verifier: its context is taken to be the generator's prompt (it sees the same task and history)
  until an arm grid measures it.
- :func:`choose`: the smallest N whose predicted tokens per trial are within half the tolerance of a target,
  else the closest (N, verifier); a measured ratio outside the tolerance is reported, and the controller
  recalibrates on the arm's own grid and tries again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trials.results import TrialResult

VERIFIERS = ("listwise", "pointwise", "pairwise", "tournament")
TOLERANCE = 0.10  # the arm's tokens per trial must be within 10 % of the candidate's
MAX_N = 16


class MatchError(ValueError):
    """The arm cannot be planned: no usable trial to measure, or an unknown verifier."""


def trial_tokens(res: TrialResult) -> int:
    """All tokens one trial paid for: generator and verifier, input and output."""
    c = res.cost
    return c.generator.input_tokens + c.generator.output_tokens + c.verifier.input_tokens + c.verifier.output_tokens


def _usable(results: Iterable[TrialResult]) -> list[TrialResult]:
    return [r for r in results if not r.is_infra]


def tokens_per_trial(results: Iterable[TrialResult]) -> float:
    """Mean tokens per trial over the trials that ran (⊥ attempts spent nothing the harness booked)."""
    rs = _usable(results)
    if not rs:
        raise MatchError("no trial that ran: tokens per trial cannot be measured")
    return sum(trial_tokens(r) for r in rs) / len(rs)


def verifier_calls(verifier: str, unique: int, pivots: int = 4) -> int:
    """Verifier calls in one step with ``unique`` parseable candidates (none for fewer than two)."""
    if verifier not in VERIFIERS:
        raise MatchError(f"unknown verifier {verifier!r}; one of {', '.join(VERIFIERS)}")
    u = unique
    if u < 2:
        return 0
    if verifier == "listwise":
        return 1
    if verifier == "pointwise":
        return u
    if verifier == "pairwise":
        return u * (u - 1) // 2
    if u == 2:  # the ring is one duel and the only pivot has met the only other candidate
        return 1
    k = max(1, min(pivots, u // 2))
    # ring of u duels, then each pivot against each non-pivot not met in the ring; the ring joins a contiguous
    # block of pivots to the rest by 2 duels (scattered pivots meet more of the rest there: fewer calls)
    return u + k * (u - k) - 2


def actions_per_call(verifier: str, unique: int) -> int:
    """How many candidate actions one verifier prompt shows."""
    return {"listwise": unique, "pointwise": 1}.get(verifier, 2)


@dataclass(frozen=True)
class TokenModel:
    """Per-step token costs (means), from which tokens per trial at any (N, verifier) follow."""

    steps: float  # agent steps per trial
    gen_in: float  # generator prompt tokens per request
    gen_out: float  # generator output tokens per sample
    ver_ctx: float  # verifier prompt tokens per call besides the actions it shows
    ver_out: float  # verifier output tokens per call
    resend: float = 0.0  # share of extra samples sent as their own request (prompt paid again): 0 honours ``n``
    call_factor: float = 1.0  # measured verifier calls / calls with N unique candidates (duplicates merge)
    pivots: int = 4

    def per_step(self, n: int, verifier: str) -> float:
        calls = self.call_factor * verifier_calls(verifier, n, self.pivots)
        per_call = self.ver_ctx + actions_per_call(verifier, n) * self.gen_out + self.ver_out
        return self.gen_in * (1 + self.resend * (n - 1)) + n * self.gen_out + calls * per_call

    def tokens_per_trial(self, n: int, verifier: str) -> float:
        """Predicted tokens per trial of the incumbent at ``n`` samples per step with ``verifier``."""
        return self.steps * self.per_step(n, verifier)

    @classmethod
    def calibrate(cls, results: Iterable[TrialResult], n: int, verifier: str, pivots: int = 4,
                  prior: TokenModel | None = None) -> TokenModel:
        """The model of a grid run at ``n`` samples per step with ``verifier``. What that grid cannot show (the
        verifier's costs at N = 1, the re-sent share at N = 1) comes from ``prior``, or else: the verifier's
        prompt is the generator's, its answer one token, and the server honours ``n``."""
        rs = [r for r in _usable(results) if r.episodes > 0]
        if not rs:
            raise MatchError("no trial with at least one step: the token model cannot be calibrated")
        steps = sum(r.episodes for r in rs)
        gen = [r.cost.generator for r in rs]
        ver = [r.cost.verifier for r in rs]
        requests = sum(g.calls for g in gen) / steps
        resend = prior.resend if prior else 0.0
        if n > 1 and requests > 0:
            resend = min(1.0, max(0.0, (requests - 1) / (n - 1)))
        gen_in = sum(g.input_tokens for g in gen) / steps / (1 + resend * (n - 1))
        gen_out = sum(g.output_tokens for g in gen) / steps / n
        calls = sum(v.calls for v in ver)
        expected = verifier_calls(verifier, n, pivots) * steps
        if calls and expected:
            ver_in = sum(v.input_tokens for v in ver) / calls
            ver_ctx = max(0.0, ver_in - actions_per_call(verifier, n) * gen_out)
            ver_out = sum(v.output_tokens for v in ver) / calls
            factor = calls / expected
        elif prior is not None:
            ver_ctx, ver_out, factor = prior.ver_ctx, prior.ver_out, prior.call_factor
        else:
            ver_ctx, ver_out, factor = gen_in, 1.0, 1.0
        return cls(steps / len(rs), gen_in, gen_out, ver_ctx, ver_out, resend, factor, pivots)


@dataclass(frozen=True)
class ArmChoice:
    n: int
    verifier: str
    predicted: float  # tokens per trial the model predicts
    target: float  # the candidate's measured tokens per trial

    @property
    def predicted_ratio(self) -> float:
        return self.predicted / self.target

    @property
    def label(self) -> str:
        return f"n{self.n}-{self.verifier}"


def choose(model: TokenModel, target: float, verifiers: Iterable[str] = VERIFIERS, max_n: int = MAX_N,
           exclude: Iterable[tuple[int, str]] = (), tolerance: float = TOLERANCE) -> ArmChoice:
    """The setting to run for ``target`` tokens per trial: of those predicted within ``tolerance / 2``, the
    smallest N (the model is surest near the N it was calibrated at, and a small N is the arm a reader expects),
    then the closest; else the closest of all (relative error). Ties go to the smaller N, then to the earlier
    verifier. N = 1 is the incumbent itself (no verifier call), listed under the first verifier. ``exclude``:
    settings already tried."""
    if target <= 0:
        raise MatchError(f"target tokens per trial must be positive, not {target}")
    kinds = list(verifiers)
    for v in kinds:
        verifier_calls(v, 2)  # names an unknown verifier now, not after a grid
    if not kinds:
        raise MatchError("no verifier to choose from")
    tried = set(exclude)
    options = []
    for n in range(1, max_n + 1):
        for i, v in enumerate(kinds[:1] if n == 1 else kinds):
            if (n, v) not in tried:
                pred = model.tokens_per_trial(n, v)
                options.append((abs(pred / target - 1), n, i, ArmChoice(n, v, pred, target)))
    if not options:
        raise MatchError("every setting has been tried")
    close = [(n, err, i, c) for err, n, i, c in options if err <= tolerance / 2]
    return min(close, key=lambda o: o[:3])[3] if close else min(options, key=lambda o: o[:3])[3]


def within(measured: float, target: float, tolerance: float = TOLERANCE) -> bool:
    """Whether ``measured`` tokens per trial are within ``tolerance`` (relative) of ``target``."""
    return abs(measured / target - 1) <= tolerance + 1e-9  # 11 vs 10 is 10 %, whatever the float says
