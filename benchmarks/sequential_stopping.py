"""Trials needed per adoption decision: sequential stopping (curtailment) against a fixed r = 4 grid.

Simulates per-task pass probabilities for a baseline and a candidate, draws complete grids, and runs the candidate's
evaluation in repetition waves (every task once, then again...), stopping as soon as the decision is fixed. Prints,
from one run: mean trials per decision for both, their ratio, and the false-adoption rate of each (adoptions when the
candidate is truly no better), which must be equal because curtailment never changes a decision.

    python benchmarks/sequential_stopping.py [--tasks 20] [--sims 400] [--policy paper|paired] [--seed 7]
"""

from __future__ import annotations

import argparse
import random

from validate.adoption import decide


def simulate(n_tasks: int, sims: int, policy: str, seed: int, r: int = 4) -> None:
    rng = random.Random(seed)
    tasks = [f"t{i}" for i in range(n_tasks)]
    scenarios = {"null (candidate = baseline)": 0.0, "worse (−0.10)": -0.10, "better (+0.15)": 0.15}
    print(f"policy={policy} tasks={n_tasks} r={r} sims={sims} seed={seed}")
    print(f"{'scenario':28} {'fixed trials':>12} {'sequential':>11} {'ratio':>6} {'adopt fixed':>12} "
          f"{'adopt seq':>10} {'same':>5}")
    for name, delta in scenarios.items():
        fixed_trials = seq_trials = adopt_fixed = adopt_seq = same = 0
        for _ in range(sims):
            p_base = [rng.betavariate(0.7, 0.7) for _ in tasks]
            p_cand = [min(1.0, max(0.0, p + delta)) for p in p_base]
            base = {t: [rng.random() < p for _ in range(r)] for t, p in zip(tasks, p_base)}
            full = {t: [rng.random() < p for _ in range(r)] for t, p in zip(tasks, p_cand)}
            d_full = decide(full, base, tasks, r, policy=policy)
            fixed_trials += n_tasks * r
            adopt_fixed += d_full.adopt
            partial: dict[str, list[bool | None]] = {t: [] for t in tasks}
            run = 0
            d_seq = None
            for k in range(r):
                for t in tasks:
                    partial[t].append(full[t][k])
                    run += 1
                    d_seq = decide(partial, base, tasks, r, policy=policy, curtail=True)
                    if d_seq.decided:
                        break
                if d_seq is not None and d_seq.decided:
                    break
            seq_trials += run
            adopt_seq += d_seq.adopt
            same += d_seq.adopt == d_full.adopt
        print(f"{name:28} {fixed_trials / sims:12.1f} {seq_trials / sims:11.1f} "
              f"{seq_trials / fixed_trials:6.2f} {adopt_fixed / sims:12.3f} {adopt_seq / sims:10.3f} "
              f"{same / sims:5.2f}")
    print("false-adoption rate = the 'adopt' columns of the null and worse rows (equal by construction).")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--sims", type=int, default=300)
    ap.add_argument("--policy", default="paper", choices=["paper", "paired"])
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    simulate(a.tasks, a.sims, a.policy, a.seed)
