"""What the confined harness's narrow doors cost: a sandbox command through the trial channel against the same
command on the sandbox directly, and a confined launcher's start against a plain one, interleaved in one run.

    python benchmarks/channel_overhead.py [-n 40] [--launchers 5] [--quick]

Channel: one local sandbox, one :class:`trials.channel.TrialChannel` in front of it; each round runs
``exec("true")`` once directly and once through a :class:`ChannelEnvironment` (HTTP over the unix socket,
JSON), in alternating order. Launchers: ``python -c pass`` started plainly and under the harness's bubblewrap
confinement (``trials.confine``), alternating; a warm spare pays this before its trial, a cold start on the
trial's path. Prints medians and the differences.
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

from _support import HELLO, quick_flag, require_sandbox

from trials import confine
from trials.channel import TrialChannel
from trials.endpoints.spec import EndpointSpec
from trials.environments.channel import ChannelEnvironment
from trials.environments.local import LocalEnvironment
from trials.tasks.load import load_task


async def exec_rounds(n: int) -> tuple[list[float], list[float]]:
    direct, channelled = [], []
    with tempfile.TemporaryDirectory(prefix="rise-bench-channel-") as tmp:
        env = LocalEnvironment(load_task(HELLO), Path(tmp) / "trial", job_id="bench-channel")
        await env.start()
        channel = TrialChannel(env, [EndpointSpec(base_url="http://127.0.0.1:9/v1", model="none")])
        await channel.start(Path(tmp) / "c.sock")
        remote = ChannelEnvironment(str(Path(tmp) / "c.sock"))
        try:
            await remote.exec("true")  # warm-up: the connection
            for i in range(n):
                for way in ((env, direct), (remote, channelled))[:: 1 if i % 2 else -1]:
                    t0 = time.perf_counter()
                    res = await way[0].exec("true")
                    way[1].append(time.perf_counter() - t0)
                    if not res.ok:
                        raise RuntimeError(f"exec failed: {res}")
        finally:
            await remote.stop()
            await channel.close()
            await env.stop()
    return direct, channelled


def launcher_rounds(n: int) -> tuple[list[float], list[float]]:
    plain, confined = [], []
    conf = confine.for_harness([])
    cmd = [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory(prefix="rise-bench-confine-") as tmp:
        for i in range(n):
            for argv, out in ((cmd, plain), (conf.argv(Path(tmp), cmd), confined))[:: 1 if i % 2 else -1]:
                t0 = time.perf_counter()
                subprocess.run(argv, check=True, env=None if argv is cmd else {})
                out.append(time.perf_counter() - t0)
    return plain, confined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=40, help="exec rounds (one direct, one through the channel)")
    parser.add_argument("--launchers", type=int, default=5, help="interpreter starts of each kind")
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.n, args.launchers = 5, 1
    require_sandbox()
    direct, channelled = asyncio.run(exec_rounds(args.n))
    d, c = statistics.median(direct), statistics.median(channelled)
    print(f"exec('true') in the local sandbox, {args.n} rounds: direct median {1000 * d:.1f} ms, through the "
          f"channel {1000 * c:.1f} ms: +{1000 * (c - d):.1f} ms per command ({c / d:.2f}x)")
    plain, confined = launcher_rounds(args.launchers)
    p, q = statistics.median(plain), statistics.median(confined)
    print(f"python -c pass, {args.launchers} starts: plain median {1000 * p:.0f} ms, confined {1000 * q:.0f} ms: "
          f"+{1000 * (q - p):.0f} ms")


if __name__ == "__main__":
    main()
