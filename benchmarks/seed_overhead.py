"""Harness overhead per step of the seed agent, excluding model time and command waits.

Runs the real seed agent (real tmux in the real local sandbox, real HTTP to the scripted OpenAI-compatible
server, the real trajectory writer) for ``--steps`` episodes whose commands ask for no wait, then two
completion claims. Per step: overhead = step wall time − model call time − requested command waits; it covers
token counting, sending keys, capturing the pane twice, building the observation, parsing, the handshake and
rewriting the trajectory. Prints the median and p90 in milliseconds and the share of the run's wall time
spent on overhead, for a run with a fixed per-request ``--delay`` (a stand-in for model latency) and with
commands that wait ``--duration`` seconds.

Then the phases of whole trials through the real runner (``trials.runner.run_trial``, the seed agent launched
as the evaluator launches it, through ``monitor.host`` in its own process), ``--trials`` times: one command
that waits 1 s, then the completion handshake, against a scripted model answering at once. Phases: environment
start (docker: with the harness's tmux session, see trials/terminal.py); harness start (the agent process
spawned → the loop's first prompt: interpreter, imports, attaching, the tmux session (docker: adopted), the
first screen); the loop (first prompt → last step), its model wait and its own overhead;
harness end (last step → the process has exited); verifier; stop. The agent phase's own overhead is the agent
phase minus model wait; the issue's target is at most 0.8 s above the loop's (loop minus model wait).

    python benchmarks/seed_overhead.py [--steps 20] [--delay 0.5] [--duration 0.5] [--trials 3] [--gap 3]
                                       [--env local|docker]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

from _support import HELLO, quick_flag, require_sandbox, seed_trial, steps_of, terminus_reply


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


def _stamp(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


async def trial_phases(env_kind: str, wait: float = 1.0) -> dict[str, float]:
    """One scripted trial through the runner; its phases in seconds (see the module docstring)."""
    from monitor.agents import resolve_agent
    from trials import runner
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec
    from trials.tasks.load import load_task

    script = [terminus_reply(commands=[("echo 'Hello, world!' > /app/hello.txt\n", wait)])]
    script += [terminus_reply(complete=True)] * 2
    spawned: list[float] = []
    launch = runner.run_agent_process

    async def timed_launch(*args, **kwargs):  # the wall clock at the spawn (the harness stamps its steps so)
        spawned.append(time.time())
        return await launch(*args, **kwargs)

    runner.run_agent_process = timed_launch
    try:
        with tempfile.TemporaryDirectory(prefix="seed-phases-") as tmp, \
                ScriptedServer(script, model="scripted", context_limit=1_000_000) as srv:
            trial_dir = Path(tmp) / "trial"
            res = await runner.run_trial(load_task(HELLO), resolve_agent("seed"),
                                         EndpointSpec(base_url=srv.base_url, model="scripted"), trial_dir,
                                         env_kind, job_id=f"bench-phases-{env_kind}")
            steps = list(steps_of(trial_dir))
    finally:
        runner.run_agent_process = launch
    if res.status != "passed":
        raise RuntimeError(f"the scripted trial did not pass: {res.status} {res.failure_class} "
                           f"{res.infra_cause} {res.infra_message} {res.agent_error}")
    d = res.durations
    loop_start, loop_end = _stamp(steps[0]["timestamp"]), _stamp(steps[-1]["timestamp"])
    model = sum(s["extra"]["timings"]["model_sec"] for s in steps[1:])
    loop = loop_end - loop_start
    return {"env_start": d.env_start, "harness_start": loop_start - spawned[0], "loop": loop, "model_wait": model,
            "loop_overhead": loop - model, "harness_end": d.agent - (loop_end - spawned[0]), "agent": d.agent,
            "agent_overhead": d.agent - model, "verifier": d.verifier, "stop": d.env_stop, "total": d.total}


PHASES = ("env_start", "harness_start", "loop", "model_wait", "loop_overhead", "harness_end", "agent",
          "agent_overhead", "verifier", "stop", "total")


def report_phases(env_kind: str, trials: int, gap: float) -> None:
    async def all_trials() -> list[dict[str, float]]:
        runs = []
        for i in range(trials + 1):
            if i:
                await asyncio.sleep(gap)
            runs.append(await trial_phases(env_kind))
        return runs

    first, *runs = asyncio.run(all_trials())
    med = {k: statistics.median(r[k] for r in runs) for k in PHASES}
    print(f"phases of a scripted trial, env {env_kind}: the first trial of this process (its launcher made when "
          f"the trial started), then the median of {trials} more, {gap:g} s apart (a real trial lasts minutes; "
          "a spare's imports take seconds of CPU). Seconds; each of those runs in brackets:")
    print(f"  {'':15s} {'first':>6s}  {'median':>6s}")
    for k in PHASES:
        print(f"  {k:15s} {first[k]:6.3f}  {med[k]:6.3f}  [{', '.join(f'{r[k]:.3f}' for r in runs)}]")
    loop_own = med["loop_overhead"]
    # ratios per run, then their median: the machine is noisy, a ratio inside one run is the signal
    start_ratio = statistics.median(r["harness_start"] / r["loop_overhead"] for r in runs)
    agent_ratio = statistics.median(r["agent_overhead"] / r["loop_overhead"] for r in runs)
    above = statistics.median(r["agent_overhead"] - r["loop_overhead"] for r in runs)
    print(f"  ratios to the loop (minus model wait, {loop_own:.3f} s, the 1 s command wait included): harness start "
          f"{start_ratio:.2f}, agent-phase overhead {agent_ratio:.2f}; agent-phase overhead above the loop's "
          f"{above:.3f} s: {'within' if above <= 0.8 else 'over'} the 0.8 s target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="episodes per step-overhead run (0: skip those)")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per model request (scripted)")
    parser.add_argument("--duration", type=float, default=0.5, help="seconds each command asks to wait")
    parser.add_argument("--trials", type=int, default=3,
                        help="whole scripted trials for the phase table (after a first one, shown apart)")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between those trials")
    parser.add_argument("--env", default="local", choices=("local", "docker"), help="sandbox of the phase table")
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.delay, args.duration, args.trials, args.env, args.gap = 3, 0.05, 0.05, 1, "local", 0.0
    require_sandbox()
    for delay, duration in ((0.0, 0.0), (args.delay, args.duration)) if args.steps > 0 else ():
        r = asyncio.run(measure(args.steps, delay, duration))
        print(f"model delay {delay:.2f} s, command wait {duration:.2f} s: {r['steps']} steps, overhead median "
              f"{r['overhead_median_ms']:.1f} ms (p90 {r['overhead_p90_ms']:.1f} ms), "
              f"{100 * r['overhead_share_of_wall']:.1f}% of {r['wall_sec']:.1f} s wall")
    if args.trials > 0:
        report_phases(args.env, args.trials, args.gap)


if __name__ == "__main__":
    main()
