"""Shared parts of the controller tests (no tests here): a scripted model that claims completion too early,
candidate patches made from the seed, an experiment over a few starter tasks, stand-in checks.

The model: on hello-file it solves at once; on the other tasks its first reply claims the task complete without
doing anything, and it only does the work when a later user message asks it to verify (the executable
completion verification mechanism does exactly that). So the seed passes hello-file only, a candidate that asks
for verification before completing passes everything, and a candidate that drops commands fails everything.

Run as ``python -m tests.test_controller_support round|serve ...`` it is the subprocess of the kill -9 tests.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
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
        return _reply(f"SOLVE {task}: doing the work and showing it.", SOLVE[task] + f"cat {MARK[task]}\n", False)
    return _reply("The task is already complete.", None, True)


# -------------------------------------------------------------------------------------------- candidates
def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_patch(out: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """A git patch against harness_seed (paths relative to the package) that replaces old by new per file."""
    work = out.parent / (out.stem + "-src")
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(SEED, work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "seed")
    for rel, (old, new) in edits.items():
        p = work / rel
        text = p.read_text()
        if old not in text:
            raise AssertionError(f"{rel}: {old!r} not found; the seed changed")
        p.write_text(text.replace(old, new, 1))
    out.write_text(_git(work, "diff"))
    shutil.rmtree(work)
    return out


def good_patch(out: Path) -> Path:
    """Stand-in for 'executable completion verification': the confirmation asks for a verifying command."""
    ask = "Before completing, run a command that verifies the result and show its output.\n\nAre you sure"
    return make_patch(out, {"prompts/completion_confirm.j2": ("Are you sure", ask)})


def harmful_patch(out: Path) -> Path:
    """A harmful candidate: the loop never sends the model's commands."""
    return make_patch(out, {"loop.py": ("for cmd in commands:", "for cmd in commands[:0]:")})


GOOD_PROPOSAL = {"mechanism": "verify-completion", "tasks": ["write-json"],
                 "boundaries": ["completion:CompletionHandshake.on_reply"]}
HARMFUL_PROPOSAL = {"mechanism": "skip-commands", "tasks": ["hello-file"],
                    "boundaries": ["loop:Agent.execute_commands"]}


# -------------------------------------------------------------------------------------------- experiment
def make_experiment(runs: Path, base_url: str, name: str = "exp", *, r: int = 2, sequential: bool = False,
                    heldout: list[str] | None = None, baseline: str = "reference"):
    from evolve.experiment import ExperimentConfig
    from evolve.store import init_experiment

    cfg = ExperimentConfig.model_validate({
        "name": name, "endpoint": {"base_url": base_url, "model": "scripted", "timeout_sec": 30},
        "tasks": {"dir": str(STARTER), "development": DEV, "heldout": HELDOUT if heldout is None else heldout},
        "r": r, "env": "local", "concurrency": 1,
        "adoption": {"policy": "paper", "sequential": sequential, "baseline": baseline},
    })
    return init_experiment(name, cfg, runs_dir=runs)


async def pass_smoke(harness_dir: Path) -> tuple[bool, dict[str, Any]]:
    return (harness_dir / "main.py").is_file(), {"summary": "stand-in smoke: main.py present"}


async def pass_contracts(candidate: Path, incumbent: Path, frozen: Path, repair: Any, max_repairs: int,
                         out_dir: Path) -> tuple[bool, dict[str, Any]]:
    return True, {"summary": "stand-in contracts: none"}


def standin_checks():
    from evolve.controller import Checks

    return Checks(pass_smoke, pass_contracts)


def parts_missing() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux is not installed"
    from trials.environments.local import bwrap_available

    if not bwrap_available():
        return "bubblewrap cannot create a sandbox here"
    return None


def ledger_shape(root: Path) -> list[tuple]:
    """The ledger as (kind, key, outcome fields) with commits replaced by names in order of appearance, so two
    experiments (whose candidate commits differ by timestamps) compare equal when they did the same work."""
    from evolve.ledger import Ledger

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


def _main(argv: list[str]) -> int:
    """``round RUNS NAME ROUND SLUG=PATCH[=PROPOSAL_JSON]...`` with the stand-in checks (kill -9 tests)."""
    from evolve.controller import CandidateInput, Proposal, run_round
    from evolve.store import open_experiment

    cmd, runs, name, rnd, *cands = argv
    assert cmd == "round"
    inputs = []
    for c in cands:
        slug, patch, *prop = c.split("=", 2)
        inputs.append(CandidateInput(slug, patch, Proposal.model_validate(json.loads(prop[0]) if prop else {})))
    report = run_round(open_experiment(name, Path(runs)), int(rnd), inputs, resume=True, checks=standin_checks())
    print(json.dumps({"adopted": report.adopted, "blocked": report.blocked,
                      "candidates": [[c.slug, c.status, c.reason] for c in report.candidates]}))
    return 2 if report.blocked else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
