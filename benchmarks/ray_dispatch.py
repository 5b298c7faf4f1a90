"""The ray executor against local: dispatch overhead per trial (ms), and throughput at one versus two worker
nodes, as ratios measured in one run on a real local Ray cluster (a head and two worker nodes, started here).

Light trials: the oracle on copies of the starter task hello-file in the local sandbox, each solve.sh first
sleeping ``--agent-sleep`` seconds (an agent that mostly waits on its model server).

- Overhead: the same grid of ``-n`` trials one at a time on the local executor (concurrency 1) and on the ray
  executor with one slot (a resource only one slot of one node offers); (ray − local) / n is what Ray adds
  per trial: submission, shipping, the worker, the tar of the trial folder and its delivery.
- Scale-out: ``-n`` trials on one worker node's slots, then on both nodes' (twice the slots), as trials/s and
  their ratio. Both nodes share this machine's cores, so the ratio shows the executor's reach, not new CPUs.

    python benchmarks/ray_dispatch.py [-n 8] [--slots 2] [--agent-sleep 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from _support import HELLO, quick_flag, require

from trials.agents import oracle_agent
from trials.environments.local import bwrap_available
from trials.executors.config import ExecutorConfig
from trials.grid import run_job
from trials.results import JobConfig


def _tasks(root: Path, n: int, sleep: float) -> list[str]:
    """``n`` copies of hello-file whose solution sleeps first (one cell per task, r = 1)."""
    names = []
    for i in range(n):
        name = f"light-{i:02d}"
        dest = root / name
        shutil.copytree(HELLO, dest)
        (dest / "task.toml").write_text((dest / "task.toml").read_text().replace('"hello-file"', f'"{name}"'))
        solve = dest / "solution" / "solve.sh"
        solve.write_text(f"#!/bin/bash\nsleep {sleep}\n" + solve.read_text().partition("\n")[2])
        names.append(name)
    return names


def _grid(tasks: Path, names: list[str], job: Path, executor: ExecutorConfig | None, concurrency: int = 1
          ) -> float:
    config = JobConfig(job_id=job.name, tasks_dir=str(tasks), task_names=names, agent=oracle_agent(),
                       env_kind="local", r=1, concurrency=concurrency)
    t0 = time.perf_counter()
    res = asyncio.run(run_job(config, job, progress=False, executor=executor))
    seconds = time.perf_counter() - t0
    if not (res.complete and res.metrics["pass_at_1"] == 1.0):
        raise SystemExit(f"{job}: the grid did not pass completely: {res.metrics['counts']}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=8, help="trials per grid")
    ap.add_argument("--slots", type=int, default=2, help="trial slots per worker node")
    ap.add_argument("--agent-sleep", type=float, default=2.0)
    quick_flag(ap)
    args = ap.parse_args()
    if args.quick:
        args.n, args.slots, args.agent_sleep = 2, 1, 0.0
    require(bwrap_available(), "bubblewrap (bwrap) and nsenter for the local sandbox")
    require(shutil.which("ray") is not None, "Ray (pip install -e '.[dev]'): the ray command")
    from trials.executors.local_cluster import LocalRayCluster

    nodes = {"a": {"rise_trial": args.slots, "node_a": args.slots, "one_slot": 1},
             "b": {"rise_trial": args.slots, "node_b": args.slots}}
    with tempfile.TemporaryDirectory(prefix="rise-bench-ray-") as tmp:
        root = Path(tmp)
        names = _tasks(root / "tasks", args.n, args.agent_sleep)
        t0 = time.perf_counter()
        with LocalRayCluster(root / "cluster", nodes) as cluster:
            up = time.perf_counter() - t0
            ray = ExecutorConfig(kind="ray", address=cluster.address)
            local_1 = _grid(root / "tasks", names, root / "local-1", None)
            for node in () if args.quick else ("a", "b"):  # start each node's workers before the timing
                _grid(root / "tasks", names[:args.slots], root / f"warm-{node}",
                      ray.model_copy(update={"resources": {f"node_{node}": 1}}), concurrency=args.slots)
            ray_1 = _grid(root / "tasks", names, root / "ray-1", ray.model_copy(update={"resources": {"one_slot": 1}}))
            one_node = _grid(root / "tasks", names, root / "node-a", ray.model_copy(update={"resources": {"node_a": 1}}))
            two_nodes = _grid(root / "tasks", names, root / "nodes-ab", ray)
    n = args.n
    print(f"light trials: oracle, local sandbox, solve.sh sleeps {args.agent_sleep}s; {n} trials per grid; "
          f"cluster start-up {up:.1f}s (head + 2 nodes, not in the figures)")
    print(f"dispatch, one trial at a time: local {local_1 / n * 1000:.0f} ms/trial, ray {ray_1 / n * 1000:.0f} "
          f"ms/trial -> ray overhead {(ray_1 - local_1) / n * 1000:+.0f} ms per trial "
          f"(ratio ray/local {ray_1 / local_1:.2f})")
    print(f"scale-out, {args.slots} slot(s) per node: one node {n / one_node:.2f} trials/s, two nodes "
          f"{n / two_nodes:.2f} trials/s -> ratio two/one {one_node / two_nodes:.2f}")


if __name__ == "__main__":
    main()
