"""Mid-Harness step wall time, as a ratio to one model call, per verifier and concurrency bound.

Runs the seed harness's real actor (``harness_seed.midharness.actor.build_actor``, the harness's own ``ModelCaller``
and JSON parser, the real ``ModelClient`` over real HTTP) against the package's scripted OpenAI-compatible
server, which answers every request after a fixed ``--delay`` and serves requests concurrently: a stand-in for
an endpoint whose latency does not grow with load, so the figures show how each mechanism's calls overlap under
``max_concurrency``. ``--n`` distinct candidates per step. Mechanisms: listwise (1 verifier call), pointwise
(N), pairwise round-robin (N(N-1)/2), ring + pivot tournament (ring N, then pivot duels).

Prints per mechanism and bound: verifier calls per step, the median step wall time (N-sample generator request
+ verification) and the median verification time, both as ratios to the median of one plain model call
measured the same way in the same run.

    python benchmarks/verification.py [--n 8] [--delay 0.2] [--steps 5] [--concurrency 8 32] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from _support import quick_flag, terminus_reply

from harness_seed.midharness.actor import build_actor
from harness_seed.model_call import ModelCaller
from harness_seed.parsing import parse_response
from harness_seed.settings import load_settings
from trials.endpoints.client import ModelClient
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec
from trials.harness_api import CostLedger

MECHANISMS = ["listwise", "pointwise", "pairwise", "tournament"]
INSTRUCTION = "Create the file /app/done.txt containing the word ok."
HISTORY = [
    {"role": "system", "content": "You are an AI assistant solving terminal tasks. Reply in JSON."},
    {"role": "user", "content": f"Task Description:\n{INSTRUCTION}\n\nCurrent terminal state:\nroot@box:/app# "},
    {"role": "assistant", "content": terminus_reply(commands=[("ls\n", 0.1)])},
    {"role": "user", "content": "New Terminal Output:\nroot@box:/app# ls\nroot@box:/app# "},
]


def responder(samples: list[str]):
    """The generator gets ``samples``; a verifier gets a valid answer of its kind (which one does not matter
    for timing): pairwise "A", pointwise a score, listwise the first action."""

    def respond(body: dict) -> str | list[str]:
        prompt = "\n".join(str(m.get("content", "")) for m in body["messages"])
        if "## Two candidate next actions" in prompt:
            return "A"
        if "## Candidate next action" in prompt:
            return "7"
        if "candidate next actions" in prompt:
            return "1"
        return list(samples)

    return respond


async def measure(n: int, delay: float, steps: int, concurrency: list[int]) -> list[dict]:
    """One row per (mechanism, bound), after the one-model-call reference row."""
    samples = [terminus_reply(commands=[(f"echo candidate {i}\n", 0.1)]) for i in range(n)]
    settings = load_settings({})
    rows = []
    with ScriptedServer(responder(samples), delay=delay) as srv:
        spec = EndpointSpec(base_url=srv.base_url, model=srv.model, timeout_sec=60)
        async with ModelClient(spec) as client:
            caller = ModelCaller(client, settings.model, CostLedger())
            await caller.call(HISTORY)  # warm-up: connection set-up and lazy imports are not a call's latency
            single = []
            for _ in range(steps):
                t0 = time.perf_counter()
                await caller.call(HISTORY)
                single.append(time.perf_counter() - t0)
            one_call = statistics.median(single)
            rows.append({"mechanism": "one model call", "concurrency": 1, "calls": [1], "step_sec": one_call,
                         "step_ratio": 1.0, "verify_sec": 0.0, "verify_ratio": 0.0})
            for bound in concurrency:
                for mechanism in MECHANISMS:
                    mid = {"n": n, "verifier": mechanism, "max_concurrency": bound}
                    actor = build_actor(mid, caller, client, INSTRUCTION, lambda t: parse_response(t, "json"),
                                        CostLedger())
                    step_times, verify_times, calls = [], [], set()
                    for _ in range(steps):
                        t0 = time.perf_counter()
                        reply = await actor.act(HISTORY)
                        step_times.append(time.perf_counter() - t0)
                        rec = reply.extra["midharness"]
                        verify_times.append(rec["verification_sec"])
                        calls.add(rec["calls"])
                    step, verify = statistics.median(step_times), statistics.median(verify_times)
                    rows.append({"mechanism": mechanism, "concurrency": bound, "calls": sorted(calls),
                                 "step_sec": step, "step_ratio": step / one_call,
                                 "verify_sec": verify, "verify_ratio": verify / one_call})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="candidates per step")
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the scripted server takes per request")
    ap.add_argument("--steps", type=int, default=5, help="steps per mechanism and bound (median taken)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    quick_flag(ap)
    args = ap.parse_args()
    if args.quick:
        args.n, args.delay, args.steps, args.concurrency = 4, 0.02, 1, [8]
    rows = asyncio.run(measure(args.n, args.delay, args.steps, args.concurrency))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"N={args.n} candidates, scripted server delay {args.delay}s per request, {args.steps} steps "
          f"(medians); ratios to one model call ({rows[0]['step_sec']:.3f} s)")
    print(f"{'mechanism':16} {'concurrency':>11} {'calls':>8} {'step s':>8} {'x call':>7} "
          f"{'verify s':>9} {'x call':>7}")
    for r in rows:
        calls = "/".join(map(str, r["calls"]))
        print(f"{r['mechanism']:16} {r['concurrency']:>11} {calls:>8} {r['step_sec']:>8.3f} "
              f"{r['step_ratio']:>7.2f} {r['verify_sec']:>9.3f} {r['verify_ratio']:>7.2f}")


if __name__ == "__main__":
    main()
