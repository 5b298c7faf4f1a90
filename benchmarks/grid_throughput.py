"""Grid throughput of the oracle agent in the local sandbox at concurrency 1, 2 and 4, as ratios to 1.

Every level runs the same grid (the starter suite × r, oracle agent, ``--env local``) in a fresh job folder in
one process, one after the other. A trial here is mostly sandbox start/stop plus two short Python/bash
processes, so the ratio is bounded by the machine's free cores. ``--agent-sleep S`` prefixes every solve.sh
with ``sleep S`` to stand in for an agent that mostly waits on a model server (where concurrency pays most).

    python benchmarks/grid_throughput.py [--tasks data/starter] [-r 2] [--levels 1 2 4] [--agent-sleep 0] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from _support import quick_flag, require

from trials.agents import oracle_agent
from trials.environments.local import bwrap_available
from trials.grid import run_job
from trials.results import JobConfig
from trials.tasks import load_task_set

REPO = Path(__file__).resolve().parents[1]


def _slowed_copy(src: Path, dest: Path, sleep: float) -> Path:
    shutil.copytree(src, dest)
    for solve in dest.glob("*/solution/solve.sh"):
        text = solve.read_text()
        head, _, rest = text.partition("\n") if text.startswith("#!") else ("#!/bin/bash", "", text)
        solve.write_text(f"{head}\nsleep {sleep}\n{rest}")
    return dest


async def _one(tasks_dir: Path, r: int, concurrency: int, root: Path, limit: int | None) -> tuple[float, int, bool]:
    tasks = sorted(load_task_set(tasks_dir), key=lambda t: t.name)[:limit]
    config = JobConfig(job_id=f"bench-grid-c{concurrency}-{int(time.time())}", tasks_dir=str(tasks_dir),
                       task_names=sorted(t.name for t in tasks), agent=oracle_agent(), env_kind="local", r=r,
                       concurrency=concurrency)
    t0 = time.perf_counter()
    result = await run_job(config, root / f"c{concurrency}", progress=False, tasks=tasks)
    return time.perf_counter() - t0, len(result.trials), result.complete and result.metrics["pass_at_1"] == 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, default=REPO / "data" / "starter")
    ap.add_argument("-r", type=int, default=2)
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--agent-sleep", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=None, help="only the first LIMIT tasks (by name)")
    quick_flag(ap)
    args = ap.parse_args()
    if args.quick:
        args.r, args.levels, args.limit = 1, [1, 2], 1
    require(bwrap_available(), "bubblewrap (bwrap) and nsenter for the local sandbox")
    with tempfile.TemporaryDirectory(prefix="rise-bench-grid-") as tmp:
        root = Path(tmp)
        tasks_dir = args.tasks.resolve()
        if args.agent_sleep > 0:
            tasks_dir = _slowed_copy(tasks_dir, root / "tasks", args.agent_sleep)
        rows = []
        for c in args.levels:
            seconds, n, ok = asyncio.run(_one(tasks_dir, args.r, c, root, args.limit))
            rows.append((c, seconds, n, ok))
    base = rows[0][2] / rows[0][1]
    print(f"oracle grid, local sandbox: {rows[0][2]} trials per level, agent sleep {args.agent_sleep}s")
    print(f"{'concurrency':>11} {'seconds':>8} {'trials/s':>9} {'ratio to c=' + str(rows[0][0]):>14}  pass@1=1")
    for c, seconds, n, ok in rows:
        print(f"{c:>11} {seconds:>8.2f} {n / seconds:>9.2f} {n / seconds / base:>14.2f}  {ok}")


if __name__ == "__main__":
    main()
