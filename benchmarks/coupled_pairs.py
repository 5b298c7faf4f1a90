"""The paired test on coupled pairs (``policy = "coupled"``) simulated: per-night false adoption against the arms'
agreement and under a load shift, power on the demo grid, and the trials per arm it needs.

Model and designs: ``validate.coupled`` (a trial follows its repetition's seed with probability √ρ; agreement at
pass rate 0.5 is (1 + ρ) / 2) and ``validate.coupled_sim`` (where a load shift lands: the reference corpus or
both interleaved arms). Every grid is decided by ``validate.adoption_stats.decide_many``, the rule real decisions
run. The demo grid (tasks, r, α, the prior's pass rates) is read from ``scripts/demo-experiment.toml``. Prints:

1. per-night false adoption with no load shift, M = 1, 2, 4 candidates a night (each at α / M), per agreement:
   the worse of the two task models (Beta(0.7, 0.7) rates, all 0.5), and the agreement the Beta model really has;
2. the same under a load shift of ``--shift`` (the candidate's arm sees it; interleaved, its incumbent arm too);
3. power at ``--gain`` on the demo grid for the unpaired stratified rule and the coupled test (interleaved arms),
   and the r (trials per arm) at which the coupled test reaches today's power: stratified, independent arms, the
   demo's r;
4. the conclusions these figures support.

    nice -n 19 python benchmarks/coupled_pairs.py [--sims 4000] [--seed 38] [--shift 0.05] [--gain 0.15] [--quick]
        [--measured A]   (A: a measured agreement at pass rate 0.5, (1 + ρ̂) / 2, as ``rise pair`` prints it)
"""

from __future__ import annotations

import argparse
import time
import tomllib
from pathlib import Path

from evolve.experiment.config import parse_rate
from validate.adoption_sim import NULL_MODELS
from validate.coupled import COUPLED
from validate.coupled_sim import (
    DESIGNS,
    Design,
    measured_agreement,
    night_false_adoption,
    power_by_r,
    trials_needed,
)

DEMO = Path(__file__).resolve().parents[1] / "scripts" / "demo-experiment.toml"
AGREEMENTS = (0.5, 0.7, 0.85, 0.95)
SIZES = (1, 2, 4)
TARGET = 0.05


def demo_grid() -> tuple[list[str], int, float, list[float]]:
    """(development tasks, r, α, the prior's pass rates, 0.5 for a task it does not name) of the demo."""
    cfg = tomllib.loads(DEMO.read_text())
    tasks, ad = cfg["tasks"]["development"], cfg.get("adoption", {})
    prior = ad.get("prior", {})
    rates = [parse_rate(prior[t], f"adoption.prior.{t}") if t in prior else 0.5 for t in tasks]
    return tasks, int(cfg["r"]), float(ad.get("alpha", 0.05)), rates


def night_table(title: str, designs: tuple[Design, ...], n_tasks: int, r: int, alpha: float, shift: float,
                sims: int, seed: int) -> dict[tuple[str, int, float], float]:
    """Print and return (design, M, agreement) -> per-night false adoption, the worse of the task models; the
    same seed in every cell (common random numbers across designs)."""
    print(f"\n## {title}: {n_tasks} tasks × r={r}, α {alpha} a night split over M, {sims} nights per cell and "
          f"task model, seed {seed}")
    print(f"{'design':52} {'M':>2}" + "".join(f"{f'agree {a}':>12}" for a in AGREEMENTS))
    out = {}
    for d in designs:
        for m in SIZES:
            row = [max(night_false_adoption(d, n_tasks, r, m, alpha, a, shift, sims, seed, model)
                       for model in NULL_MODELS) for a in AGREEMENTS]
            out.update({(d.name, m, a): v for a, v in zip(AGREEMENTS, row)})
            print(f"{d.name:52} {m:>2}" + "".join(f"{v:12.1%}" for v in row))
    return out


def power_table(rates: list[float], r: int, alpha: float, gain: float, sims: int,
                seed: int) -> tuple[float, dict[str, dict[float, float]], dict[float, int | None]]:
    """Print power at ``gain`` per rule and agreement, and the coupled test's r for today's power."""
    n = len(rates)
    print(f"\n## 3. power at +{gain:.2f} on the demo grid: {n} tasks × r={r} ({r * n} trials per arm), incumbent "
          f"rates {', '.join(f'{p:.2f}' for p in rates)}, α {alpha}, interleaved arms, {sims} grids, seed {seed}")
    print(f"{'rule':34}" + "".join(f"{f'agree {a}':>12}" for a in AGREEMENTS))
    power = {pol: {a: power_by_r(pol, rates, [r], gain, a, alpha, sims, seed)[r] for a in AGREEMENTS}
             for pol in ("stratified", COUPLED)}
    for pol, row in power.items():
        print(f"{pol:34}" + "".join(f"{row[a]:12.1%}" for a in AGREEMENTS))
    today = power["stratified"][0.5]  # agreement 0.5 at rate 0.5 is ρ = 0: independent arms, as today
    need = {a: trials_needed(rates, today, gain, a, alpha, sims, seed, 2 * r) for a in AGREEMENTS}
    head = f"coupled: r for {today:.1%}"
    print(f"{head:34}" + "".join(f"{need[a]!s:>12}" for a in AGREEMENTS))
    head = f"  trials per arm (today {r * n})"
    print(f"{head:34}" + "".join(f"{(str(need[a] * n) if need[a] else f'> {2 * r * n}'):>12}" for a in AGREEMENTS))
    return today, power, need


def conclusions(null: dict, shifted: dict, shift: float, today: float, power: dict, need: dict, n: int,
                r: int, sims: int) -> None:
    margin = 2 * (TARGET * (1 - TARGET) / sims) ** 0.5  # two standard errors of a rate near the target
    print(f"\n## 4. conclusions (from the figures above; simulated, under the model stated; a rate's two standard "
          f"errors near {TARGET:.0%}: ±{margin:.1%})")
    worst = max(v for (d, _m, _a), v in null.items() if d.startswith("interleaved, coupled"))
    print(f"- coupled, no load shift: worst per-night false adoption over M = 1, 2, 4 and every agreement "
          f"{worst:.1%} ({'within' if worst <= TARGET else 'ABOVE'} the {TARGET:.0%} target)")
    for d in DESIGNS:
        w = max(v for (name, _m, a), v in shifted.items() if name == d.name)
        at_half = max(v for (name, _m, a), v in shifted.items() if name == d.name and a == 0.5)
        print(f"- load shift +{shift:.2f}, {d.name}: worst {w:.1%}, {at_half:.1%} with independent arms (agreement "
              f"0.5) ({'within' if w <= TARGET else 'ABOVE'} the target)")
    for a in AGREEMENTS:
        rr = need[a]
        print(f"- agreement {a}: power at the demo grid {power[COUPLED][a]:.1%} coupled vs {power['stratified'][a]:.1%}"
              f" stratified; the coupled test reaches today's {today:.1%} at "
              + (f"r = {rr} ({rr * n} trials per arm, {rr / r:.0%} of today's {r * n})" if rr else "no r tried"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000, help="nights or grids per cell and task model")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--shift", type=float, default=0.05, help="the load's shift of a pass rate")
    ap.add_argument("--gain", type=float, default=0.15)
    ap.add_argument("--quick", action="store_true", help="CI: 200 nights per cell (runs, figures rough)")
    ap.add_argument("--measured", type=float, default=None, help="a measured coupling as the simulations' column "
                    "(agreement at pass rate 0.5, (1 + ρ̂) / 2: what rise pair prints) added to the table")
    a = ap.parse_args()
    if a.measured is not None:
        if not 0.5 <= a.measured <= 1:
            ap.error(f"--measured is an agreement at pass rate 0.5, in [0.5, 1] (got {a.measured})")
        AGREEMENTS = tuple(sorted({*AGREEMENTS, round(a.measured, 3)}))
        print(f"column {round(a.measured, 3)}: the measured coupling (rise pair), beside the model's")
    sims = 200 if a.quick else a.sims
    started = time.monotonic()
    tasks, r, alpha, rates = demo_grid()
    n = len(tasks)
    beta = [measured_agreement(n, r, ag, sims, a.seed, "beta") for ag in AGREEMENTS]
    print("agreement at pass rate 0.5 (the columns) and what the Beta(0.7, 0.7) task model then has: "
          + ", ".join(f"{ag} -> {b:.2f}" for ag, b in zip(AGREEMENTS, beta)))
    plain = tuple(d for d in DESIGNS if d.unshared in (0.0, 1.0) and not (d.shared_arm and d.policy == COUPLED))
    null = night_table("1. per-night false adoption, no load shift", plain, n, r, alpha, 0.0, sims, a.seed)
    shifted = night_table(f"2. per-night false adoption, load shift +{a.shift:.2f}", DESIGNS, n, r, alpha, a.shift,
                          sims, a.seed)
    today, power, need = power_table(rates, r, alpha, a.gain, sims, a.seed)
    conclusions(null, shifted, a.shift, today, power, need, n, r, sims)
    print(f"({time.monotonic() - started:.0f} s)")
