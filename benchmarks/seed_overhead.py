"""Harness overhead per step of the seed agent, excluding model time and command waits.

Runs the real seed agent (real tmux in the real local sandbox, real HTTP to the scripted OpenAI-compatible
server, the real trajectory writer) for ``--steps`` episodes whose commands ask for no wait, then two
completion claims. Per step: overhead = step wall time − model call time − requested command waits; it covers
token counting, sending keys, capturing the pane twice, building the observation, parsing, the handshake and
rewriting trajectory.json. Prints the median and p90 in milliseconds and the share of the run's wall time
spent on overhead, for a run with a fixed per-request ``--delay`` (a stand-in for model latency) and with
commands that wait ``--duration`` seconds.

    python benchmarks/seed_overhead.py [--steps 20] [--delay 0.5] [--duration 0.5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from _support import quick_flag, require_sandbox, seed_trial, steps_of, terminus_reply


async def measure(steps: int, delay: float, duration: float) -> dict:
    script = [terminus_reply(commands=[(f"echo step {i}; ls /app\n", duration)]) for i in range(steps)]
    script += [terminus_reply(complete=True)] * 2
    with tempfile.TemporaryDirectory(prefix="seed-overhead-") as tmp:
        trial_dir = Path(tmp) / "trial"
        _, wall = await seed_trial(script, trial_dir, server_kw={"delay": delay, "context_limit": 1_000_000})
        data = list(steps_of(trial_dir))
    overheads = []
    for step in data[1:]:
        t = step["extra"]["timings"]
        waits = sum(c["arguments"].get("duration", 0.0) for c in step["tool_calls"]
                    if c["function_name"] == "bash_command")
        overheads.append(t["step_sec"] - t["model_sec"] - waits)
    overheads.sort()
    return {"steps": len(overheads), "delay_sec": delay, "duration_sec": duration,
            "overhead_median_ms": 1000 * statistics.median(overheads),
            "overhead_p90_ms": 1000 * overheads[int(0.9 * (len(overheads) - 1))],
            "overhead_share_of_wall": sum(overheads) / wall, "wall_sec": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per model request (scripted)")
    parser.add_argument("--duration", type=float, default=0.5, help="seconds each command asks to wait")
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.delay, args.duration = 3, 0.05, 0.05
    require_sandbox()
    for delay, duration in ((0.0, 0.0), (args.delay, args.duration)):
        r = asyncio.run(measure(args.steps, delay, duration))
        print(f"model delay {delay:.2f} s, command wait {duration:.2f} s: {r['steps']} steps, overhead median "
              f"{r['overhead_median_ms']:.1f} ms (p90 {r['overhead_p90_ms']:.1f} ms), "
              f"{100 * r['overhead_share_of_wall']:.1f}% of {r['wall_sec']:.1f} s wall")


if __name__ == "__main__":
    main()
