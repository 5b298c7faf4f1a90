"""Smoke check of a harness version: does it import, is its Handbook aligned, does its recording config resolve,
and does one short scripted trial leave a valid trajectory and trace?

``smoke_check(harness_dir)`` runs four steps and returns a :class:`SmokeResult`; every step runs even when an
earlier one failed (the repair loop wants every problem at once), except the trial when the package does not
import. Importing and resolving the recording config happen in subprocesses (``python -c`` with the package's
parent on ``sys.path``) under bubblewrap (:mod:`trials.confine`): a broken or hostile candidate never runs inside
the evaluator nor on the host. The trial is a scripted scenario
(``validate.scenarios``): the real runner, the local sandbox with tmux, the harness as a process agent under
``monitor.host``, a scripted model that writes one file and then claims completion until the run ends.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trials import confine

from .contract_model import Case, Reply, ScriptCommand, TaskSpec
from .scenarios import run_scenario

SUBPROCESS_TIMEOUT_SEC = 120.0

SMOKE_TASK = TaskSpec(instruction="Create the file /app/smoke.txt containing exactly the word ok.",
                      check='[ "$(cat /app/smoke.txt)" = ok ]', agent_timeout_sec=90)
SMOKE_CASE = Case(
    name="smoke", kind="positive", task="smoke", max_episodes=8,
    replies=[Reply(analysis="The file does not exist yet.", plan="Write it and show it.", times=1,
                   commands=[ScriptCommand(keystrokes="printf ok > /app/smoke.txt; cat /app/smoke.txt\n")])],
    fallback=Reply(analysis="The file holds ok.", plan="Done.", task_complete=True),
    expect=[{"path": "status", "op": "exists"}],
)

# Runs in a fresh interpreter: argv[1] = the package directory. Prints one JSON line.
_IMPORT_SCRIPT = r"""
import importlib, json, pkgutil, sys, traceback
from pathlib import Path
root = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root.parent))
out = {"modules": [], "errors": {}}
try:
    pkg = importlib.import_module(root.name)
    where = Path(getattr(pkg, "__file__", None) or next(iter(pkg.__path__))).resolve()
    if root not in where.parents:
        raise ImportError(f"package {root.name} was imported from {where}, not from {root} (a name clash?)")
    main = importlib.import_module(root.name + ".main")
    if not callable(getattr(main, "main", None)):
        raise ImportError(f"{root.name}.main has no main() function")
    for info in pkgutil.walk_packages(pkg.__path__, prefix=root.name + "."):
        if info.name.rsplit(".", 1)[-1] in {"__main__", "tests", "conftest"}:
            continue
        try:
            importlib.import_module(info.name)
            out["modules"].append(info.name)
        except Exception:
            out["errors"][info.name] = traceback.format_exc(limit=3)[-1500:]
except Exception:
    out["errors"][root.name] = traceback.format_exc(limit=5)[-3000:]
print(json.dumps(out))
"""

_RECORDING_SCRIPT = r"""
import json, sys
from pathlib import Path
root = Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root.parent))
from monitor.config import RecordingConfigError, load_for_harness
from monitor.instrument import Instrumentation
from monitor.tracer import LeanTracer
try:
    config, path = load_for_harness(root)
    inst = Instrumentation(root.name, config, LeanTracer(lambda span: None), config_path=path)
    targets = inst.apply()
    inst.remove()
    print(json.dumps({"ok": True, "file": str(path) if path else None, "targets": targets}))
except RecordingConfigError as exc:
    print(json.dumps({"ok": False, "error": str(exc)}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
"""


@dataclass
class SmokeStep:
    name: str
    passed: bool
    detail: str
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SmokeResult:
    passed: bool
    harness: str
    steps: list[SmokeStep]
    trial_dir: str | None = None

    def step(self, name: str) -> SmokeStep:
        return next(s for s in self.steps if s.name == name)

    def failures(self) -> list[str]:
        return [f"{s.name}: {s.detail}" for s in self.steps if not s.passed]

    def summary(self) -> str:
        head = f"smoke check of {self.harness}: {'passed' if self.passed else 'FAILED'}"
        return "\n".join([head] + [f"  [{'ok' if s.passed else 'FAIL'}] {s.name}: {s.detail}" for s in self.steps])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _python(script: str, harness_dir: Path) -> tuple[dict | None, str]:
    """Run ``script`` on the candidate in a fresh interpreter, confined as its trials are (trials/confine.py:
    bubblewrap, a scrubbed environment, no network, only an empty scratch folder writable)."""
    try:
        proc = confine.run_python(["-c", script, str(harness_dir)], harness_dir, SUBPROCESS_TIMEOUT_SEC,
                                  f"the smoke check of {harness_dir}")
    except subprocess.TimeoutExpired:
        return None, f"timed out after {SUBPROCESS_TIMEOUT_SEC:g}s"
    except confine.ConfinementUnavailable as exc:
        return None, str(exc)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return None, f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-2000:]}"
    return json.loads(lines[-1]), ""


def check_import(harness_dir: Path) -> SmokeStep:
    t0 = time.monotonic()
    data, err = _python(_IMPORT_SCRIPT, harness_dir)
    if data is None:
        return SmokeStep("import", False, err, time.monotonic() - t0)
    if data["errors"]:
        name, tb = next(iter(data["errors"].items()))
        last = tb.strip().splitlines()[-1] if tb.strip() else tb
        return SmokeStep("import", False, f"{len(data['errors'])} module(s) fail to import; {name}: {last}",
                         time.monotonic() - t0, data)
    return SmokeStep("import", True, f"{len(data['modules'])} modules import", time.monotonic() - t0, data)


def check_handbook(harness_dir: Path) -> SmokeStep:
    from handbook.check import check_harness

    t0 = time.monotonic()
    try:
        report = check_harness(harness_dir)
    except Exception as exc:  # noqa: BLE001 - a check that cannot run is a failed check, with the reason
        return SmokeStep("handbook", False, f"the Handbook check could not run: {type(exc).__name__}: {exc}",
                         time.monotonic() - t0)
    problems = [str(p) for p in report.problems]
    detail = report.summary() + ("".join(f"; {p}" for p in problems[:10]))
    return SmokeStep("handbook", report.ok, detail, time.monotonic() - t0, {"problems": problems})


def check_recording(harness_dir: Path) -> SmokeStep:
    t0 = time.monotonic()
    data, err = _python(_RECORDING_SCRIPT, harness_dir)
    if data is None:
        return SmokeStep("recording", False, err, time.monotonic() - t0)
    if not data["ok"]:
        return SmokeStep("recording", False, data["error"], time.monotonic() - t0, data)
    detail = f"{len(data['targets'])} boundaries resolve" + ("" if data["file"] else " (no recording.toml)")
    return SmokeStep("recording", True, detail, time.monotonic() - t0, data)


def trajectory_problems(doc: dict[str, Any]) -> list[str]:
    """What makes a run's rich trajectory and spans.jsonl invalid (empty: both are fine)."""
    problems = []
    traj = doc.get("trajectory") or {}
    steps = traj.get("steps") or []
    if not str(traj.get("schema_version", "")).startswith("ATIF"):
        problems.append("the trajectory is missing or has no ATIF schema_version")
    if not steps:
        problems.append("the trajectory has no steps")
    if [s.get("step_id") for s in steps] != list(range(1, len(steps) + 1)):
        problems.append("trajectory step ids are not 1..n")
    agent = [s for s in steps if s.get("source") == "agent"]
    if not agent:
        problems.append("the trajectory has no agent step")
    trial_id = traj.get("trial_id")
    for s in agent:
        if s.get("trial_id") != trial_id or not isinstance(s.get("episode"), int):
            problems.append(f"step {s.get('step_id')} lacks the trial id or an integer episode")
            break
    spans = doc.get("spans") or []
    if not spans:
        problems.append("spans.jsonl is missing or empty")
    elif not any(s["name"] == "rise.trial" for s in spans):
        problems.append("spans.jsonl has no rise.trial root span")
    elif any(s["attributes"].get("rise.trial_id", trial_id) != trial_id for s in spans):
        problems.append("a span carries another trial id than the trajectory")
    episodes = {s.get("episode") for s in agent}
    stray = sorted({s["episode"] for s in spans if s.get("episode") is not None} - episodes)
    if stray:
        problems.append(f"spans of episodes the trajectory does not have: {stray[:5]}")
    return problems


async def check_trial(harness_dir: Path, out_dir: Path) -> tuple[SmokeStep, str]:
    t0 = time.monotonic()
    try:
        run = await run_scenario(harness_dir, SMOKE_CASE, SMOKE_TASK, {}, out_dir, label="smoke")
    except Exception as exc:  # noqa: BLE001 - the trial stack failing is a failed step with its reason
        return SmokeStep("trial", False, f"the trial could not run: {type(exc).__name__}: {exc}",
                         time.monotonic() - t0), str(out_dir)
    doc = run.document
    problems = trajectory_problems(doc)
    if run.crash:
        problems.insert(0, run.crash)
    res = doc.get("result") or {}
    data = {"status": res.get("status"), "reward": res.get("reward"), "episodes": res.get("episodes"),
            "spans": len(doc.get("spans") or []), "steps": len(doc.get("steps") or [])}
    if problems:
        return SmokeStep("trial", False, "; ".join(problems), time.monotonic() - t0, data), str(run.trial_dir)
    detail = (f"{data['steps']} agent steps, {data['spans']} spans, status {data['status']}, "
              f"reward {data['reward']}")
    return SmokeStep("trial", True, detail, time.monotonic() - t0, data), str(run.trial_dir)


async def asmoke_check(harness_dir: str | Path, out_dir: str | Path | None = None) -> SmokeResult:
    """Async :func:`smoke_check`."""
    harness_dir = Path(harness_dir).resolve()
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="rise-smoke-"))
    if not (harness_dir / "main.py").is_file():
        step = SmokeStep("import", False, f"{harness_dir} is not a harness package (no main.py)")
        return SmokeResult(False, str(harness_dir), [step])
    steps = [await asyncio.to_thread(check_import, harness_dir),
             await asyncio.to_thread(check_handbook, harness_dir),
             await asyncio.to_thread(check_recording, harness_dir)]
    trial_dir = None
    if steps[0].passed:
        trial, trial_dir = await check_trial(harness_dir, out / "trial")
        steps.append(trial)
    else:
        steps.append(SmokeStep("trial", False, "not run: the package does not import"))
    result = SmokeResult(all(s.passed for s in steps), str(harness_dir), steps, trial_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "smoke.json").write_text(json.dumps(result.to_dict(), indent=1, default=str))
    return result


def smoke_check(harness_dir: str | Path, out_dir: str | Path | None = None) -> SmokeResult:
    """Run the four smoke steps on the harness package at ``harness_dir`` (see the module docstring); evidence
    (the trial folder, ``smoke.json``) goes to ``out_dir`` (a temp dir when not given)."""
    return asyncio.run(asmoke_check(harness_dir, out_dir))
