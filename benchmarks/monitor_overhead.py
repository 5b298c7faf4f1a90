"""What the runtime monitor costs per span, against the bare OpenTelemetry SDK in the same run.

    python benchmarks/monitor_overhead.py [--calls 5000] [--rounds 3] [--steps 10] [--by-boundary] [--no-trial]
                                          [--quick]

1. In a trial (the goal's measure): the seed harness solves a starter task in this process (scripted model over
   real HTTP, local bwrap sandbox, real tmux), once bare, once with bare OpenTelemetry SDK spans at the same
   boundaries (``with tracer.start_as_current_span(name)``: no capture, no export) and once with the monitor
   as ``monitor.host`` sets it up (seed ``recording.toml``, lean backend, writer thread, redaction), in
   ``--rounds`` interleaved rounds. Per span: the time spent in the span hooks on the harness's thread, plus,
   for the monitor, the writer thread's CPU time; the best round of each is reported.
2. Per call, by workload: seed functions that are boundaries, with realistic arguments (a 24 KB terminal
   capture, a JSON reply, a ParseResult), timed bare and instrumented in a tight loop, split into the
   harness's thread and the writer's work; the bare SDK span for reference.
   With ``--by-boundary`` the same per boundary: where a span's cost goes.
3. Trial share: the monitor's measured time as a share of the instrumented trial's wall time, and the wall
   times of the bare and instrumented trials next to the spread between the bare rounds.
Goal (issue 18): ≤ 30 µs per span in a trial; ≤ 1% of the trial's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import REPO, quick_flag, require_sandbox, seed_trial, terminus_reply

from monitor.config import RecordingConfig
from monitor.export import JsonLinesSink
from monitor.instrument import Instrumentation
from monitor.redact import Redactor
from monitor.tracer import make_tracer

_cpu = time.thread_time

GOAL_US, GOAL_SHARE = 30.0, 0.01
REFERENCE_SDK_US = 16.0  # the bare SDK span where the goal was set (issue 18): the goal is 30/16 = 1.9x the SDK
SEED_CONFIG = REPO / "harness_seed" / "recording.toml"


def _best_of(fn, calls: int, repeats: int = 5) -> float:
    """CPU seconds of this thread per call: the best of a few repeats (the machine is shared; the minimum is
    the signal)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = _cpu()
        for _ in range(calls):
            fn()
        best = min(best, (_cpu() - t0) / calls)
    return best


def _redactor() -> Redactor:
    return Redactor({"BENCH_API_KEY": "sk-bench0123456789abcdef"})


# ---------------------------------------------------------------------------------------------- per call
def workloads():
    """(name, zero-arg callable) with realistic arguments, calling through module attributes."""
    from harness_seed import completion, observation, parsing

    screen = "\n".join(f"user@box:/app$ ls -la line {i} " + "x" * 60 for i in range(300))  # ~24 KB
    reply = terminus_reply(commands=[("printf 'Hello, world!\\n' > /app/hello.txt\n", 0.5)],
                           analysis="The file is missing.", plan="Create it and check.")
    parsed = parsing.parse_response(reply, "json")
    handshake = completion.CompletionHandshake(2)
    return [
        ("trivial: limit_output('ok')", lambda: observation.limit_output("ok", 10)),
        ("limit_output(24 KB capture)", lambda: observation.limit_output(screen, 10000)),
        ("parse_response(JSON reply)", lambda: parsing.parse_response(reply, "json")),
        ("build_observation(24 KB x2)",
         lambda: observation.build_observation(screen, screen[-4000:], screen[:-200], True)),
        ("CompletionHandshake.on_reply", lambda: handshake.on_reply(parsed)),
    ]


def span_costs(fn, calls: int, config: RecordingConfig, out_dir: Path) -> dict[str, float]:
    """µs per call: bare; per span: the harness's thread (capture, span, enqueue) and the writer's work."""
    bare = _best_of(fn, calls)
    res = {"bare": bare * 1e6}
    collected: list = []
    inst = Instrumentation("harness_seed", config, make_tracer("lean", collected.append), _redactor(),
                           defer_redaction=True)
    inst.apply()
    try:
        res["hot"] = (_best_of(fn, calls) - bare) * 1e6
    finally:
        inst.remove()
    spans = collected[-calls:]
    writer = JsonLinesSink(out_dir / "writer.jsonl", {"service.name": "bench"}, redact=_redactor().redact,
                           mode="sync")
    t0 = _cpu()
    for i in range(0, len(spans), 16):  # the writer thread writes a burst at a time
        writer._write(spans[i:i + 16])
    res["writer"] = (_cpu() - t0) / max(len(spans), 1) * 1e6
    writer.shutdown()
    return res


def bare_sdk_span(calls: int) -> float:
    """µs per span of the OpenTelemetry SDK alone: start_as_current_span, no capture, no exporter."""
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("bench")

    def fn():
        with tracer.start_as_current_span("x"):
            pass

    return (_best_of(fn, calls) - _best_of(lambda: None, calls)) * 1e6


# ---------------------------------------------------------------------------------------------- in a trial
class _BareSdk(Instrumentation):
    """The same boundaries as the recording config, but each span is only the SDK's own
    ``with tracer.start_as_current_span(target):`` (no attributes, no capture, no exporter)."""

    def __init__(self, config: RecordingConfig):
        from opentelemetry.sdk.trace import TracerProvider

        super().__init__("harness_seed", config, make_tracer("lean", lambda s: None), Redactor({}))
        self.sdk = TracerProvider().get_tracer("bench")
        self.spans = 0

    def _enter(self, site, args, kwargs):
        cm = self.sdk.start_as_current_span(site.target)
        cm.__enter__()
        return cm

    def _leave(self, site, handle, result):
        self.spans += 1
        handle.__exit__(None, None, None)

    def _leave_error(self, site, handle, exc):
        self.spans += 1
        handle.__exit__(type(exc), exc, exc.__traceback__)


def _timed(fn, spent: list, by_site: dict | None = None):
    """``fn`` wrapped to add its CPU time on this thread to ``spent[0]`` and count its calls in ``spent[1]``
    (with ``by_site``: also its seconds per boundary, the hook's first argument being the site)."""

    def timed(*a):
        t0 = _cpu()
        try:
            return fn(*a)
        finally:
            d = _cpu() - t0
            spent[0] += d
            spent[1] += 1
            if by_site is not None:
                per = by_site.setdefault(a[0].target, [0.0, 0])
                per[0] += d
                per[1] += 1

    return timed


def _time_hooks(inst: Instrumentation, spent: list, by_site: dict | None = None) -> None:
    """Time every span hook of ``inst`` into ``spent``. CPU time of the thread, not wall time: other processes
    on a shared machine and the other threads of the trial (the scripted server, the span writer) do not count
    as the hook's."""
    for hook in ("_enter", "_leave", "_leave_error"):
        setattr(inst, hook, _timed(getattr(inst, hook), spent, by_site))


def timer_overhead(calls: int = 20000) -> float:
    """Seconds that timing one hook adds by itself (reading the thread's CPU clock is a system call here):
    the same timing wrapper around a hook that does nothing, in this run; subtracted from the hook totals."""
    spent = [0.0, 0]
    timed = _timed(lambda *a: None, spent)
    best = float("inf")
    for _ in range(5):
        spent[0] = 0.0
        for _ in range(calls // 5):
            timed(None)
        best = min(best, spent[0] / (calls // 5))
    return best


STEPS = 10  # episodes before the solving one (160 spans in all): a real trial has hundreds of spans


def _solver(steps: int = STEPS):
    """Scripted replies for hello-file: look around for ``steps`` episodes, write the file and show it, then
    claim completion (twice: the handshake)."""
    look = [terminus_reply(commands=[(f"ls -la /app; echo look {i}\n", 0.05)], analysis=f"Looking ({i}).",
                           plan="List the folder.") for i in range(steps)]
    return look + [terminus_reply(commands=[("printf 'Hello, world!\\n' > /app/hello.txt; cat /app/hello.txt\n",
                                              0.1)], analysis="Nothing yet.", plan="Write it."),
                   terminus_reply(complete=True), terminus_reply(complete=True)]


async def _trial(work: Path, kind: str, overhead: float = 0.0, steps: int = STEPS,
                 by_boundary: bool = False) -> dict[str, Any]:
    """One trial: kind is bare, sdk (bare SDK spans) or monitor. Wall, spans, hook and writer CPU seconds
    (``overhead``: seconds per hook call that the timing itself costs, subtracted); with ``by_boundary`` also
    the hooks' seconds per boundary and the writer's per span name (timing each span on the writer thread
    adds its own clock reads to the writer's total)."""
    spent, writer_cpu = [0.0, 0], [0.0]
    state: dict = {}
    hooks_by: dict[str, list[float]] = {}  # boundary -> [seconds of its hooks on the harness's thread, calls]
    writer_by: dict[str, list[float]] = {}  # span name -> [writer seconds redacting and encoding it, spans]

    @contextlib.contextmanager
    def around():
        if kind == "bare":
            yield
            return
        config = RecordingConfig.load(SEED_CONFIG)
        if kind == "sdk":
            inst = state["inst"] = _BareSdk(config)
        else:
            redactor = _redactor()
            sink = state["sink"] = JsonLinesSink(work / kind / "agent" / "spans.jsonl", {"service.name": "bench"},
                                                 redact=redactor.redact, mode=config.write,
                                                 linger_sec=config.write_linger_ms / 1000)
            write = sink._write

            def timed_write(batch, _w=write):  # the writer thread's CPU time (one clock read per burst)
                t0 = _cpu()
                try:
                    return _w(batch)
                finally:
                    writer_cpu[0] += _cpu() - t0

            sink._write = timed_write
            line = sink._line

            def timed_line(span, _l=line):  # one span's redaction + encoding on the writer thread
                t0 = _cpu()
                try:
                    return _l(span)
                finally:
                    per = writer_by.setdefault(span.name, [0.0, 0])
                    per[0] += _cpu() - t0
                    per[1] += 1

            if by_boundary:
                sink._line = timed_line
            tracer = make_tracer(config.backend, sink.submit)
            inst = state["inst"] = Instrumentation("harness_seed", config, tracer, redactor, defer_redaction=True)
        _time_hooks(inst, spent, hooks_by if by_boundary else None)
        inst.apply()
        try:
            yield
        finally:
            inst.remove()
            if "sink" in state:
                state["sink"].shutdown()

    _, wall = await seed_trial(_solver(steps), work / kind, around=around)
    spans = state["sink"].spans_written if "sink" in state else getattr(state.get("inst"), "spans", 0)
    hooks = max(spent[0] - spent[1] * overhead, 0.0)
    by = {"hooks_by": {k: [max(sec - n * overhead, 0.0), n] for k, (sec, n) in hooks_by.items()},
          "writer_by": writer_by} if by_boundary else {}
    return {"wall": wall, "spans": spans, "hooks_sec": hooks, "hook_calls": spent[1], "writer_sec": writer_cpu[0],
            **by}


def in_trial(work: Path, rounds: int, steps: int = STEPS, by_boundary: bool = False) -> dict[str, list[dict]]:
    asyncio.run(seed_trial(_solver(steps), work / "warmup"))  # imports, sandbox caches: not the monitor's
    runs: dict[str, list[dict]] = {"bare": [], "sdk": [], "monitor": []}
    for r in range(rounds):
        overhead = timer_overhead()
        for kind, done in runs.items():
            done.append(asyncio.run(_trial(work / f"r{r}", kind, overhead, steps, by_boundary)))
    return runs


def report_by_boundary(runs: dict[str, list[dict]]) -> None:
    """Where a span's cost goes, per boundary (the best round of each kind, as in the summary): µs per span on
    the harness's thread (the monitor's and the bare SDK's hooks) and on the writer thread (redaction and
    encoding of that span). Spans per boundary are the monitor's; the scripted trial makes the same spans for
    the SDK."""
    ours = min(runs["monitor"], key=_per_span_us)
    sdk = min(runs["sdk"], key=_per_span_us)
    writer = ours["writer_by"]
    print("  per boundary, µs per span (monitor hooks | bare SDK hooks | monitor writer), by total cost:")
    rows = []
    for target, (sec, _calls) in ours["hooks_by"].items():
        spans = writer.get(target, [0.0, 0])[1] or 1
        w = writer.get(target, [0.0, 0])[0]
        rows.append((sec + w, target, spans, sec / spans * 1e6,
                     sdk["hooks_by"].get(target, [0.0, 0])[0] / spans * 1e6, w / spans * 1e6))
    for _total, target, spans, hook, bare, w in sorted(rows, reverse=True):
        print(f"    {target:44s} {spans:4d} spans  {hook:6.1f} | {bare:6.1f} | {w:6.1f}")


def _per_span_us(run: dict[str, float]) -> float:
    return (run["hooks_sec"] + run["writer_sec"]) / max(run["spans"], 1) * 1e6


def report_trial(runs: dict[str, list[dict[str, float]]]) -> None:
    ours = min(runs["monitor"], key=_per_span_us)
    sdk = min(runs["sdk"], key=_per_span_us)
    ours_us, sdk_us = _per_span_us(ours), _per_span_us(sdk)
    hot_us = ours["hooks_sec"] / max(ours["spans"], 1) * 1e6
    print(f"in a trial (seed solves data/starter/hello-file, {len(runs['bare'])} interleaved rounds, best round)")
    print(f"  bare OpenTelemetry SDK spans at the same boundaries: {sdk['spans']:.0f} spans, {sdk_us:.1f} µs per span")
    print(f"  monitor (seed recording config): {ours['spans']:.0f} spans, {ours_us:.1f} µs per span "
          f"({hot_us:.1f} on the harness's thread + {ours_us - hot_us:.1f} writer thread) "
          f"= {ours_us / sdk_us:.2f}× the bare SDK")
    goal_ratio = GOAL_US / REFERENCE_SDK_US
    print(f"  goal ≤ {GOAL_US:.0f} µs per span: {'met' if ours_us <= GOAL_US else 'NOT met'} in µs on this run; "
          f"as a ratio (the goal was set where the bare SDK span took {REFERENCE_SDK_US:.0f} µs: ≤ "
          f"{goal_ratio:.2f}× the SDK): {'met' if ours_us / sdk_us <= goal_ratio else 'NOT met'}")
    share = (ours["hooks_sec"] + ours["writer_sec"]) / ours["wall"]
    bare_walls = [r["wall"] for r in runs["bare"]]
    mon_walls = [r["wall"] for r in runs["monitor"]]
    diff = statistics.median(mon_walls) - statistics.median(bare_walls)
    spread = max(bare_walls) - min(bare_walls)
    print(f"  share of the trial: {(ours['hooks_sec'] + ours['writer_sec']) * 1e3:.2f} ms of {ours['wall']:.2f} s "
          f"wall = {share:.3%} — goal ≤ {GOAL_SHARE:.0%}: {'met' if share <= GOAL_SHARE else 'NOT met'}")
    verdict = ("within" if abs(diff) <= spread else "outside") if len(bare_walls) > 1 else "not comparable with"
    print(f"  trial wall, median: bare {statistics.median(bare_walls):.2f} s, monitored "
          f"{statistics.median(mon_walls):.2f} s (difference {diff:+.2f} s, {verdict} the {spread:.2f} s spread of "
          f"the bare rounds)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="calls per workload (per-call table)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved trial rounds")
    parser.add_argument("--steps", type=int, default=STEPS, help="look-around episodes before the solving one")
    parser.add_argument("--no-trial", action="store_true", help="skip the trials (they need tmux + bwrap)")
    parser.add_argument("--json", action="store_true", help="also print the raw trial figures as JSON")
    parser.add_argument("--by-boundary", action="store_true",
                        help="also break the trial's cost down by boundary (adds clock reads to the writer's total)")
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.calls, args.rounds, args.steps, args.by_boundary = 200, 1, 1, True
    if not args.no_trial:
        require_sandbox()
    import harness_seed  # noqa: F401  (imported before instrumenting, as monitor.host does)

    out = Path(tempfile.mkdtemp(prefix="rise-monitor-bench-"))
    seed_config = RecordingConfig.load(SEED_CONFIG)
    trivial = RecordingConfig.from_toml('[[boundary]]\ntarget = "observation:limit_output"\n')
    try:
        if not args.no_trial:
            runs = in_trial(out, args.rounds, args.steps, args.by_boundary)
            report_trial(runs)
            if args.by_boundary:
                report_by_boundary(runs)
            if args.json:
                print(json.dumps(runs, indent=1))
        print(f"per call, CPU µs ({args.calls} calls, best of 5, tight loop: warm caches, unlike a trial)")
        print(f"  bare OpenTelemetry SDK span (start_as_current_span, no capture, no export): "
              f"{bare_sdk_span(args.calls):.1f}")
        print(f"  {'workload':<32} {'bare call':>9} │ {'hot':>7} {'+writer':>8} {'=span':>7}")
        for i, (name, fn) in enumerate(workloads()):
            r = span_costs(fn, args.calls, trivial if i == 0 else seed_config, out)
            print(f"  {name:<32} {r['bare']:9.1f} │ {r['hot']:7.1f} {r['writer']:8.1f} {r['hot'] + r['writer']:7.1f}")
        print("  hot = on the harness's thread (capture, span, enqueue); +writer = redact + encode + append, done "
              "on the writer thread")
        return 0
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
