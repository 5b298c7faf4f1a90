"""What the runtime monitor costs: per span, and as a share of a real trial's wall time.

    python benchmarks/monitor_overhead.py [--calls 20000] [--no-trial]

1. Per span: seed-harness functions that are boundaries in ``harness_seed/recording.toml`` (realistic
   arguments: a 24 KB terminal capture, a JSON reply, a ParseResult) and a trivial function are timed
   uninstrumented and then instrumented by the seed's recording config, in the same process. Cost per span
   = (instrumented − bare) / calls, split into what the harness's thread pays (capture, span, enqueue) and
   what the writer thread does after (redact, encode, append to a real ``spans.jsonl``); also the all-sync
   write mode, the ``sdk`` backend, and the bare OpenTelemetry SDK span for reference.
2. Trial share: the seed harness solves a starter task (scripted model over real HTTP, local bwrap sandbox,
   real tmux) in this process: a warm-up, then bare, then instrumented like ``monitor.host`` does it. The
   monitor's own time in the instrumented trial is measured directly (its enter/leave hooks on the harness's
   thread, and the writer thread's CPU time) and divided by the trial's wall time.
Goal (issue 4): ≤ 30 µs per span, ≤ 1% of trial time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _support import REPO, quick_flag

from monitor.config import RecordingConfig
from monitor.export import JsonLinesSink
from monitor.instrument import Instrumentation
from monitor.redact import Redactor
from monitor.tracer import make_tracer

GOAL_US, GOAL_SHARE = 30.0, 0.01


def _best_of(fn, calls: int, repeats: int = 5) -> float:
    """Seconds per call: the best of a few repeats (the machine is shared; the minimum is the signal)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def workloads():
    """(name, boundary, zero-arg callable) with realistic arguments, calling through module attributes."""
    from harness_seed import completion, observation, parsing

    screen = "\n".join(f"user@box:/app$ ls -la line {i} " + "x" * 60 for i in range(300))  # ~24 KB
    reply = json.dumps({"analysis": "The file is missing.", "plan": "Create it and check.",
                        "commands": [{"keystrokes": "printf 'Hello, world!\\n' > /app/hello.txt\n",
                                      "duration": 0.5}], "task_complete": False})
    parsed = parsing.parse_response(reply, "json")
    handshake = completion.CompletionHandshake(2)
    return [
        ("limit_output(24 KB capture)", "observation:limit_output",
         lambda: observation.limit_output(screen, 10000)),
        ("parse_response(JSON reply)", "parsing:parse_response", lambda: parsing.parse_response(reply, "json")),
        ("build_observation(24 KB x2)", "observation:build_observation",
         lambda: observation.build_observation(screen, screen[-4000:], screen[:-200], True)),
        ("CompletionHandshake.on_reply", "completion:CompletionHandshake.on_reply",
         lambda: handshake.on_reply(parsed)),
    ]


def trivial_config() -> RecordingConfig:
    return RecordingConfig.from_toml('[[boundary]]\ntarget = "observation:limit_output"\n')


def _redactor() -> Redactor:
    return Redactor({"BENCH_API_KEY": "sk-bench0123456789abcdef"})


def span_costs(fn, calls: int, config: RecordingConfig, out_dir: Path) -> dict[str, float]:
    """µs per call: bare, and per span: lean hot path, lean writer (off-thread), lean all-sync, sdk hot path."""
    bare = _best_of(fn, calls)
    res = {"bare": bare * 1e6}
    # lean, hot path: what the harness's own thread pays (the writer thread's work measured separately)
    collected: list = []
    inst = Instrumentation("harness_seed", config, make_tracer("lean", collected.append), _redactor(),
                           defer_redaction=True)
    inst.apply()
    try:
        res["lean_hot"] = (_best_of(fn, calls) - bare) * 1e6
    finally:
        inst.remove()
    spans = collected[-calls:]
    writer = JsonLinesSink(out_dir / "writer.jsonl", {"service.name": "bench"}, redact=_redactor().redact,
                           mode="sync")
    t0 = time.perf_counter()
    for i in range(0, len(spans), 64):  # the writer thread drains in batches like this
        writer._write(spans[i:i + 64])
    res["lean_writer"] = (time.perf_counter() - t0) / max(len(spans), 1) * 1e6
    writer.shutdown()
    # lean, everything on the caller's thread (mode = "sync")
    sink = JsonLinesSink(out_dir / "sync.jsonl", {"service.name": "bench"}, redact=_redactor().redact, mode="sync")
    inst = Instrumentation("harness_seed", config, make_tracer("lean", sink.submit), _redactor(),
                           defer_redaction=True)
    inst.apply()
    try:
        res["lean_sync"] = (_best_of(fn, calls) - bare) * 1e6
    finally:
        inst.remove()
        sink.shutdown()
    # sdk backend, hot path (SDK span + capture + redaction; export to a list)
    tracer = make_tracer("sdk", [].append)
    inst = Instrumentation("harness_seed", config, tracer, _redactor(), defer_redaction=True)
    inst.apply()
    try:
        res["sdk_hot"] = (_best_of(fn, calls) - bare) * 1e6
    finally:
        inst.remove()
        tracer.shutdown()
    return res


def bare_sdk_span(calls: int) -> float:
    """µs per span of the OpenTelemetry SDK alone: start_as_current_span, no capture, no exporter."""
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("bench")

    def fn():
        with tracer.start_as_current_span("x"):
            pass

    return (_best_of(fn, calls) - _best_of(lambda: None, calls)) * 1e6


# ---------------------------------------------------------------------------------------------- trial
class _Solver:
    """Scripted Terminus replies for hello-file: write the file, then claim completion (twice: handshake)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: dict) -> str:
        self.calls += 1
        if self.calls > 1:
            return json.dumps({"analysis": "Done.", "plan": "", "commands": [], "task_complete": True})
        return json.dumps({"analysis": "Nothing yet.", "plan": "Write it.", "task_complete": False, "commands": [
            {"keystrokes": "printf 'Hello, world!\\n' > /app/hello.txt; cat /app/hello.txt\n", "duration": 0.3}]})


async def _one_trial(work: Path, instrument: bool) -> tuple[float, int, float, float]:
    """(wall sec of run_trial, spans, monitor sec on the harness's thread, writer thread CPU sec)."""
    from harness_seed import main as seed_main
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec
    from trials.environments.local import LocalEnvironment
    from trials.harness_api import TrialSpec
    from trials.tasks.load import load_task

    task = load_task(REPO / "data" / "starter" / "hello-file")
    trial_dir = work / ("instrumented" if instrument else "bare")
    (trial_dir / "agent").mkdir(parents=True)
    env = LocalEnvironment(task, trial_dir)
    await env.start()
    inst = sink = tracer = None
    spent, writer_cpu = [0.0], [0.0]
    try:
        with ScriptedServer(_Solver(), model="scripted") as srv:
            spec = TrialSpec(trial_id="bench__r1", task_name=task.name, instruction=task.instruction,
                             env=env.handle(), endpoint=EndpointSpec(base_url=srv.base_url, model="scripted"),
                             agent_dir=str(trial_dir / "agent"), timeout_sec=120)
            if instrument:
                config = RecordingConfig.load(REPO / "harness_seed" / "recording.toml")
                redactor = Redactor()
                sink = JsonLinesSink(trial_dir / "agent" / "spans.jsonl", {"service.name": "bench"},
                                     redact=redactor.redact, mode=config.write)
                write = sink._write

                def timed_write(batch, _w=write):  # the writer thread's CPU time, for the total
                    t0 = time.thread_time()
                    try:
                        return _w(batch)
                    finally:
                        writer_cpu[0] += time.thread_time() - t0

                sink._write = timed_write
                tracer = make_tracer(config.backend, sink.submit)
                inst = Instrumentation("harness_seed", config, tracer, redactor, defer_redaction=True)
                for hook in ("_enter", "_leave", "_leave_error"):  # time the monitor's own work
                    original = getattr(inst, hook)

                    def timed(*a, _f=original):
                        t0 = time.perf_counter()
                        try:
                            return _f(*a)
                        finally:
                            spent[0] += time.perf_counter() - t0

                    setattr(inst, hook, timed)
                inst.apply()
            t0 = time.perf_counter()
            outcome = await seed_main.run_trial(spec)
            wall = time.perf_counter() - t0
        if outcome.status != "completed":
            raise RuntimeError(f"bench trial did not complete: {outcome.error_kind} {outcome.error}")
    finally:
        if inst is not None:
            inst.remove()
            tracer.shutdown()
            sink.shutdown()
        await env.stop()
    spans = sink.spans_written if sink is not None else 0
    return wall, spans, spent[0], writer_cpu[0]


def trial_share(work: Path) -> dict[str, float]:
    asyncio.run(_one_trial(work / "warmup", instrument=False))  # imports, sandbox caches: not the monitor's
    bare_wall, _, _, _ = asyncio.run(_one_trial(work, instrument=False))
    wall, spans, spent, writer = asyncio.run(_one_trial(work, instrument=True))
    return {"bare_wall": bare_wall, "wall": wall, "spans": spans, "monitor_sec": spent, "writer_sec": writer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--no-trial", action="store_true", help="skip the trial (needs tmux + bwrap)")
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.calls = 200
    import harness_seed  # noqa: F401  (imported before instrumenting, as monitor.host does)

    out = Path(tempfile.mkdtemp(prefix="rise-monitor-bench-"))
    seed_config = RecordingConfig.load(REPO / "harness_seed" / "recording.toml")
    try:
        print(f"per span, µs ({args.calls} calls, best of 5, same process, uninstrumented first)")
        print(f"  bare OpenTelemetry SDK span (start_as_current_span, no capture, no export): "
              f"{bare_sdk_span(args.calls):.1f}")
        from harness_seed import observation

        rows = [("trivial: limit_output('ok')", lambda: observation.limit_output("ok", 10), trivial_config())]
        rows += [(name, fn, seed_config) for name, _t, fn in workloads()]
        print(f"  {'workload':<32} {'bare call':>9} │ {'lean hot':>8} {'+writer':>8} {'=total':>8} │ "
              f"{'lean sync':>9} │ {'sdk hot':>8}")
        worst_hot = worst_total = 0.0
        for name, fn, config in rows:
            r = span_costs(fn, args.calls, config, out)
            total = r["lean_hot"] + r["lean_writer"]
            worst_hot, worst_total = max(worst_hot, r["lean_hot"]), max(worst_total, total)
            print(f"  {name:<32} {r['bare']:9.1f} │ {r['lean_hot']:8.1f} {r['lean_writer']:8.1f} {total:8.1f} │ "
                  f"{r['lean_sync']:9.1f} │ {r['sdk_hot']:8.1f}")
        print("  lean hot = on the harness's thread (capture, span, enqueue); +writer = redact + encode + append on "
              "the writer thread;\n  lean sync = all of it before the call returns (write = \"sync\"); "
              "sdk hot = backend \"sdk\" before any export.")
        print(f"  worst seed boundary, lean: {worst_hot:.1f} µs on the harness's thread, {worst_total:.1f} µs in "
              f"all — goal ≤ {GOAL_US:.0f} µs: {'met' if worst_hot <= GOAL_US else 'NOT met'} on the harness's "
              f"thread, {'met' if worst_total <= GOAL_US else 'NOT met'} in all")
        if args.no_trial:
            return 0
        if shutil.which("tmux") is None:
            print("trial share: skipped (no tmux)")
            return 0
        r = trial_share(out)
        share = r["monitor_sec"] / r["wall"]
        total = (r["monitor_sec"] + r["writer_sec"]) / r["wall"]
        print("trial share (seed solves data/starter/hello-file in this process, scripted model, local sandbox, "
              "seed recording config)")
        print(f"  bare trial wall {r['bare_wall']:.2f} s; instrumented {r['wall']:.2f} s (the difference, "
              f"{r['wall'] - r['bare_wall']:+.2f} s, is tmux/sandbox timing noise, not the monitor)")
        print(f"  {r['spans']:.0f} spans; monitor on the harness's thread {r['monitor_sec'] * 1e3:.2f} ms = {share:.3%}; "
              f"with the writer thread's CPU {(r['monitor_sec'] + r['writer_sec']) * 1e3:.2f} ms = {total:.3%} "
              f"— goal ≤ {GOAL_SHARE:.0%}: {'met' if total <= GOAL_SHARE else 'NOT met'}")
        print(f"  per span inside the trial (real arguments): {r['monitor_sec'] / max(r['spans'], 1) * 1e6:.1f} µs "
              f"on the harness's thread + {r['writer_sec'] / max(r['spans'], 1) * 1e6:.1f} µs writer")
        return 0
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
