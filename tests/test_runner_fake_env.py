"""A directory-backed fake Environment and a scripted fake agent, for the runner and job unit tests.

The fake sandbox is a host folder; the task paths ``/app``, ``/logs``, ``/tests``, ``/solution`` in a command
line are rewritten into it and ``$SANDBOX_ROOT`` is set, so fixture scripts write ``$SANDBOX_ROOT/logs/...``.
The fake agent (``python -m tests.test_runner_fake_env --spec PATH``) acts out ``settings["mode"]``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from trials.agents import AgentSpec
from trials.environments.base import Environment, ExecResult
from trials.errors import EnvironmentBuildError
from trials.tasks import Task, TaskConfig

REPO = Path(__file__).resolve().parents[1]
_PATHS = re.compile(r"(?<![\w.$/-])/(tests|logs|app|solution)\b")


class DirEnv(Environment):
    kind = "fake"

    def __init__(self, task: Any, trial_dir: Path, job_id: str | None = None, fail_start: bool = False,
                 fail_exec: bool = False):
        self.root = Path(trial_dir) / "fake_sandbox"
        self.fail_start, self.fail_exec = fail_start, fail_exec
        self.started = self.stopped = False

    def _map(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    async def start(self) -> None:
        if self.fail_start:
            log = self.root.parent / "build.log"
            log.write_text("step 1/2: RUN false\nexit 1\n")
            raise EnvironmentBuildError("image build failed", log_path=str(log))
        for d in ("app", "logs/verifier", "logs/agent", "tests", "solution"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.started = True

    async def exec(self, cmd, cwd=None, env=None, timeout=None, user=None) -> ExecResult:
        if self.fail_exec:
            raise RuntimeError("fake exec exploded")
        cmd = _PATHS.sub(lambda m: f"{self.root}/{m.group(1)}", cmd)
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", cmd, cwd=str(self._map(cwd or "/app")), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {}), "SANDBOX_ROOT": str(self.root)},
            start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return ExecResult(returncode=-9, timed_out=True)
        return ExecResult(returncode=proc.returncode, stdout=out.decode(), stderr=err.decode())

    async def upload(self, src: Path, dst: str) -> None:
        shutil.copytree(src, self._map(dst), dirs_exist_ok=True)

    async def download(self, src: str, dst: Path) -> None:
        shutil.copytree(self._map(src), dst, dirs_exist_ok=True)

    async def stop(self) -> None:
        self.stopped = True

    def handle(self) -> dict[str, Any]:
        return {"kind": "fake", "root": str(self.root)}

    @classmethod
    def attach(cls, handle):  # the fake agent writes into the folder directly
        raise NotImplementedError


TEST_SH = """#!/bin/bash
mkdir -p "$SANDBOX_ROOT/logs/verifier"
if [ -n "$VERIFIER_SLEEP" ]; then sleep "$VERIFIER_SLEEP"; fi
if [ "$(cat "$SANDBOX_ROOT/app/answer.txt" 2>/dev/null)" = "42" ]; then r=1; else r=0; fi
case "$REWARD_STYLE" in
  json) echo "{\\"reward\\": $r, \\"other\\": 0.5}" > "$SANDBOX_ROOT/logs/verifier/reward.json";
        echo 0 > "$SANDBOX_ROOT/logs/verifier/reward.txt" ;;
  none) [ "$r" = 1 ] ;;
  *) echo $r > "$SANDBOX_ROOT/logs/verifier/reward.txt" ;;
esac
"""


def make_task(root: Path, name: str = "t1", verifier_env: dict | None = None, agent_timeout: float = 30,
              verifier_timeout: float = 30, legacy: bool = False) -> Task:
    path = root / name
    (path / "tests").mkdir(parents=True, exist_ok=True)
    (path / "tests" / "test.sh").write_text(TEST_SH)
    config = TaskConfig.model_validate({"verifier": {"timeout_sec": verifier_timeout, "env": verifier_env or {}},
                                        "agent": {"timeout_sec": agent_timeout}})
    return Task(name=name, path=path, config=config, instruction="write 42 to /app/answer.txt",
                legacy_exit_code=legacy)


def fake_agent(name: str = "fake") -> AgentSpec:
    return AgentSpec(kind="process", name=name, harness_version=f"{name}-v1",
                     argv=[sys.executable, "-m", "tests.test_runner_fake_env", "--spec", "{spec}"],
                     env={"PYTHONPATH": str(REPO)})


def agent_main(spec_path: str) -> int:
    """The fake agent: modes solve, wrong, sleep, crash, unreachable, error, slow_solve (settings["mode"],
    or settings["modes"][task] per task)."""
    from trials.harness_api import AgentOutcome, CostLedger, TrialSpec

    spec = TrialSpec.load(spec_path)
    mode = spec.settings.get("modes", {}).get(spec.task_name, spec.settings.get("mode", "solve"))
    root = Path(spec.env["root"])
    log = Path(spec.settings["run_log"]) if "run_log" in spec.settings else None
    if log:  # every agent start appends a line: the job tests count runs per cell
        with open(log, "a") as fh:
            fh.write(spec.trial_id + "\n")
    cost = CostLedger()
    cost.generator.add(100, 10)
    if mode in ("solve", "slow_solve"):
        if mode == "slow_solve":
            time.sleep(float(spec.settings.get("sleep", 1.0)))
        (root / "app" / "answer.txt").write_text("42")
    elif mode == "wrong":
        (root / "app" / "answer.txt").write_text("41")
    elif mode == "sleep":
        child = __import__("subprocess").Popen(["sleep", "300"])
        (Path(spec.agent_dir) / "child.pid").write_text(str(child.pid))
        time.sleep(300)
    elif mode == "crash":
        raise SystemExit(3)
    elif mode == "unreachable":
        AgentOutcome(status="error", error_kind="model_unreachable", error="connection refused").write(spec.agent_dir)
        return 1
    elif mode == "sandbox_lost":
        AgentOutcome(status="error", error_kind="sandbox", error="tmux: no server running").write(spec.agent_dir)
        return 1
    elif mode == "error":
        AgentOutcome(status="error", error_kind="crash", error="boom", cost=cost).write(spec.agent_dir)
        return 1
    AgentOutcome(status="completed", episodes=2, cost=cost).write(spec.agent_dir)
    return 0


def test_dir_env_roundtrip(tmp_path):
    env = DirEnv(None, tmp_path)
    asyncio.run(env.start())
    res = asyncio.run(env.exec("echo hi > /app/x && cat /app/x"))
    assert res.ok and res.stdout == "hi\n"
    assert json.loads(json.dumps(env.handle()))["kind"] == "fake"


if __name__ == "__main__":
    sys.exit(agent_main(sys.argv[sys.argv.index("--spec") + 1]))
