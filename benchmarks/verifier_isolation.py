"""What the verifier's isolation costs: one verifier phase of a starter task in the same started sandbox, in each
mode, alternated, median of N each. Local: the private view (trials/environments/verifier.py) against the shared
one. Docker also: the private view with the tests' tools from a fresh container of the task image (the default,
a container started and removed per run, as in a trial) and from the agent's own container.

    python benchmarks/verifier_isolation.py [--task write-json] [-n 10] [--env local|docker] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
# mode -> (private view?, RISE_VERIFIER_TOOLS)
MODES = {"local": {"private": (True, "image"), "shared": (False, "image")},
         "docker": {"private, image tools": (True, "image"), "private, sandbox tools": (True, "sandbox"),
                    "shared": (False, "image")}}


def _sandbox(kind: str, task, trial: Path):
    if kind == "local":
        return LocalEnvironment(task, trial)
    from trials.environments.docker import DockerEnvironment

    return DockerEnvironment(task, trial)


async def _one(env, task, out: Path, private: bool, tools: str) -> tuple[float, str]:
    os.environ["RISE_VERIFIER_TOOLS"] = tools
    original = type(env).verifier_target

    async def shared():
        return "benchmark: shared mode"

    env.verifier_target = original.__get__(env) if private else shared  # type: ignore[method-assign]
    t0 = time.perf_counter()
    run = await run_verifier(env, Path(task.tests_dir), out, workdir=task.config.environment.workdir,
                             variables={}, timeout=60, user=None)
    if getattr(env, "_tools_id", None):  # a trial removes its tools container when it stops: count that too
        await asyncio.to_thread(lambda: env.client.containers.get(env._tools_id).remove(force=True))
        env._tools_id = None
    seconds = time.perf_counter() - t0
    if run.isolation != ("private" if private else "shared") or not (out / "reward.txt").is_file():
        raise SystemExit(f"a run did not produce a reward: {run}")
    return seconds, (out / "reward.txt").read_text().strip()


async def measure(kind: str, task_name: str, n: int) -> dict[str, list[float]]:
    task = load_task(STARTER / task_name)
    work = Path(tempfile.mkdtemp(prefix="rise-verifier-bench-"))
    env = _sandbox(kind, task, work / "trial")
    await env.start()
    modes = MODES[kind]
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        await env.exec((STARTER / task_name / "solution" / "solve.sh").read_text(), timeout=60)
        for i in range(n):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for mode in order:
                seconds, reward = await _one(env, task, work / f"out-{i}-{len(times[mode])}-{mode[:7]}",
                                             *modes[mode])
                if reward != "1":
                    raise SystemExit(f"{mode}: the oracle's reward is {reward!r}")
                times[mode].append(seconds)
    finally:
        os.environ.pop("RISE_VERIFIER_TOOLS", None)
        await env.stop()
        shutil.rmtree(work, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="write-json")
    parser.add_argument("--env", choices=sorted(MODES), default="local")
    parser.add_argument("-n", type=int, default=10)
    quick_flag(parser)
    args = parser.parse_args()
    require(bwrap_available(), "bubblewrap (bwrap) and nsenter")
    if args.env == "docker":
        from trials.environments.images import BASE_IMAGE, docker_available, docker_client, image_exists

        require(docker_available() and image_exists(docker_client(), BASE_IMAGE), f"Docker and {BASE_IMAGE}")
    n = 2 if args.quick else args.n
    times = asyncio.run(measure(args.env, args.task, n))
    medians = {mode: statistics.median(t) for mode, t in times.items()}
    shared = medians["shared"]
    print(f"verifier phase of {args.task}, {args.env} sandbox, median of {n} each (alternated):")
    for mode, m in medians.items():
        print(f"  {mode:24s} {m * 1000:6.0f} ms   {(m - shared) * 1000:+6.0f} ms against shared ({m / shared:.2f}x)")


if __name__ == "__main__":
    main()
