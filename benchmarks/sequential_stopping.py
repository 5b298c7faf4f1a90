"""Adoption policies measured: false adoption, power, and trials saved by sequential stopping (curtailment).

Simulates per-task pass probabilities for a baseline (Beta(0.7, 0.7), or every task at 0.5) and a candidate (the
same plus delta, clipped), draws grids of r runs per task, and decides each with the project's own decision rule
(``validate.adoption_stats.decide_many`` on complete grids, ``validate.adoption.decide`` cell by cell for
curtailment). Prints from one run:

1. per policy, the adoption rate on complete grids when the candidate is no better (false adoption), worse, or
   better by +0.10 and +0.15 (power), each over the same simulated grids (common random numbers);
2. per policy, the mean trials per decision of the fixed grid and of curtailment (the candidate's evaluation run
   in repetition waves, stopped once no completion can change the decision), their ratio, and how often the
   curtailed decision equals the complete grid's (it must always);
3. multiplicity: for M = 1, 2, 4 candidates per round and nights of ``--night-rounds`` rounds, the default
   policy's per-comparison, per-round and per-night false-adoption rates (no candidate better) with every
   candidate tested at alpha (unadjusted), at alpha / M (the round controlled) and at alpha / (rounds · M) (the
   project's rule: the night controlled, validate.multiplicity), and the power of one +0.15 candidate at each level;
4. the conclusions these figures support, and only those.

``coupled`` decides on pairs; here its two arms are drawn independent (no agreement, as the figure every decision
records): ``benchmarks/coupled_pairs.py`` sweeps the agreement and a load shift.

    python benchmarks/sequential_stopping.py [--tasks 20] [--r 4] [--sims 2000] [--seq-sims 100] [--seed 7]
                                             [--night-rounds 3]
"""

from __future__ import annotations

import argparse
import random
import time

from validate.adoption import DEFAULT_POLICY, decide
from validate.adoption_sim import NULL_MODELS, adoption_rate, family_adoption_rate
from validate.adoption_stats import POLICIES
from validate.multiplicity import Family

SCENARIOS = (("null, Beta rates", 0.0, "beta"), ("null, all 0.5", 0.0, "half"), ("worse −0.10", -0.10, "beta"),
             ("better +0.10", 0.10, "beta"), ("better +0.15", 0.15, "beta"))
TARGET = 0.05


def complete_grids(n_tasks: int, r: int, sims: int, seed: int, alpha: float) -> dict[str, dict[str, float]]:
    """policy -> scenario -> adoption rate over ``sims`` complete grids (the same grids for every policy)."""
    print(f"## 1. adoption rate on complete grids: {n_tasks} tasks × r={r}, {sims} grids per cell, seed {seed}, "
          f"alpha {alpha}")
    print(f"{'policy':11}" + "".join(f"{name:>18}" for name, _, _ in SCENARIOS) + f"{'false adoption':>16}")
    rates: dict[str, dict[str, float]] = {}
    for policy in POLICIES:
        rates[policy] = {name: adoption_rate(policy, n_tasks, r, alpha, delta, sims, seed + i, model)
                         for i, (name, delta, model) in enumerate(SCENARIOS)}
        worst_null = max(rates[policy]["null, Beta rates"], rates[policy]["null, all 0.5"])
        print(f"{policy:11}" + "".join(f"{rates[policy][name]:18.1%}" for name, _, _ in SCENARIOS)
              + f"{worst_null:16.1%}")
    return rates


def _grid_pair(rng: random.Random, tasks: list[str], r: int, delta: float):
    p_base = [rng.betavariate(0.7, 0.7) for _ in tasks]
    base = {t: [rng.random() < p for _ in range(r)] for t, p in zip(tasks, p_base)}
    full = {t: [rng.random() < min(1.0, max(0.0, p + delta)) for _ in range(r)] for t, p in zip(tasks, p_base)}
    return base, full


def curtailment(n_tasks: int, r: int, sims: int, seed: int, alpha: float) -> dict[str, float]:
    """policy -> share of curtailed decisions equal to the complete grid's; prints trials per decision."""
    print(f"\n## 2. sequential stopping (curtailment): {sims} evaluations per row, waves of one run per task, "
          f"seed {seed}")
    print(f"{'policy':11} {'scenario':16} {'fixed trials':>12} {'sequential':>11} {'ratio':>6} "
          f"{'adopt fixed':>12} {'adopt seq':>10} {'same':>5}")
    tasks = [f"t{i}" for i in range(n_tasks)]
    agreement: dict[str, float] = {}
    for policy in POLICIES:
        same_all = total = 0
        for name, delta, _model in (s for s in SCENARIOS if s[2] == "beta" and s[0] != "better +0.10"):
            rng = random.Random(seed)  # the same grids for every policy
            seq_trials = adopt_fixed = adopt_seq = same = 0
            for _ in range(sims):
                base, full = _grid_pair(rng, tasks, r, delta)
                d_full = decide(full, base, tasks, r, policy, alpha)
                partial: dict[str, list[bool | None]] = {t: [] for t in tasks}
                run, d_seq = 0, None
                for k in range(r):
                    for t in tasks:
                        partial[t].append(full[t][k])
                        run += 1
                        d_seq = decide(partial, base, tasks, r, policy, alpha, curtail=True)
                        if d_seq.decided:
                            break
                    if d_seq is not None and d_seq.decided:
                        break
                seq_trials += run
                adopt_fixed += d_full.adopt
                adopt_seq += d_seq.adopt
                same += d_seq.adopt == d_full.adopt
            fixed = n_tasks * r
            print(f"{policy:11} {name:16} {fixed:12.1f} {seq_trials / sims:11.1f} {seq_trials / (fixed * sims):6.2f} "
                  f"{adopt_fixed / sims:12.3f} {adopt_seq / sims:10.3f} {same / sims:5.2f}")
            same_all, total = same_all + same, total + sims
        agreement[policy] = same_all / total
    return agreement


SIZES = (1, 2, 4)


def multiplicity(n_tasks: int, r: int, sims: int, seed: int, alpha: float, rounds: int) -> dict[str, float]:
    """Per-round and per-night false adoption of the default policy at M = 1, 2, 4 under three levels; returns
    the worst per-night rate of the project's rule and the worst per-round rate of the round-only rule."""
    print(f"\n## 3. multiplicity: {DEFAULT_POLICY}, {n_tasks} tasks × r={r}, {sims} rounds/nights per cell (worse of "
          f"the two task models), nights of {rounds} rounds, alpha {alpha}")
    print(f"{'M':>2} {'level':26} {'per candidate':>13} {'per comparison':>15} {'per round':>10} {'per night':>10} "
          f"{'power +0.15':>12}")
    worst = {"night rule, per night": 0.0, "round rule, per round": 0.0}
    for m in SIZES:
        levels = (("unadjusted (alpha)", alpha), ("round: alpha / M", Family(alpha, 1, 1, m).alpha_candidate),
                  (f"night: alpha / ({rounds}·M)", Family(alpha, rounds, 1, m).alpha_candidate))
        for name, level in levels:
            def worst_of(size: int, nights: int, level: float = level) -> float:
                return max(family_adoption_rate(DEFAULT_POLICY, n_tasks, r, level, size, nights, sims, seed, model)
                           for model in NULL_MODELS)

            one, per_round, per_night = worst_of(1, 1), worst_of(m, 1), worst_of(m, rounds)
            power = adoption_rate(DEFAULT_POLICY, n_tasks, r, level, 0.15, sims, seed + 3)
            print(f"{m:>2} {name:26} {level:13.4f} {one:15.1%} {per_round:10.1%} {per_night:10.1%} {power:12.1%}")
            if name.startswith("night"):
                worst["night rule, per night"] = max(worst["night rule, per night"], per_night)
            if name.startswith("round"):
                worst["round rule, per round"] = max(worst["round rule, per round"], per_round)
    return worst


def conclusions(rates: dict[str, dict[str, float]], agreement: dict[str, float], n_tasks: int, r: int,
                family: dict[str, float]) -> None:
    print("\n## 4. conclusions (from the figures above)")
    for policy in POLICIES:
        fa = max(rates[policy]["null, Beta rates"], rates[policy]["null, all 0.5"])
        verdict = "within" if fa <= TARGET else "ABOVE"
        print(f"- {policy}{' (default)' if policy == DEFAULT_POLICY else ''}: false adoption {fa:.1%} ({verdict} the "
              f"{TARGET:.0%} target), power at +0.15 {rates[policy]['better +0.15']:.1%}, at +0.10 "
              f"{rates[policy]['better +0.10']:.1%}; curtailed decisions equal the complete grid's in "
              f"{agreement[policy]:.1%} of evaluations")
    valid = [p for p in POLICIES if max(rates[p]["null, Beta rates"], rates[p]["null, all 0.5"]) <= TARGET]
    if valid:
        best = max(valid, key=lambda p: rates[p]["better +0.15"])
        print(f"- of the policies within {TARGET:.0%} false adoption at {n_tasks} tasks × r={r}, {best} has the "
              f"highest power at +0.15" + ("; it is the default." if best == DEFAULT_POLICY else
                                           f"; the default {DEFAULT_POLICY} is not it."))
    else:
        print(f"- no policy stays within {TARGET:.0%} false adoption at {n_tasks} tasks × r={r}")
    for what, rate in family.items():
        print(f"- {what}: worst measured false adoption over M = {', '.join(map(str, SIZES))} is {rate:.1%} "
              f"({'within' if rate <= TARGET else 'ABOVE'} the {TARGET:.0%} target)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--r", type=int, default=4)
    ap.add_argument("--sims", type=int, default=2000, help="complete grids per policy and scenario")
    ap.add_argument("--seq-sims", type=int, default=100, help="evaluations per row of the curtailment table")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--night-rounds", type=int, default=3, help="rounds per night in the multiplicity table")
    ap.add_argument("--quick", action="store_true", help="CI: 100 grids, 5 evaluations per row (runs, figures rough)")
    a = ap.parse_args()
    a.sims, a.seq_sims = (100, 5) if a.quick else (a.sims, a.seq_sims)
    started = time.monotonic()
    found = complete_grids(a.tasks, a.r, a.sims, a.seed, a.alpha)
    same = curtailment(a.tasks, a.r, a.seq_sims, a.seed, a.alpha)
    fam = multiplicity(a.tasks, a.r, a.sims, a.seed, a.alpha, a.night_rounds)
    conclusions(found, same, a.tasks, a.r, fam)
    print(f"({time.monotonic() - started:.0f} s)")
