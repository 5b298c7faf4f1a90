"""Sandbox start+stop latency, local (bubblewrap) vs docker, measured in one run.

    python benchmarks/sandbox_latency.py [-n 10] [--task tests/data/env_tasks/hello] [--quick]

Each sample is one full ``start()`` (for local: keeper + Dockerfile replay; for docker: cached image, container
create+start, the first exec) plus one ``exec("true")`` plus ``stop()``. The docker image is built once before
timing (a warm-up sample, not counted), so the numbers compare steady-state trial overhead. Prints the median and
the ratio docker/local.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _support import REPO as ROOT
from _support import quick_flag, require

from trials.environments.factory import make_environment
from trials.environments.images import docker_available
from trials.environments.local import bwrap_available
from trials.tasks.load import load_task


async def sample(kind: str, task, workdir: Path, i: int) -> float:
    env = make_environment(kind, task, workdir / f"{kind}-{i}", job_id="bench-sandbox-latency")
    t0 = time.perf_counter()
    await env.start()
    try:
        result = await env.exec("true")
        assert result.ok, result
    finally:
        await env.stop()
    return time.perf_counter() - t0


async def measure(kind: str, task, n: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix=f"rise-bench-{kind}-") as tmp:
        await sample(kind, task, Path(tmp), -1)  # warm-up: builds/caches the image
        return [await sample(kind, task, Path(tmp), i) for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10, help="samples per kind")
    ap.add_argument("--task", default=str(ROOT / "tests" / "data" / "env_tasks" / "hello"))
    quick_flag(ap)
    args = ap.parse_args()
    if args.quick:  # local only: the docker warm-up may build the task image, minutes on a cold cache
        args.n = 1
    require(bwrap_available() or (docker_available() and not args.quick),
            "a sandbox: bubblewrap + nsenter (or, for a full run, a Docker engine)")
    task = load_task(args.task)
    medians: dict[str, float] = {}
    for kind, ok, why in (("local", bwrap_available(), "bwrap/nsenter missing"),
                          ("docker", docker_available() and not args.quick, "--quick, or no Docker engine")):
        if not ok:
            print(f"{kind:6s}: skipped ({why})")
            continue
        times = asyncio.run(measure(kind, task, args.n))
        medians[kind] = statistics.median(times)
        print(f"{kind:6s}: median {medians[kind] * 1000:7.1f} ms  min {min(times) * 1000:7.1f}  "
              f"max {max(times) * 1000:7.1f}  (n={args.n}, start+exec+stop, task {task.name})")
    if len(medians) == 2:
        print(f"ratio docker/local: {medians['docker'] / medians['local']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
