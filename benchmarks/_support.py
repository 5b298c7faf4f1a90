"""What several benchmarks share (not a benchmark: names starting with ``_`` are not run by the quick-mode test).

Benchmarks import only the installed package and this module, never ``tests``: a scripted seed-harness trial
(the real seed agent in the real local sandbox, real HTTP to the package's scripted OpenAI-compatible server),
the ``--quick`` flag every benchmark accepts, and the exit status that says "a required part is missing".
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "data" / "starter" / "hello-file"
# A benchmark exits with this status (the automake convention for "skipped") when a part it needs is missing;
# tests/test_benchmarks_quick.py turns it into a pytest skip, which RISE_REQUIRE_PARTS=1 turns into a failure.
MISSING_PART = 77


def quick_flag(parser: argparse.ArgumentParser) -> None:
    """Add the ``--quick`` flag every benchmark has: small sizes, a few seconds, for CI (figures not meant)."""
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, a few seconds: checks that the benchmark runs (CI), not its figures")


def require(ok: bool, what: str) -> None:
    """Exit with :data:`MISSING_PART` and say which part is missing unless ``ok``."""
    if not ok:
        print(f"missing part: {what}", file=sys.stderr)
        raise SystemExit(MISSING_PART)


def require_sandbox() -> None:
    """The local sandbox and the seed harness need bubblewrap, nsenter and tmux."""
    from trials.environments.local import bwrap_available

    require(bwrap_available(), "bubblewrap (bwrap) and nsenter for the local sandbox")
    require(shutil.which("tmux") is not None, "tmux for the seed harness")


def terminus_reply(commands: list[tuple[str, float]] | None = None, complete: bool = False,
                   analysis: str = "a", plan: str = "p") -> str:
    """A well-formed Terminus JSON reply (what the scripted model answers)."""
    cmds = [{"keystrokes": k, "duration": d} for k, d in (commands or [])]
    return json.dumps({"analysis": analysis, "plan": plan, "commands": cmds, "task_complete": complete})


async def seed_trial(responder: Any, trial_dir: Path, *, task_dir: Path = HELLO, server_kw: dict | None = None,
                     settings: dict | None = None,
                     around: Callable[[], AbstractContextManager] = nullcontext) -> tuple[Any, float]:
    """One trial of the seed harness in this process: (outcome, seconds of ``run_trial``).

    The local sandbox is started before and stopped after the timed part; ``around()`` is entered just
    before the harness starts and left after it ends (a benchmark instruments the harness there). The
    trajectory and the outcome are left in ``trial_dir / "agent"``.
    """
    from harness_seed import main as seed_main
    from trials.endpoints.scripted import ScriptedServer
    from trials.endpoints.spec import EndpointSpec
    from trials.environments.local import LocalEnvironment
    from trials.harness_api import TrialSpec
    from trials.tasks.load import load_task

    task = load_task(task_dir)
    agent_dir = trial_dir / "agent"
    agent_dir.mkdir(parents=True, exist_ok=True)
    env = LocalEnvironment(task, trial_dir, job_id=f"bench-{trial_dir.name}")
    await env.start()
    try:
        with ScriptedServer(responder, model="scripted", **(server_kw or {})) as srv:
            spec = TrialSpec(trial_id=f"bench__{trial_dir.name}", task_name=task.name, instruction=task.instruction,
                             env=env.handle(), endpoint=EndpointSpec(base_url=srv.base_url, model="scripted"),
                             agent_dir=str(agent_dir), timeout_sec=120, settings=settings or {})
            with around():
                t0 = time.perf_counter()
                outcome = await seed_main.run_trial(spec)
                wall = time.perf_counter() - t0
    finally:
        await env.stop()
    if outcome.status != "completed":
        raise RuntimeError(f"benchmark trial in {trial_dir} did not complete: {outcome.error_kind} {outcome.error}")
    return outcome, wall


def steps_of(trial_dir: Path) -> Iterator[dict]:
    """The steps of the trial's rich trajectory (``trajectory.rich.json``, or an older run's trajectory.json)."""
    from trials.harness_api import rich_trajectory_path

    yield from json.loads(rich_trajectory_path(trial_dir / "agent").read_text())["steps"]
