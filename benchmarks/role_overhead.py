"""What the role runtime itself costs, per role call and per tool call, with model time taken out.

    python benchmarks/role_overhead.py [--calls 20] [--tools 8] [--quick]

The model is the package's scripted OpenAI-compatible server (real HTTP, answers at once) or, for ``claude``, the
scripted CLI (the SDK's real control protocol, in process), so what is timed is the runtime: prompt rendering,
the agent loop (pydantic-ai), validation, tool dispatch and confinement, transcripts.

- per role call: a call whose model answers at once with a valid final answer (one request);
- per tool call: (a call with N tool calls − the call without) / N; on ``openai``/``replay`` each tool call also
  costs one more model request (one HTTP round trip);
- for scale: one bare ``openai`` SDK request to the same server, and the tool body itself (``list_dir`` on a
  small folder, run directly), so the ratios say how much the runtime adds over the HTTP it cannot avoid.
Figures are medians over ``--calls`` calls, measured in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _support import quick_flag

from evolve.roles.runtime import Limits, ToolContext, arun_role, get_role, get_tool, make_backend
from evolve.roles.runtime.backends.claude import ClaudeBackend
from evolve.roles.runtime.backends.scripted_cli import ScriptedCLI
from evolve.roles.runtime.tools import invoke
from evolve.roles.runtime.transcript import Transcript
from trials.endpoints.scripted import ScriptedServer
from trials.endpoints.spec import EndpointSpec

ANSWER = {"answer": "hello", "evidence": [{"path": "a.txt", "detail": "line 1"}]}


def _call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": args}]}


def _median(fn: Callable[[], float], n: int) -> float:
    fn()  # warm-up: imports, connection set-up
    return statistics.median(fn() for _ in range(n))


def _timed_role(role, workspace: Path, make) -> float:
    async def one() -> float:
        backend = make()
        started = time.perf_counter()
        await arun_role(role, {"question": "q"}, workspace, backend, transcripts=workspace.parent / "tr")
        return time.perf_counter() - started
    return asyncio.run(one())


def bare_request(base_url: str) -> float:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="x", max_retries=0)
    started = time.perf_counter()
    client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "q"}], max_tokens=8)
    return time.perf_counter() - started


def tool_body(workspace: Path, n: int) -> tuple[float, float]:
    """(median seconds of the list_dir body, median seconds of the same call through ``invoke``)."""
    ctx = ToolContext(workspace=workspace, limits=Limits(), transcript=Transcript(workspace.parent / "b.jsonl", "b"))
    spec = get_tool("list_dir")

    def body() -> float:
        started = time.perf_counter()
        spec.fn(ctx, path=".")
        return time.perf_counter() - started

    async def invoked() -> list[float]:
        out = []
        for _ in range(n + 1):
            started = time.perf_counter()
            await invoke(spec, ctx, {"path": "."})
            out.append(time.perf_counter() - started)
        return out[1:]

    return _median(body, n), statistics.median(asyncio.run(invoked()))


def _openai_factory(endpoint: EndpointSpec) -> Callable[[], object]:
    return lambda: make_backend("openai", endpoint)


def _replay_factory(recording: Path) -> Callable[[], object]:
    return lambda: make_backend("replay", recording=recording)


def _claude_factory(tools: int) -> Callable[[], object]:
    steps = [("tool", "list_dir", {"path": "."}) for _ in range(tools)] + [("result", ANSWER)]
    return lambda: ClaudeBackend(transport=ScriptedCLI([list(steps)]))


def _per_call(role, workspace: Path, make: Callable[[], object], calls: int) -> float:
    return _median(lambda: _timed_role(role, workspace, make), calls)


def measure(backend: str, role, workspace: Path, calls: int, tools: int) -> tuple[float, float]:
    """(seconds per role call, seconds per tool call) of one backend."""
    results = []
    for n in (0, tools):
        if backend == "claude":
            results.append(_per_call(role, workspace, _claude_factory(n), calls))
            continue
        with ScriptedServer(functools.partial(_next, tools=n)) as srv:
            endpoint = EndpointSpec(base_url=srv.base_url, model="scripted")
            if backend == "openai":
                results.append(_per_call(role, workspace, _openai_factory(endpoint), calls))
                continue
            recording = workspace.parent / f"rec-{n}.yaml"
            _timed_role(role, workspace, lambda e=endpoint, r=recording: make_backend("replay", e, recording=r,
                                                                                      record=True))
        results.append(_per_call(role, workspace, _replay_factory(recording), calls))  # server stopped
    return results[0], (results[1] - results[0]) / tools


def _next(body: dict, tools: int) -> dict:
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    return _call("list_dir", path=".") if done < tools else _call("final_answer", **ANSWER)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--tools", type=int, default=8)
    quick_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.calls, args.tools = 2, 2
    role = get_role("explorer").model_copy(update={"limits": Limits(min_tool_calls=0, max_turns=args.tools + 2)})
    with tempfile.TemporaryDirectory(prefix="rise-role-bench-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        for i in range(5):
            (workspace / f"f{i}.txt").write_text("x\n")
        with ScriptedServer(["ok"] * (args.calls + 1)) as srv:
            http = _median(lambda: bare_request(srv.base_url), args.calls)
        body, invoked = tool_body(workspace, max(args.calls, 5))
        print(f"bare OpenAI SDK request to the scripted server: {http * 1e3:.2f} ms")
        print(f"list_dir body: {body * 1e6:.0f} us; through the registry (validate, confine, transcript): "
              f"{invoked * 1e6:.0f} us (x{invoked / body:.1f})")
        print(f"{'backend':<8} {'per role call':>14} {'x bare request':>15} {'per tool call':>14} "
              f"{'x bare request':>15}")
        for backend in ("openai", "replay", "claude"):
            call, per_tool = measure(backend, role, workspace, args.calls, args.tools)
            print(f"{backend:<8} {call * 1e3:11.2f} ms {call / http:14.1f}x {per_tool * 1e3:11.2f} ms "
                  f"{per_tool / http:14.1f}x")


if __name__ == "__main__":
    main()
