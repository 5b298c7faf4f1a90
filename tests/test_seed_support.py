"""Shared helpers for the seed-harness tests (no tests here).

``HostEnv`` is a unit-test stand-in for a sandbox: it runs commands with bash on the host, with its own tmux
socket folder so tests never meet each other's (or anyone's) tmux server. The tests that must show the real
thing use ``trials.environments.local.LocalEnvironment`` instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from harness_seed import loop
from harness_seed.settings import load_settings
from tests.fakes.openai_server import ScriptedServer
from trials.endpoints.client import ModelClient
from trials.endpoints.spec import EndpointSpec
from trials.environments.base import Environment, ExecResult

HAVE_TMUX = shutil.which("tmux") is not None


class HostEnv(Environment):
    """Runs ``bash -c`` on the host in ``root`` with a private ``TMUX_TMPDIR``."""

    kind = "host-test"

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmux_dir = Path("/tmp") / f"rise-seed-{uuid.uuid4().hex[:8]}"  # socket paths must stay short
        self.tmux_dir.mkdir()
        self.calls: list[str] = []

    async def start(self) -> None:
        pass

    async def exec(self, cmd: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout: float | None = None, user: str | None = None) -> ExecResult:
        self.calls.append(cmd)
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root),
                    "TMUX_TMPDIR": str(self.tmux_dir), "LANG": "C.UTF-8", **(env or {})}
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", cmd, cwd=cwd or self.root, env=full_env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return ExecResult(returncode=124, timed_out=True)
        return ExecResult(returncode=proc.returncode, stdout=out.decode(errors="replace"),
                          stderr=err.decode(errors="replace"))

    async def upload(self, src: Path, dst: str) -> None:
        shutil.copy(src, dst)

    async def download(self, src: str, dst: Path) -> None:
        shutil.copy(src, dst)

    async def stop(self) -> None:
        await self.exec("tmux kill-server 2>/dev/null; true")
        shutil.rmtree(self.tmux_dir, ignore_errors=True)

    def handle(self) -> dict[str, Any]:
        return {"kind": self.kind, "root": str(self.root)}

    @classmethod
    def attach(cls, handle: dict[str, Any]) -> HostEnv:
        return cls(Path(handle["root"]))


def fast_settings(tmp_path: Path, **overrides: Any):
    """Settings for tests: no real retry waits, the pane log in ``tmp_path``, short tmux timeouts."""
    base = {
        "model.retry_wait_min_sec": 0.01, "model.retry_wait_max_sec": 0.02,
        "tmux.pane_log": str(tmp_path / "pane-in-sandbox.log"), "tmux.exec_timeout_sec": 10.0,
    }
    base.update(overrides)
    return load_settings(base)


def reply(analysis: str = "a", plan: str = "p", commands: list[tuple[str, float]] | None = None,
          complete: bool = False) -> str:
    """A well-formed JSON-format reply."""
    import json

    cmds = [{"keystrokes": k, "duration": d} for k, d in (commands or [])]
    return json.dumps({"analysis": analysis, "plan": plan, "commands": cmds, "task_complete": complete})


async def run_agent(responder: Any, tmp_path: Path, *, env: Environment | None = None, instruction: str = "do it",
                    server_kw: dict | None = None, spec_kw: dict | None = None, **overrides: Any):
    """Run the seed agent against a ScriptedServer; returns (agent, server, status or exception)."""
    settings = fast_settings(tmp_path, **overrides)
    own_env = env is None
    env = env or HostEnv(tmp_path / "host")
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir(exist_ok=True)
    with ScriptedServer(responder, **(server_kw or {})) as srv:
        client = ModelClient(EndpointSpec(base_url=srv.base_url, model="scripted", **(spec_kw or {})))
        agent = loop.Agent(instruction=instruction, settings=settings, env=env, client=client,
                           agent_dir=agent_dir, trial_id="t-1", model_name="scripted")
        try:
            status: Any = await agent.run()
        except Exception as exc:  # noqa: BLE001 (the tests inspect it)
            status = exc
        finally:
            await agent.close(status if isinstance(status, str) else "error")
            await client.aclose()
            if own_env:
                await env.stop()
    return agent, srv, status
