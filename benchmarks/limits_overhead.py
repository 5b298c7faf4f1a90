"""What the uid switch, the /etc masking and the cgroup limits (issue 44 routes 5 and 6) cost per trial.

Measured in one run, with and without each part, alternating so that the machine's drift hits both alike:
- a local sandbox's start + stop (hello-file: its Dockerfile replayed), with its cgroup and masks vs without;
- one ``exec("true")`` in that sandbox, which now joins the cgroup through a ``/bin/sh`` shim first;
- a confined process (``python -c pass``) from its command line to its end: unprivileged uid, masks and its own
  cgroup vs as root without them.
Prints medians in milliseconds and the ratio with/without for each; then the per-trial sum for a trial of
``--execs`` sandbox commands.

    python benchmarks/limits_overhead.py [--rounds 10] [--execs 60]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from _support import HELLO, quick_flag, require_sandbox


def _without_parts():
    """The platform as it was before: no cgroups, no masks, no uid switch."""
    from trials import confine, limits

    return [mock.patch.object(limits, "make_cgroup", lambda *a: "switched off for the benchmark"),
            mock.patch.object(confine, "mask_binds", list),
            mock.patch.object(confine, "harness_identity", lambda: "switched off for the benchmark")]


async def _sandbox_round(root: Path, execs: int) -> tuple[float, float]:
    from trials.environments.local import LocalEnvironment
    from trials.tasks.load import load_task

    env = LocalEnvironment(load_task(HELLO), tempfile.mkdtemp(dir=root), "bench-limits")
    t0 = time.perf_counter()
    await env.start()
    t1 = time.perf_counter()
    for _ in range(execs):
        await env.exec("true")
    t2 = time.perf_counter()
    await env.stop()
    t3 = time.perf_counter()
    return (t1 - t0) + (t3 - t2), (t2 - t1) / execs


def _confined_round(root: Path) -> float:
    from trials import confine

    conf = confine.for_harness([])
    folder = Path(tempfile.mkdtemp(dir=root))
    confine.hand_over(folder, conf.ids)
    from trials import limits

    cg, _ = limits.harness_cgroup()
    t0 = time.perf_counter()
    subprocess.run(confine.launch_argv(conf, folder, [sys.executable, "-c", "pass"], cg), check=True, env={})
    if cg is not None:
        cg.finish()
    return time.perf_counter() - t0


def measure(rounds: int, execs: int) -> dict[str, tuple[float, float]]:
    samples: dict[str, dict[bool, list[float]]] = {k: {True: [], False: []} for k in ("sandbox", "exec", "harness")}
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        for _ in range(rounds):
            for on in (True, False):
                patches = [] if on else _without_parts()
                for p in patches:
                    p.start()
                try:
                    life, per_exec = asyncio.run(_sandbox_round(Path(tmp), execs))
                    samples["sandbox"][on].append(life)
                    samples["exec"][on].append(per_exec)
                    samples["harness"][on].append(_confined_round(Path(tmp)))
                finally:
                    for p in patches:
                        p.stop()
    return {k: (statistics.median(v[True]), statistics.median(v[False])) for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--execs", type=int, default=60, help="sandbox commands per trial (the seed: 2-5 a step)")
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.execs = 1, 3
    require_sandbox()
    res = measure(args.rounds, args.execs)
    labels = {"sandbox": "local sandbox start + stop", "exec": "one exec in it", "harness": "a confined process"}
    for k, (on, off) in res.items():
        print(f"{labels[k]:28s} with {1000 * on:8.1f} ms  without {1000 * off:8.1f} ms  ratio {on / off:5.2f}")
    per_trial = (res["sandbox"][0] - res["sandbox"][1]) + args.execs * (res["exec"][0] - res["exec"][1]) + (
        res["harness"][0] - res["harness"][1])
    print(f"per trial ({args.execs} sandbox commands, one harness process): {1000 * per_trial:+.1f} ms")


if __name__ == "__main__":
    main()
