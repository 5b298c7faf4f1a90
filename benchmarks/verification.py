"""Verification wall time per Mid-Harness step, as a ratio to one model call.

Runs the real actor (real HTTP, the real ModelClient) against the scripted OpenAI-compatible server with a fixed
per-request ``delay`` that it serves concurrently, so the numbers show how each mechanism's calls overlap under
the ``max_concurrency`` bound: listwise (1 call), pairwise round-robin (N(N-1)/2), ring + pivot tournament
(ring N, then pivots). Eight distinct candidates per step; the verifier prefers a fixed one. Prints, for each
mechanism and concurrency bound: calls, median verification seconds per step and the ratio to the median of a
single model call, measured the same way.

    python benchmarks/verification.py [--n 8] [--delay 0.2] [--steps 5] [--concurrency 8 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test fakes live in the repo, not the package

from harness_seed.midharness import build_actor
from tests.fakes import openai_server
from tests.fakes.openai_server import ScriptedServer
from tests.test_midharness_actor import HISTORY, INSTRUCTION, Caller, action, parse, prefer
from trials.endpoints.client import ModelClient
from trials.endpoints.spec import EndpointSpec
from trials.harness_api import CostLedger

MECHANISMS = ["listwise", "pairwise", "tournament"]

# http.server listens with a backlog of 5: a burst of more connections gets SYNs dropped and retried after a
# second, which would be measured as verification time. A real server has a deep backlog.
openai_server._Server.request_queue_size = 128


async def measure(n: int, delay: float, steps: int, concurrency: list[int]) -> list[dict]:
    samples = [action(f"echo candidate {i}\n") for i in range(n)]
    rows = []
    with ScriptedServer(prefer("echo candidate 5", samples), delay=delay) as srv:
        spec = EndpointSpec(base_url=srv.base_url, model=srv.model, timeout_sec=60)
        async with ModelClient(spec) as client:
            caller = Caller(client)
            single = []
            for _ in range(steps):
                t0 = time.monotonic()
                await caller.call(HISTORY)
                single.append(time.monotonic() - t0)
            one_call = statistics.median(single)
            rows.append({"mechanism": "one model call", "concurrency": 1, "calls": 1, "median_sec": one_call,
                         "ratio": 1.0})
            for bound in concurrency:
                for mechanism in MECHANISMS:
                    settings = {"n": n, "verifier": mechanism, "max_concurrency": bound}
                    actor = build_actor(settings, caller, client, INSTRUCTION, parse, CostLedger())
                    times, calls = [], set()
                    for _ in range(steps):
                        reply = await actor.act(HISTORY)
                        rec = reply.extra["midharness"]
                        times.append(rec["verification_sec"])
                        calls.add(rec["calls"])
                    med = statistics.median(times)
                    rows.append({"mechanism": mechanism, "concurrency": bound, "calls": sorted(calls),
                                 "median_sec": med, "ratio": med / one_call})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the fake server takes per request")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = ap.parse_args()
    rows = asyncio.run(measure(args.n, args.delay, args.steps, args.concurrency))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"N={args.n} delay={args.delay}s steps={args.steps} (median over steps)")
    print(f"{'mechanism':16} {'concurrency':>11} {'calls':>8} {'verify s':>9} {'x one call':>10}")
    for r in rows:
        calls = r["calls"] if isinstance(r["calls"], int) else "/".join(map(str, r["calls"]))
        print(f"{r['mechanism']:16} {r['concurrency']:>11} {calls:>8} {r['median_sec']:>9.3f} {r['ratio']:>10.2f}")


if __name__ == "__main__":
    main()
