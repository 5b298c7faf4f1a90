"""Shared parts of the controller tests (no tests here): a scripted model that claims completion too early,
H9's candidate patches, an experiment over a few starter tasks, stand-in checks.

The model: on hello-file it solves at once; on the other tasks its first reply claims the task complete without
doing anything, and it only does the work when a later user message asks it to verify (the executable
completion verification mechanism does exactly that). So the seed passes hello-file only, the verify-completion
candidate passes everything, and the keystroke-trim candidate (its commands never run) fails everything.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "harness_seed"
STARTER = REPO / "data" / "starter"
DEV = ["hello-file", "write-json"]
HELDOUT = ["count-lines"]

SOLVE = {
    "hello-file": "printf 'Hello, world!\\n' > /app/hello.txt\n",
    "write-json": "printf '{\"name\": \"demo\", \"version\": 2, \"enabled\": true}\\n' > /app/config.json\n",
    "count-lines": "wc -l < /app/data.txt | tr -d ' ' > /app/count.txt\n",
}
MARK = {"hello-file": "/app/hello.txt", "write-json": "/app/config.json", "count-lines": "/app/count.txt"}
DIRECT = {"hello-file"}  # tasks the model solves before claiming


def _reply(analysis: str, keystrokes: str | None, complete: bool) -> str:
    commands = [{"keystrokes": keystrokes, "duration": 0.2}] if keystrokes else []
    return json.dumps({"analysis": analysis, "plan": "", "commands": commands, "task_complete": complete})


def early_claimer(body: dict) -> str:
    """The scripted model (a ScriptedServer responder)."""
    msgs = body.get("messages", [])
    first = next((m.get("content") or "" for m in msgs if m.get("role") == "user"), "")
    task = next((t for t, mark in MARK.items() if mark in first), None)
    if task is None:  # a summary or some other sub-call
        return "Nothing to summarise."
    solved = any(f"SOLVE {task}" in (m.get("content") or "") for m in msgs if m.get("role") == "assistant")
    if solved:
        return _reply("Done and checked.", None, True)
    later = [m.get("content") or "" for m in msgs if m.get("role") == "user"][1:]
    asked = any(re.search(r"verif", text, re.IGNORECASE) for text in later)
    if task in DIRECT or asked:
        line = SOLVE[task].rstrip("\n") + f"; cat {MARK[task]}\n"  # one line: nothing runs without its Enter
        return _reply(f"SOLVE {task}: doing the work and showing it.", line, False)
    return _reply("The task is already complete.", None, True)


# -------------------------------------------------------------------------------------------- candidates
# H9's patches (tests/data/candidates/build.py): executable completion verification, and the harmful
# keystroke trimming (the trailing Enter goes too, so one-line commands are typed and never run).
CANDIDATES = REPO / "tests" / "data" / "candidates"
GOOD = CANDIDATES / "verify-completion.patch"
HARMFUL = CANDIDATES / "keystroke-trim.patch"
GOOD_PROPOSAL = {"mechanism": "verify-completion", "tasks": ["write-json"]}
HARMFUL_PROPOSAL = {"mechanism": "keystroke-trim", "tasks": ["hello-file"]}


# -------------------------------------------------------------------------------------------- experiment
def make_experiment(runs: Path, base_url: str, name: str = "exp", *, r: int = 2, sequential: bool = False,
                    heldout: list[str] | None = None, baseline: str = "reference", adoption: dict | None = None):
    from evolve.experiment.config import ExperimentConfig
    from evolve.experiment.store import init_experiment

    cfg = ExperimentConfig.model_validate({
        "name": name, "endpoint": {"base_url": base_url, "model": "scripted", "timeout_sec": 30},
        "tasks": {"dir": str(STARTER), "development": DEV, "heldout": HELDOUT if heldout is None else heldout},
        "r": r, "env": "local", "concurrency": 1,
        "adoption": {"policy": "paper", "sequential": sequential, "baseline": baseline, **(adoption or {})},
    })
    return init_experiment(name, cfg, runs_dir=runs)


async def pass_smoke(harness_dir: Path, out_dir: Path) -> tuple[bool, dict[str, Any]]:
    return (harness_dir / "main.py").is_file(), {"summary": "stand-in smoke: main.py present"}


async def pass_contracts(candidate: Path, incumbent: Path, frozen: Path, repair: Any, max_repairs: int,
                         out_dir: Path) -> tuple[bool, dict[str, Any]]:
    return True, {"summary": "stand-in contracts: none"}


def standin_checks():
    from evolve.round.controller import Checks

    return Checks(pass_smoke, pass_contracts)


def parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap cannot create a sandbox here"
    return None


def scripted_server(handler: Any, model: str = "scripted") -> Any:
    """A pytest fixture body: a ScriptedServer answering with ``handler`` over real HTTP, or a skip naming the
    missing part (``yield from scripted_server(early_claimer)``)."""
    import pytest

    from tests.fakes.openai_server import ScriptedServer

    if (why := parts_missing()):
        pytest.skip(why)
    with ScriptedServer(handler, model=model) as srv:
        yield srv


def ledger_shape(root: Path) -> list[tuple]:
    """The ledger as (kind, key, outcome fields) with commits replaced by names in order of appearance, so two
    experiments (whose candidate commits differ by timestamps) compare equal when they did the same work."""
    from evolve.experiment.ledger import Ledger

    names: dict[str, str] = {}
    hexes = re.compile(r"[0-9a-f]{40}")

    def norm(text: str) -> str:
        return hexes.sub(lambda m: names.setdefault(m.group(0), f"C{len(names)}"), text)

    out = []
    for e in Ledger(root / "ledger.jsonl").events:
        extra: tuple = ()
        if e.kind == "trial_done":
            extra = (e.status,)
        elif e.kind in ("check_result", "screening"):
            extra = (e.passed,)
        elif e.kind == "evaluation":
            extra = (e.complete, e.metrics.get("pass_at_1"))
        elif e.kind == "adoption":
            extra = (e.version, e.parent)
        elif e.kind == "rejection":
            extra = (norm(e.reason),)
        out.append((e.kind, norm(e.key), *extra))
    return out
