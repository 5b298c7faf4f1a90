"""What a trial's digest costs: detector time per trial (median ms) on real trial folders, computed and cached.

    python benchmarks/digest.py [--trials DIR] [--rounds 5] [--quick]

For every trial folder under ``--trials`` (any depth; default: the real trial folders of the seed harness
checked in under ``tests/data/analysis/trials``, see its README), in the same run: the full digest computed from scratch (trajectory + spans),
the trajectory-only digest (the ablation), and the cached digest read back; the best of ``--rounds`` per trial,
then the median over trials. Ratios: full / trajectory-only (what reading the spans adds) and computed / cached
(what the cache saves an analyst's repeated ``digest`` tool calls).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _support import REPO, quick_flag, require

DEFAULT_TRIALS = REPO / "tests" / "data" / "analysis" / "trials"


def trial_folders(root: Path) -> list[Path]:
    return sorted({p.parent.parent for name in ("trajectory.json", "trajectory.rich.json")
                   for p in root.rglob(f"agent/{name}")})


def best_ms(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=Path, default=DEFAULT_TRIALS, help="folder holding trial folders")
    parser.add_argument("--rounds", type=int, default=5)
    quick_flag(parser)
    args = parser.parse_args()
    from evolve.roles.analysis.digest import compute_digest, digest

    found = trial_folders(args.trials)
    require(bool(found), f"trial folders (agent/trajectory*.json) under {args.trials}")
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory() as tmp:  # digests are cached beside trials: never write into the repo
        rows = []
        for i, src in enumerate(found[:3] if args.quick else found):
            trial = Path(tmp) / f"{i:03d}" / src.name
            shutil.copytree(src, trial, ignore=shutil.ignore_patterns("digest*.json"))
            full = best_ms(lambda t=trial: compute_digest(t, "full"), rounds)
            traj = best_ms(lambda t=trial: compute_digest(t, "trajectory"), rounds)
            d = digest(trial)  # writes the cache
            cached = best_ms(lambda t=trial: digest(t), rounds)
            spans = (trial / "agent" / "spans.jsonl").stat().st_size if (trial / "agent" / "spans.jsonl").is_file() \
                else 0
            rows.append((src.name, d.episodes, len(d.hits), spans, full, traj, cached))
    print(f"{'trial':32} {'episodes':>8} {'hits':>5} {'spans KB':>9} {'full ms':>8} {'traj ms':>8} {'cached ms':>9}")
    for name, eps, hits, spans, full, traj, cached in rows:
        print(f"{name:32} {eps:8d} {hits:5d} {spans / 1024:9.1f} {full:8.2f} {traj:8.2f} {cached:9.3f}")
    med = [statistics.median(r[i] for r in rows) for i in (4, 5, 6)]
    print(f"\n{len(rows)} trial(s); median per trial: full digest {med[0]:.2f} ms, trajectory-only {med[1]:.2f} ms, "
          f"cached {med[2]:.3f} ms")
    print(f"ratios (medians, this run): full / trajectory-only = {med[0] / max(med[1], 1e-9):.2f}; "
          f"computed / cached = {med[0] / max(med[2], 1e-9):.1f}")


if __name__ == "__main__":
    main()
