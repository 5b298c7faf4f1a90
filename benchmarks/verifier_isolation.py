"""What the verifier's private view costs: one verifier phase of a starter task in the same started local
sandbox, private (trials/environments/verifier.py) against shared (the same steps in the agent's view),
alternated, median of N each.

    python benchmarks/verifier_isolation.py [--task write-json] [-n 10] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _support import quick_flag, require

from trials.environments.local import LocalEnvironment, bwrap_available
from trials.environments.verifier import run_verifier
from trials.tasks import load_task

STARTER = Path(__file__).resolve().parents[1] / "data" / "starter"


class SharedOnly(LocalEnvironment):
    """The same sandbox with the private view turned off (the weaker mode every sandbox falls back to)."""

    async def verifier_target(self):
        return "benchmark: shared mode"


async def measure(task_name: str, n: int) -> dict[str, list[float]]:
    task = load_task(STARTER / task_name)
    work = Path(tempfile.mkdtemp(prefix="rise-verifier-bench-"))
    env = SharedOnly(task, work / "trial")
    await env.start()
    times: dict[str, list[float]] = {"private": [], "shared": []}
    try:
        solve = (STARTER / task_name / "solution" / "solve.sh").read_text()
        await env.exec(solve, timeout=60)
        for i in range(n):
            for mode in ("private", "shared") if i % 2 == 0 else ("shared", "private"):
                target = LocalEnvironment.verifier_target if mode == "private" else SharedOnly.verifier_target
                env.verifier_target = target.__get__(env)  # type: ignore[method-assign]
                out = work / f"out-{mode}-{i}"
                t0 = time.perf_counter()
                run = await run_verifier(env, Path(task.tests_dir), out, workdir=task.config.environment.workdir,
                                         variables={}, timeout=60, user=None)
                times[mode].append(time.perf_counter() - t0)
                if run.isolation != mode or not (out / "reward.txt").is_file():
                    raise SystemExit(f"{mode} run {i} did not produce a reward: {run}")
    finally:
        await env.stop()
        shutil.rmtree(work, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="write-json")
    parser.add_argument("-n", type=int, default=10)
    quick_flag(parser)
    args = parser.parse_args()
    require(bwrap_available(), "bubblewrap (bwrap) and nsenter")
    n = 2 if args.quick else args.n
    times = asyncio.run(measure(args.task, n))
    private, shared = statistics.median(times["private"]), statistics.median(times["shared"])
    print(f"verifier phase of {args.task}, local sandbox, median of {n} each (alternated):")
    print(f"  private view {private * 1000:.0f} ms   shared view {shared * 1000:.0f} ms   "
          f"difference {(private - shared) * 1000:+.0f} ms ({private / shared:.2f}x)")


if __name__ == "__main__":
    main()
